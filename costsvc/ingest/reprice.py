"""Reprice ingested hours from their stored facts when the cost model prices them differently.

Every ``gpu_hours`` row keeps the price it was charged at. When the cost model changes — a new
version from a date forward, or one back-dated into hours already ingested — the hours whose
price the model now gives differently are exactly the ones it covers (:func:`stale_hours`), and
:func:`reprice` recomputes them from ``gpu_hours`` and ``usage_facts`` — no Prometheus needed,
so hours past its retention are repriced too. Owners stay as they were charged (the labels in
force at that hour, resolved when the hour was ingested). The hour's chargeback and GPU rows
are replaced in one transaction, under the same lock as ingestion.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal

from sqlalchemy import Connection, Engine, select

from costsvc.attribution import IDLE, GpuHour, Holding, Owner, attribute_hour
from costsvc.costmodel import CostModel, MissingPrices
from costsvc.db.models import Chargeback, GpuPresence, UsageFact
from costsvc.ingest.hour import HourFacts
from costsvc.ingest.run import (
    RETRYABLE,
    Report,
    finish_run,
    lock_clusters,
    mark_done,
    record_cost_model,
    record_failure,
    replace_hour,
    start_run,
)
from costsvc.utc import as_utc

US = Decimal(1_000_000)


def stale_hours(engine: Engine, model: CostModel) -> list[datetime]:
    """Ingested hours with a GPU whose price under ``model`` differs from the price it was
    charged at (or that ``model`` no longer prices: repricing them reports the error)."""
    g = GpuPresence
    with engine.connect() as conn:
        rows = conn.execute(select(g.hour, g.model, g.node_pool, g.price)
                            .group_by(g.hour, g.model, g.node_pool, g.price)).all()  # fmt: skip
    stale = set()
    for hour, gpu_model, pool, charged in rows:
        at = as_utc(hour)
        try:
            now = model.prices_for(at, [(gpu_model, pool)])[(gpu_model, pool)]
        except MissingPrices:
            now = None
        if now != charged:
            stale.add(at)
    return sorted(stale)


def reprice(engine: Engine, model: CostModel, cluster: str, hours: list[datetime]) -> Report:
    """Recompute these hours' money from their stored facts with ``model``. Hours are
    independent: one that fails (say, a model without a price) does not stop the others."""
    report = Report()
    model_id = record_cost_model(engine, model)
    for hour in hours:
        run_id = start_run(engine, cluster, hour, "reprice", model_id)
        try:
            with engine.begin() as conn:
                clusters = {cluster} | set(conn.execute(
                    select(GpuPresence.cluster).where(GpuPresence.hour == hour).distinct()
                ).scalars())  # fmt: skip
                lock_clusters(conn, clusters)
                facts, owners = load_hour(conn, hour)
                result = attribute_hour(hour, facts.gpus, facts.holdings, owner_in(owners), model)
                replace_hour(conn, clusters, facts, result, model.currency, usage=False)
                mark_done(conn, run_id)
        except RETRYABLE as exc:
            record_failure(engine, run_id, hour, exc, report)
            continue
        except BaseException as exc:
            finish_run(engine, run_id, "failed", f"{type(exc).__name__}: {exc}")
            raise
        report.done.append(hour)
    return report


def owner_in(
    owners: dict[tuple[str, str, str], Owner],
) -> Callable[[str, str, str], Owner | None]:
    return lambda cluster, namespace, pod: owners.get((cluster, namespace, pod))


def load_hour(
    conn: Connection, hour: datetime
) -> tuple[HourFacts, dict[tuple[str, str, str], Owner]]:
    """An ingested hour's facts, and the owner each pod was charged to."""
    facts = HourFacts(hour)
    g, u, c = GpuPresence, UsageFact, Chargeback
    gpu_rows = conn.execute(
        select(g.cluster, g.node, g.gpu_uuid, g.model, g.node_pool, g.present_us)
        .where(g.hour == hour).order_by(g.cluster, g.gpu_uuid)
    )  # fmt: skip
    for r in gpu_rows:
        facts.gpus.append(GpuHour(r.cluster, r.node, r.gpu_uuid, r.model, r.node_pool,
                                  Decimal(r.present_us) / US))  # fmt: skip
        facts.cluster_of[r.gpu_uuid] = r.cluster
        facts.node_of[r.gpu_uuid] = r.node
    fact_rows = conn.execute(
        select(u.gpu_uuid, u.namespace, u.pod, u.container, u.share_us, u.busy_share_us, u.sm_us,
               u.shared, u.compute_slices, u.memory_slices, u.gi_id, u.mig_profile)
        .where(u.hour == hour)
    )  # fmt: skip
    for f in fact_rows:
        facts.holdings.append(Holding(
            f.gpu_uuid, f.namespace, f.pod, f.container, Decimal(f.share_us) / US,
            Decimal(f.busy_share_us) / US, Decimal(f.sm_us) / US, f.shared, f.compute_slices,
            f.memory_slices, None if f.gi_id < 0 else f.gi_id, f.mig_profile))  # fmt: skip
    charged = conn.execute(
        select(c.cluster, c.namespace, c.pod, c.team, c.project, c.stage)
        .where(c.hour == hour, c.team != IDLE)
    )  # fmt: skip
    owners = {(r.cluster, r.namespace, r.pod): Owner(r.team, r.project, r.stage) for r in charged}
    return facts, owners
