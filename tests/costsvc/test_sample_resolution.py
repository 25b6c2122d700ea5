"""Money at sample resolution through a real Prometheus into SQLite and PostgreSQL:
a pod that leaves mid-hour, two pods in sequence, the same on a MIG instance and on a
time-sliced GPU, a GPU lost for 20 minutes while held, idle GPU-hours and MIG memory-basis unit
prices (hand-computed figures in history14.py)."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

from sqlalchemy import create_engine, select

from costsvc.costs.queries import costs
from costsvc.db.models import Chargeback, GpuPresence
from costsvc.metrics.series import collect
from costsvc.reports.monthly import focus_csv
from costsvc.rules.chargeback import IDLE
from tests.costsvc.history import H100, ingest_with, model
from tests.costsvc.history14 import SAMPLE_HOUR
from tests.costsvc.history_checks import as_utc, assert_every_hour_adds_up
from tests.prom import Prometheus


def rows(url: str) -> list[Chargeback]:
    engine = create_engine(url)
    with engine.connect() as conn:
        found = list(conn.execute(select(Chargeback).order_by(Chargeback.team, Chargeback.node)))
    engine.dispose()
    return found  # type: ignore[return-value]


def by_team(url: str) -> dict[str, tuple[int, int, int]]:
    return {r.team: (r.allocated, r.used, r.waste) for r in rows(url) if r.team != IDLE}


def test_used_cost_at_sample_resolution(prometheus14: Prometheus, db_url: str) -> None:
    ingest_with(prometheus14.url, db_url, model(), [SAMPLE_HOUR])
    assert by_team(db_url) == {
        # held 10:00-10:30 at 80 %, then the GPU idled: 80 % efficient, not the hour's 40 %
        "leaver": (1_250_000, 1_000_000, 250_000),
        # two pods in sequence, 100 % then 0 %: not 50 % each
        "first": (1_250_000, 1_250_000, 0),
        "second": (1_250_000, 0, 1_250_000),
        # the same on a MIG instance (3g.40gb, 0.9 then 0.1)
        "early": (535_715, 482_144, 53_571),
        "late": (535_714, 53_571, 482_143),
        # and on a time-sliced GPU: own SM time while held, capped at the share
        "a": (312_500, 250_000, 62_500),
        "b": (312_500, 0, 312_500),
        # lost 10:20-10:40: 40 minutes charged, at the 50 % of the time it was available
        "p": (1_666_667, 833_334, 833_333),
    }
    idle = {r.node: r for r in rows(db_url) if r.team == IDLE}
    # every idle line carries its GPU-hours; the lost GPU's idle is all unavailable
    assert {
        n: (r.idle, r.gpu_hours, r.unavailable, r.unavailable_gpu_hours) for n, r in idle.items()
    } == {
        "node-1": (1_250_000, 500_000, 0, 0),
        "node-3": (1_428_571, 571_429, 0, 0),
        "node-4": (1_875_000, 750_000, 0, 0),
        "node-5": (833_333, 333_333, 833_333, 333_333),
    }
    # Σ GPU-hours of the lines = the fleet's GPU-hours; Σ attributed + idle = fleet cost
    assert sum(r.gpu_hours for r in rows(db_url)) == 5_000_000
    assert assert_every_hour_adds_up(db_url) == 1
    engine = create_engine(db_url)
    with engine.connect() as conn:
        lost = dict(conn.execute(select(GpuPresence.gpu_uuid, GpuPresence.lost_us)).all())
        hours = set(conn.execute(select(Chargeback.hour)).scalars())
    engine.dispose()
    assert {as_utc(h) for h in hours} == {SAMPLE_HOUR}
    assert lost == {"GPU-S1": 0, "GPU-S2": 0, "GPU-S3": 0, "GPU-S4": 0, "GPU-S5": 1_200_000_000}
    # what /v1/costs answers: the broken hardware's cost, where it was
    engine = create_engine(db_url)
    with engine.connect() as conn:
        answer = costs(
            conn, SAMPLE_HOUR, SAMPLE_HOUR + timedelta(hours=1), ["team", "node"], None, {}
        )
    engine.dispose()
    idle_rows = {r["group"]["node"]: r for r in answer if r["group"]["team"] == IDLE}
    assert idle_rows["node-5"]["unavailable_cost"] == "0.833333"
    assert idle_rows["node-5"]["unavailable_gpu_hours"] == "0.333333"
    assert idle_rows["node-1"]["unavailable_cost"] == "0.000000"
    assert idle_rows["node-1"]["gpu_hours"] == "0.500000"
    # and /metrics: the fleet's month-to-date cost of lost GPU time per cluster (public-safe:
    # no teams)
    engine = create_engine(db_url)
    families = {m.name: m for m in collect(engine, SAMPLE_HOUR + timedelta(days=1))}
    engine.dispose()
    lost_cost = families["costsvc_unavailable_cost_month_to_date"].samples
    assert [(x.labels, x.value) for x in lost_cost] == [
        ({"cluster": "c1", "currency": "USD"}, 0.833333)
    ]


def test_mig_memory_basis_unit_prices(prometheus14: Prometheus, db_url: str) -> None:
    ingest_with(prometheus14.url, db_url, model(mig_share_basis="memory"), [SAMPLE_HOUR])
    mig = {r.team: r for r in rows(db_url) if r.team in ("early", "late")}
    # 4 of 8 memory slices for 30 minutes each: 0.25 GPU-hours at 2.50, unit price 2.50
    assert {t: (r.allocated, r.gpu_hours) for t, r in mig.items()} == {
        "early": (625_000, 250_000),
        "late": (625_000, 250_000),
    }
    assert {Decimal(r.allocated) / r.gpu_hours for r in mig.values()} == {Decimal("2.5")}
    idle = {r.node: (r.idle, r.gpu_hours) for r in rows(db_url) if r.team == IDLE}
    assert idle["node-3"] == (1_250_000, 500_000)
    # the FOCUS export prices both per GPU-hour at the GPU's price
    engine = create_engine(db_url)
    text = "".join(focus_csv(engine, "2026-11"))
    engine.dispose()
    focus = list(csv.DictReader(io.StringIO(text)))
    mig_rows = [r for r in focus if r["x_MigProfile"] == "3g.40gb"]
    assert {(r["PricingUnit"], r["ListUnitPrice"]) for r in mig_rows} == {("GPU-Hours", "2.500000")}
    node3 = [r for r in focus if r["ResourceId"] == f"c1/nodes/node-3/{H100}"]
    assert [(r["PricingQuantity"], r["PricingUnit"], r["ListUnitPrice"]) for r in node3] == [
        ("0.500000", "GPU-Hours", "2.500000")
    ]
    assert assert_every_hour_adds_up(db_url) == 1
