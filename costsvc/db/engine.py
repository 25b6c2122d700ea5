"""The one place engines are made (never at import time)."""

from __future__ import annotations

from sqlalchemy import Engine, create_engine, text

APPLICATION = "gpu-costsvc"
SQLITE_BUSY_TIMEOUT = 60.0  # seconds a writer waits for another's write lock on SQLite


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        return create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT})
    # the API serves requests from a thread pool (40 threads): enough connections for a burst
    # prepare_threshold=None: no server-side prepared statements, so PostgreSQL plans every
    # range query for its actual bounds (a generic plan made a month's scan 2-4x slower)
    # application_name: the service's sessions in pg_stat_activity
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=10,
        max_overflow=20,
        connect_args={"prepare_threshold": None, "application_name": APPLICATION},
    )


def reachable(engine: Engine) -> bool:
    """Whether the database answers a trivial query."""
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception:
        return False
    return True
