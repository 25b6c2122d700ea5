"""``/metrics``: the cost service's own series for Prometheus (budget alerts, the FinOps
dashboard). Read from the database on scrape, at most every ``CACHE_SECONDS``. Documented in
docs/costsvc-metrics.md. Money is in units of the billing currency (a ``currency`` label)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy import Engine, func, select

from costsvc.attribution import IDLE
from costsvc.db.models import Budget, Chargeback, CostHour, IngestRun, Watermark
from costsvc.months import month_of, parse_month
from costsvc.queries import forecast
from costsvc.utc import as_utc

router = APIRouter(tags=["metrics"])
CACHE_SECONDS = 15.0
TOP_PODS = 10  # per team: the pods with the highest month-to-date cost (and waste)
OWNER = ("team", "project", "stage")


def _units(micro: int) -> float:
    return float(Decimal(micro).scaleb(-6))  # exposition values are floats by nature


def _ratio(a: int, b: int) -> float:
    return float(Decimal(a) / Decimal(b)) if b else 0.0


def collect(engine: Engine, now: datetime) -> list[Metric]:
    start, end = parse_month(month_of(now))
    c = Chargeback
    o = CostHour  # per-owner sums: what the owner-level series need
    g = {n: GaugeMetricFamily(n, h, labels=lab) for n, h, lab in (
        ("costsvc_cost_month_to_date", "Cost this month so far (allocated + idle spread "
         "onto the line)", [*OWNER, "currency"]),
        ("costsvc_waste_month_to_date", "Allocated-but-idle cost this month so far",
         [*OWNER, "currency"]),
        ("costsvc_cost_rate_per_hour", "Cost of the last ingested hour", [*OWNER, "currency"]),
        ("costsvc_idle_cost_month_to_date", "Cost of GPUs (or slices) nobody held, this month",
         ["currency"]),
        ("costsvc_efficiency_ratio", "Used / allocated cost, this month", list(OWNER)),
        ("costsvc_hourly_efficiency_ratio", "Used / allocated cost of the last ingested hour",
         list(OWNER)),
        ("costsvc_budget_amount", "Monthly budget", ["team", "project", "currency"]),
        ("costsvc_budget_used_ratio", "Month to date / budget", ["team", "project"]),
        ("costsvc_budget_forecast_ratio", "Month-end forecast / budget", ["team", "project"]),
        ("costsvc_pod_cost_month_to_date", f"Month-to-date cost of each team's top {TOP_PODS} "
         "pods by cost", ["team", "project", "namespace", "pod", "currency"]),
        ("costsvc_pod_waste_month_to_date", f"Month-to-date allocated-but-idle cost of each "
         f"team's top {TOP_PODS} pods by waste", ["team", "project", "namespace", "pod",
                                                  "currency"]),
        ("costsvc_pod_budget_share_ratio", "A pod's month-to-date cost / its share of the team "
         "budget (budget / pods the team ran this month), for the top pods by cost",
         ["team", "project", "namespace", "pod"]),
        ("costsvc_last_ingest_success_timestamp_seconds", "When an hour was last ingested",
         ["cluster"]),
        ("costsvc_ingest_lag_seconds", "Now - end of the last ingested hour", ["cluster"]),
    )}  # fmt: skip
    errors = CounterMetricFamily("costsvc_ingest_errors", "Failed hour ingests (and reprices)",
                                 labels=["cluster"])  # fmt: skip
    with engine.connect() as conn:
        last = conn.execute(select(func.max(o.hour))).scalar()
        last = as_utc(last) if last is not None else None
        owners = [o.team, o.project, o.stage, o.currency]
        sums = (func.sum(o.allocated), func.sum(o.used), func.sum(o.waste), func.sum(o.idle))
        for r in conn.execute(select(*owners, *sums).where(o.hour >= start, o.hour < end)
                              .group_by(*owners)):  # fmt: skip
            alloc, used, waste, idle = (int(v or 0) for v in r[4:])
            labels = [r.team, r.project, r.stage]
            g["costsvc_cost_month_to_date"].add_metric([*labels, r.currency],
                                                       _units(alloc + idle))  # fmt: skip
            if r.team == IDLE:
                continue
            g["costsvc_waste_month_to_date"].add_metric([*labels, r.currency], _units(waste))
            g["costsvc_efficiency_ratio"].add_metric(labels, _ratio(used, alloc))
        for cur, idle in conn.execute(select(o.currency, func.sum(o.idle))
                                      .where(o.hour >= start, o.hour < end)
                                      .group_by(o.currency)):  # fmt: skip
            g["costsvc_idle_cost_month_to_date"].add_metric([cur], _units(int(idle or 0)))
        if last is not None:
            for r in conn.execute(select(*owners, *sums).where(o.hour == last).group_by(*owners)):
                alloc, used, _, idle = (int(v or 0) for v in r[4:])
                labels = [r.team, r.project, r.stage]
                g["costsvc_cost_rate_per_hour"].add_metric([*labels, r.currency],
                                                           _units(alloc + idle))  # fmt: skip
                if r.team != IDLE:
                    g["costsvc_hourly_efficiency_ratio"].add_metric(labels, _ratio(used, alloc))
        budgets = conn.execute(select(Budget.team, Budget.project, Budget.amount,
                                      Budget.currency)).all()  # fmt: skip
        for b in budgets:
            f = forecast(conn, now, b.team, b.project or None)
            g["costsvc_budget_amount"].add_metric([b.team, b.project, b.currency],
                                                  _units(b.amount))  # fmt: skip
            g["costsvc_budget_used_ratio"].add_metric(
                [b.team, b.project], _ratio(f.month_to_date, b.amount)
            )
            g["costsvc_budget_forecast_ratio"].add_metric(
                [b.team, b.project], _ratio(f.forecast, b.amount)
            )
        team_budget = {b.team: b.amount for b in budgets if not b.project}
        pods = [c.team, c.project, c.namespace, c.pod, c.currency]
        per_pod = conn.execute(select(*pods, func.sum(c.allocated + c.idle), func.sum(c.waste))
                               .where(c.hour >= start, c.hour < end, c.team != IDLE,
                                      c.pod != "").group_by(*pods)).all()  # fmt: skip
    by_team: dict[str, list[Any]] = {}
    for r in per_pod:
        by_team.setdefault(r.team, []).append(r)
    for team, rows in sorted(by_team.items()):
        npods = len({(r.namespace, r.pod) for r in rows})
        for r in sorted(rows, key=lambda r: (-int(r[5] or 0), r.namespace, r.pod))[:TOP_PODS]:
            labels = [r.team, r.project, r.namespace, r.pod]
            g["costsvc_pod_cost_month_to_date"].add_metric([*labels, r.currency],
                                                           _units(int(r[5] or 0)))  # fmt: skip
            if team in team_budget:
                share = Decimal(team_budget[team]) / npods
                g["costsvc_pod_budget_share_ratio"].add_metric(
                    labels, float(Decimal(int(r[5] or 0)) / share)
                )
        for r in sorted(rows, key=lambda r: (-int(r[6] or 0), r.namespace, r.pod))[:TOP_PODS]:
            g["costsvc_pod_waste_month_to_date"].add_metric(
                [r.team, r.project, r.namespace, r.pod, r.currency], _units(int(r[6] or 0))
            )
    with engine.connect() as conn:
        for cluster, hour in conn.execute(select(Watermark.cluster, Watermark.hour)):
            done_at = conn.execute(select(func.max(IngestRun.finished_at)).where(
                IngestRun.cluster == cluster, IngestRun.status == "done")).scalar()  # fmt: skip
            if done_at is not None:
                g["costsvc_last_ingest_success_timestamp_seconds"].add_metric(
                    [cluster], as_utc(done_at).timestamp()
                )
            lag = (now - (as_utc(hour) + timedelta(hours=1))).total_seconds()
            g["costsvc_ingest_lag_seconds"].add_metric([cluster], max(0.0, lag))
        failed = dict(conn.execute(select(IngestRun.cluster, func.count())
                                   .where(IngestRun.status == "failed")
                                   .group_by(IngestRun.cluster)).all())  # fmt: skip
        clusters = set(conn.execute(select(Watermark.cluster)).scalars()) | set(failed)
    for cluster in sorted(clusters):
        errors.add_metric([cluster], float(failed.get(cluster, 0)))
    return [*g.values(), errors]


class _Collector:
    def __init__(self, request: Request) -> None:
        self.request = request

    def collect(self) -> Iterator[Metric]:
        state = self.request.app.state
        lock: threading.Lock = state.__dict__.setdefault("metrics_lock", threading.Lock())
        with lock:
            cached = getattr(state, "metrics_cache", None)
            if cached is None or time.monotonic() - cached[0] > CACHE_SECONDS:
                cached = (time.monotonic(), collect(state.engine, state.clock()))
                state.metrics_cache = cached
        yield from cached[1]


@router.get(
    "/metrics",
    response_class=Response,
    summary="Prometheus exposition",
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
def metrics(request: Request) -> Response:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(request))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
