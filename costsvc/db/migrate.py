"""Run Alembic from code (``gpu-costsvc db upgrade``), with the repository's migrations/.

On PostgreSQL an upgrade holds a session advisory lock for its whole run, so that the init
containers of several replicas starting together (deploy/helm) upgrade one after another: the
first does the work, the others wait for it and then find the schema at the head.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, pool, text

ROOT = Path(__file__).resolve().parents[2]
LOCK_KEY = zlib.crc32(b"gpu-costsvc/migrate")  # not the writers' keys (costsvc/db/runs.py)


def alembic_config(url: str) -> Config:
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    config = alembic_config(url)
    if not url.startswith("postgresql"):
        command.upgrade(config, revision)
        return
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": LOCK_KEY})
            conn.commit()  # the session lock outlives the transaction; keep none open
            config.attributes["connection"] = conn  # migrations/env.py runs on it
            try:
                command.upgrade(config, revision)
            finally:
                conn.rollback()
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": LOCK_KEY})
                conn.commit()
    finally:
        engine.dispose()


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)
