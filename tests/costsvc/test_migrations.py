"""Alembic owns the schema: up, down, up again, and the models agree with the migrations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import MetaData, Table, create_engine, insert, inspect, select

from costsvc.db.hour_facts import flush_pod_days
from costsvc.db.migrate import downgrade, upgrade
from costsvc.db.models import Base, PodDayPending

TABLES = {
    "api_tokens",
    "audit_log",
    "budgets",
    "chargeback",
    "controller_owners",
    "cost_days",
    "cost_hours",
    "cost_pod_days",
    "cost_pod_days_pending",
    "cost_model_versions",
    "cost_months",
    "data_version",
    "gpu_hours",
    "inference_hours",
    "ingest_runs",
    "local_queue_links",
    "month_closes",
    "namespace_labels",
    "pod_labels",
    "pod_owners",
    "queue_hours",
    "quota_usage",
    "recommendations",
    "resource_quotas",
    "usage_facts",
    "watermarks",
    "web_sessions",
}


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


def test_hours_ingested_before_0002_are_repriced_from_their_facts(db_url: str) -> None:
    from sqlalchemy import DateTime, bindparam, text

    from costsvc.ingest.reprice import reprice, stale_hours
    from tests.costsvc.history import MODEL
    from tests.costsvc.history_checks import assert_every_hour_adds_up, by_team

    hour = datetime(2026, 11, 10, 5, tzinfo=UTC)
    at = bindparam("h", type_=DateTime(timezone=True))  # stored as the models store it
    upgrade(db_url, "0001")
    engine = create_engine(db_url)
    with engine.begin() as conn:  # an hour as revision 0001 stored it: no price, no cost
        conn.execute(
            text(
                "INSERT INTO gpu_hours"
                " (hour, cluster, node, gpu_uuid, model, node_pool, present_us)"
                " VALUES (:h, 'c1', 'n1', 'GPU-A', 'NVIDIA H100 80GB HBM3', NULL, 3600000000)"
            ).bindparams(at),
            {"h": hour},
        )
        conn.execute(
            text(
                "INSERT INTO usage_facts (hour, cluster, node, gpu_uuid, gi_id, namespace, pod,"
                " container, share_us, busy_share_us, sm_us, shared) VALUES (:h, 'c1', 'n1',"
                " 'GPU-A', -1, 'ml', 'p', 'main', 1800000000, 900000000, 0, false)"
            ).bindparams(at),
            {"h": hour},
        )
        conn.execute(
            text(
                "INSERT INTO chargeback (hour, cluster, team, project, stage, namespace, pod,"
                " currency, allocated, used, waste, idle, gpu_hours) VALUES (:h, 'c1', 'nlp', 'x',"
                " 'prod', 'ml', 'p', 'USD', 1, 0, 1, 0, 500000)"
            ).bindparams(at),
            {"h": hour},
        )
    upgrade(db_url)
    assert stale_hours(engine, MODEL) == [hour]  # price 0 after the migration: stale
    assert reprice(engine, MODEL, "c1", [hour]).done == [hour]
    engine.dispose()
    # 2.50 x half an hour to nlp (the owner it was charged to), used half of it; the rest idle
    assert by_team(db_url) == {
        "nlp": (1_250_000, 625_000, 625_000, 0),
        "__idle__": (0, 0, 0, 1_250_000),
    }
    assert_every_hour_adds_up(db_url)


def test_a_downgrade_past_0017_waits_for_the_pending_days(db_url: str) -> None:
    """A day whose per-pod rows are still pending would lose them below 0017 (nothing there
    writes them): the downgrade refuses, naming what to run, and leaves the schema as it was;
    once an ingest has written the day (``flush_pod_days``, as every run ends), it goes ahead."""
    upgrade(db_url)
    engine = create_engine(db_url)
    try:
        day = datetime(2026, 10, 1, tzinfo=UTC)
        with engine.begin() as conn:
            end = day + timedelta(days=1)
            conn.execute(insert(PodDayPending).values(day=day, cluster="c1", day_end=end))
        with pytest.raises(RuntimeError, match="gpu-costsvc ingest"):
            downgrade(db_url, "0016")
        assert "cost_pod_days_pending" in tables(db_url)
        assert flush_pod_days(engine) == 1
    finally:
        engine.dispose()
    downgrade(db_url, "0016")
    assert tables(db_url) == TABLES - {"cost_pod_days_pending", "queue_hours", "local_queue_links"}


def test_0022_bills_queue_rows_in_their_hours_month(db_url: str) -> None:
    """Rows of queue_hours written before 0022 are billed in their hour's month, as originals;
    a downgrade below it drops the corrections and keeps the originals."""
    upgrade(db_url, "0021")
    engine = create_engine(db_url)
    key = {"cohort": "research", "cluster_queue": "cq-b", "flavor": "h100"}
    facts = dict.fromkeys(("nominal_s", "used_s", "within_s", "borrowed_s", "lent_s"), 0)
    row = {
        **key,
        **facts,
        "hour": datetime(2026, 10, 31, 23, tzinfo=UTC),  # October's last hour
        "cluster": "c1",
        "resource": "nvidia.com/gpu",
        "team": "beta",
        "idle_s": 14_400,
        "policy": "none",
        "currency": "USD",
        "charge": 0,
        "credit": 0,
        "price": None,
        "premium_ppm": 1_000_000,
    }
    table = Table("queue_hours", MetaData(), autoload_with=engine)
    try:
        with engine.begin() as conn:
            conn.execute(insert(table).values(row))
        upgrade(db_url)
        table = Table("queue_hours", MetaData(), autoload_with=engine)
        with engine.begin() as conn:
            found = conn.execute(select(table.c.billing_month, table.c.correction)).all()
            assert [tuple(r) for r in found] == [("2026-10", False)]
            fix = {**row, "billing_month": "2026-11", "correction": True, "charge": 9_000_000}
            conn.execute(insert(table).values(fix))
        downgrade(db_url, "0021")
        table = Table("queue_hours", MetaData(), autoload_with=engine)
        with engine.connect() as conn:
            assert conn.execute(select(table.c.charge)).scalars().all() == [0]
    finally:
        engine.dispose()
