"""DRA claims and fractional GPUs (HAMi) through a real Prometheus into SQLite and PostgreSQL,
exact to the micro-unit (money by hand in history_fractional.py): a DRA-held GPU is charged to
its team, a claim shared by three pods splits under ``equal`` and ``usage``, HAMi 30 % + 50 %
on compute, memory and max bases, an over-subscribed GPU scaled to its cost at each instant."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, select

from costsvc.db.models import UsageFact
from costsvc.ingest.reprice import reprice, stale_hours
from costsvc.rules.chargeback import IDLE
from tests.costsvc.history import ingest_with, model
from tests.costsvc.history_checks import assert_every_hour_adds_up, by_team, tables
from tests.costsvc.history_fractional import SIXTEENTH
from tests.prom import Prometheus


def money(url: str) -> dict[str, int]:
    return {team: a + i for team, (a, _, _, i) in by_team(url).items()}


def idle_by_node(url: str) -> dict[str, int]:
    from costsvc.db.models import Chargeback

    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            select(Chargeback.node, Chargeback.idle).where(Chargeback.team == IDLE)
        ).all()
    engine.dispose()
    return {node: int(idle) for node, idle in rows}


DRA = {"solo": 2_500_000}
PART = {"o3": 1_375_000, "o4": 625_000}  # over-subscribed for half the hour: scaled then only


@pytest.mark.parametrize(
    ("policies", "expected", "idle"),
    [
        (
            {},
            {
                **DRA,
                **{"s0": 833_334, "s1": 833_333, "s2": 833_333},
                **{"h30": 750_000, "h50": 1_250_000, "o1": 1_250_000, "o2": 1_250_000},
                **PART,
            },
            {"node-HAMI": 500_000, "node-PART": 500_000},
        ),
        (
            {"shared_gpu_policy": "usage"},
            {
                **DRA,
                **{"s0": 1_666_667, "s1": 833_333, "s2": 0},
                # HAMi's holdings are shared too: no per-container SM series, so equally
                **{"h30": 1_000_000, "h50": 1_000_000, "o1": 1_250_000, "o2": 1_250_000},
                **{"o3": 1_000_000, "o4": 1_000_000},
            },
            {"node-HAMI": 500_000, "node-PART": 500_000},
        ),
        (
            {"fractional_share_basis": "memory"},
            {
                **DRA,
                **{"s0": 833_334, "s1": 833_333, "s2": 833_333},
                **{"h30": 500_000, "h50": 1_000_000, "o1": 750_000, "o2": 750_000},
                **{"o3": 375_000, "o4": 187_500},
            },
            {"node-HAMI": 1_000_000, "node-OVER": 1_000_000, "node-PART": 1_937_500},
        ),
        (
            {"fractional_share_basis": "max"},
            {
                **DRA,
                **{"s0": 833_334, "s1": 833_333, "s2": 833_333},
                **{"h30": 750_000, "h50": 1_250_000, "o1": 1_250_000, "o2": 1_250_000},
                **PART,
            },
            {"node-HAMI": 500_000, "node-PART": 500_000},
        ),
    ],
    ids=["equal-compute", "usage", "memory", "max"],
)
def test_dra_and_hami_by_hand(
    prometheus: Prometheus,
    db_url: str,
    policies: dict[str, str],
    expected: dict[str, int],
    idle: dict[str, int],
) -> None:
    ingest_with(prometheus.url, db_url, model(**policies), [SIXTEENTH])
    got = money(db_url)
    assert got.pop(IDLE, 0) == sum(idle.values())
    assert got == expected
    assert idle_by_node(db_url) == idle
    assert assert_every_hour_adds_up(db_url) == 1
    engine = create_engine(db_url)
    with engine.connect() as conn:
        memory = dict(conn.execute(select(UsageFact.pod, UsageFact.memory_share_us)).all())
    engine.dispose()
    assert memory["h30"] == 720_000_000 and memory["solo"] == 3_600_000_000  # kept: reprices


@pytest.mark.parametrize("basis", ["memory", "max"])
def test_reprice_on_another_basis_equals_a_fresh_ingest(
    prometheus: Prometheus, db_url: str, tmp_path: Path, basis: str
) -> None:
    """The memory shares kept in usage_facts are what a reprice reads: a price change that
    reprices the hour on the memory (or max) basis gives the rows a fresh ingest gives."""
    new = model("3.10", fractional_share_basis=basis)
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    ingest_with(prometheus.url, fresh, new, [SIXTEENTH])
    ingest_with(prometheus.url, db_url, model(), [SIXTEENTH])
    engine = create_engine(db_url)
    assert stale_hours(engine, new) == [SIXTEENTH]
    assert reprice(engine, new, "c1", [SIXTEENTH]).done == [SIXTEENTH]
    engine.dispose()
    assert tables(db_url) == tables(fresh)
    assert assert_every_hour_adds_up(db_url) == 1
