"""Alembic owns the schema: up, down, up again, and the models agree with the migrations."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from costsvc.db.migrate import downgrade, upgrade
from costsvc.db.models import Base

TABLES = {"chargeback", "cost_model_versions", "gpu_hours", "ingest_runs", "namespace_labels",
          "pod_labels", "usage_facts", "watermarks"}  # fmt: skip


def tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade(db_url: str) -> None:
    upgrade(db_url)
    assert tables(db_url) == TABLES
    downgrade(db_url, "base")
    assert tables(db_url) == set()
    upgrade(db_url)
    assert tables(db_url) == TABLES


def test_models_and_migrations_agree(db_url: str) -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    finally:
        engine.dispose()
    assert diff == []
