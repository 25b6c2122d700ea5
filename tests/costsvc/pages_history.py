"""A small history for the pages' tests, written straight through the cost service's own
attribution and writer (costsvc/rules/attribution.py, costsvc/db/hour_facts.py) — no Prometheus: the
pages read the tables, and what the ingest reads is tested elsewhere.

Cluster c1, five GPUs on three nodes, priced H100 2.50 and A100 1.20 an hour, drawing
60-650 W (grid 350 g/kWh, PUE 1.2):

node-a  GPU-A0 H100  team a, project train (prod): a/train-0 all hour, busy 60-90 %
        GPU-A1 H100  team a, project eval (dev): a/eval-0 half the hour, busy 30 %; idle rest
node-b  GPU-B0 H100  team b/serve-0 the first half hour (busy 50 %), nlp/llm-0 the second
                     (busy 80 %)
        GPU-B1 A100  scratch/orphan (no team: __unallocated__, no utilisation: unmeasured);
                     lost for 10 minutes in the December hours (unavailable)
node-c  GPU-C0 A100  nobody's: idle every hour (the idlest GPU)

Hours: 2026-10-31 22:00 and 23:00 (the cluster's first: October is complete, closable);
12:00 of every other day of November, and 06:00 of 2026-11-15 failed (November is
incomplete: refused); 00:00 and 06:00 of 2026-12-01..03 (the month of :data:`NOW`).
Budgets: a 20 (exceeded in December), b 9 (past 80 %), nlp 1000. One rightsizing
recommendation and one quota row.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from sqlalchemy import Engine, create_engine

from costsvc.advice.repository import save_advice
from costsvc.budgets.repository import BudgetValues, create_budget
from costsvc.db import runs
from costsvc.db.hour_facts import store_hour
from costsvc.db.migrate import upgrade
from costsvc.rules.attribution import GpuHour, Holding, HourFacts, Owner, attribute_hour
from costsvc.rules.cost_model import CostModel, parse

NOW = datetime(2026, 12, 3, 12, 30, tzinfo=UTC)
CLUSTER = "c1"
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
TEAMS = ["a", "b", "nlp"]
FAILED = datetime(2026, 11, 15, 6, tzinfo=UTC)
MODEL: CostModel = parse(
    {
        "versions": [
            {
                "effective_from": "2026-10-01T00:00:00Z",
                "prices": [{"model": H100, "hourly": "2.50"}, {"model": A100, "hourly": "1.20"}],
            }
        ],
        "carbon": [{"effective_from": "2026-10-01T00:00:00Z", "grams_per_kwh": 350, "pue": 1.2}],
    }
)
OWNERS = {
    "a": Owner("a", "train", "prod"),
    "a-eval": Owner("a", "eval", "dev"),
    "b": Owner("b", "serve", "prod"),
    "nlp": Owner("nlp", "llm", "prod"),
}


def hours() -> list[datetime]:
    out = [datetime(2026, 10, 31, h, tzinfo=UTC) for h in (22, 23)]
    out += [datetime(2026, 11, day, 12, tzinfo=UTC) for day in range(1, 31, 2)]
    for day in range(1, 4):
        out += [datetime(2026, 12, day, h, tzinfo=UTC) for h in (0, 6)]
    return out


def facts(hour: datetime) -> HourFacts:
    n = hour.day + hour.hour  # the utilisation varies from hour to hour
    lost = Decimal(600) if hour.month == 12 else Decimal(0)
    full, half = Decimal(3600), Decimal(1800)
    f = HourFacts(hour)

    def gpu(node: str, uuid: str, model: str, watts: int, lost: Decimal = Decimal(0)) -> GpuHour:
        energy = watts * 3600 * 1000  # mJ drawn in the hour
        return GpuHour(CLUSTER, node, uuid, model, None, full, energy, 0, full, 60_000, lost)

    f.gpus = [
        gpu("node-a", "GPU-A0", H100, 500 + 5 * (n % 31)),
        gpu("node-a", "GPU-A1", H100, 250),
        gpu("node-b", "GPU-B0", H100, 420),
        gpu("node-b", "GPU-B1", A100, 200, lost),
        gpu("node-c", "GPU-C0", A100, 60),
    ]
    busy = Decimal(60 + n % 31) / 100

    def hold(gpu: str, ns: str, pod: str, seconds: Decimal, use: Decimal | None) -> Holding:
        return Holding(
            gpu, ns, pod, "main", seconds, None if use is None else seconds * use, cluster=CLUSTER
        )

    f.holdings = [
        hold("GPU-A0", "team-a", "train-0", full, busy),
        hold("GPU-A1", "team-a", "eval-0", half, Decimal("0.3")),
        hold("GPU-B0", "team-b", "serve-0", half, Decimal("0.5")),
        hold("GPU-B0", "nlp", "llm-0", half, Decimal("0.8")),
        hold("GPU-B1", "scratch", "orphan", full - lost, None),
    ]
    f.node_of = {g.key: g.node for g in f.gpus}
    return f


def owner(cluster: str, namespace: str, pod: str) -> Owner | None:
    return {
        "train-0": OWNERS["a"],
        "eval-0": OWNERS["a-eval"],
        "serve-0": OWNERS["b"],
        "llm-0": OWNERS["nlp"],
    }.get(pod)


def reprice(db_url: str, hour: datetime, h100: str) -> None:
    """``hour`` stored again with the H100 at ``h100`` an hour (a back-dated price: in a
    closed month, corrections billed in the next open one)."""
    engine = create_engine(db_url)
    doc = MODEL.document()
    doc["versions"][0]["prices"][0]["hourly"] = h100
    model = parse(doc)
    try:
        run_id = runs.start_run(
            engine, CLUSTER, hour, "ingest", runs.record_cost_model(engine, model)
        )
        f = facts(hour)
        store_hour(
            engine,
            CLUSTER,
            f,
            attribute_hour(hour, f.gpus, f.holdings, owner, model),
            "USD",
            run_id,
        )
    finally:
        engine.dispose()


def seed(db_url: str) -> None:
    """The history above in a fresh database (migrated here)."""
    upgrade(db_url)
    engine = create_engine(db_url)
    try:
        _seed(engine)
    finally:
        engine.dispose()


def _seed(engine: Engine) -> None:
    model_id = runs.record_cost_model(engine, MODEL)
    for hour in sorted([*hours(), FAILED]):
        run_id = runs.start_run(engine, CLUSTER, hour, "ingest", model_id)
        if hour == FAILED:
            runs.fail_run(engine, run_id, "query API: 503 Service Unavailable")
            continue
        f = facts(hour)
        result = attribute_hour(hour, f.gpus, f.holdings, owner, MODEL)
        store_hour(engine, CLUSTER, f, result, MODEL.currency, run_id)
    for team, amount in (("a", 20), ("b", 9), ("nlp", 1000)):
        values = BudgetValues(team, "", amount * 1_000_000, "USD", [0.8, 1.0])
        create_budget(engine, values, NOW, "test", {"team": team})
    window = {"computed_at": NOW, "window_start": NOW - timedelta(days=7), "window_end": NOW}
    recommendation = {
        **window,
        "team": "a",
        "namespace": "team-a",
        "workload_kind": "Deployment",
        "workload": "eval",
        "gpu_model": H100,
        "pods": 1,
        "action": "mig",
        "target": "3g.40gb",
        "reason": "p95 memory 18 GiB, activity 30 %: fits a 3g.40gb instance",
        "device_hours": 84_000_000,
        "gpu_hours": 42_000_000,
        "memory_p95_bytes": 18 * 2**30,
        "memory_peak_bytes": 20 * 2**30,
        "activity_p95_ppm": 300_000,
        "activity_source": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "idle_ppm": 500_000,
        "current_share_ppm": 1_000_000,
        "target_share_ppm": 428_571,
        "currency": "USD",
        "current_monthly": 1_825_000_000,
        "recommended_monthly": 782_142_857,
        "saving_monthly": 1_042_857_143,
    }
    quota = {
        **window,
        "team": "a",
        "namespace": "team-a",
        "resource": "nvidia.com/gpu",
        "source": "kubernetes",
        "hard_milli": 4000,
        "used_milli": 2000,
        "held_milli": 1500,
        "active_milli": 900,
        "currency": "USD",
        "unit_price": 2_500_000,
        "unused_monthly": 4_562_500_000,
        "idle_monthly": 1_095_000_000,
    }
    save_advice(engine, CLUSTER, [recommendation], [quota])
