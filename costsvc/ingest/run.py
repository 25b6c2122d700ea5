"""Ingest complete hours: collect -> attribute -> write, each hour in one transaction.

Re-running an hour replaces it. The watermark is the last hour done; hours after a failed one
wait, so it only moves forward over complete hours, and a failed hour — even one behind the
watermark, from a backfill — is retried by the next run (:func:`pending_hours`). Two ingesters
never write the same cluster at once: a transaction-scoped advisory lock on PostgreSQL, the
database write lock on SQLite, and unique keys on every table besides. Every run records the
cost-model document it priced with (``cost_model_versions``, by content hash).
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, Engine, delete, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError, OperationalError

from costsvc.attribution import HourResult, Owner, attribute_hour
from costsvc.costmodel import CostModel, LabelKeys, MissingPrices
from costsvc.db.models import (
    CostModelVersion,
    GpuPresence,
    IngestRun,
    UsageFact,
    Watermark,
)
from costsvc.ingest.hour import HourFacts, collect_hour, sanitize
from costsvc.ingest.prom import PrometheusError, PrometheusReader
from costsvc.k8slabels import LabelHistory
from costsvc.labels import resolve_owner
from costsvc.months import write_lines
from costsvc.utc import as_utc

log = logging.getLogger(__name__)
US = 1_000_000
# an hour that fails for one of these is recorded as failed and retried by a later run
RETRYABLE = (PrometheusError, MissingPrices, OperationalError)


@dataclass
class Report:
    done: list[datetime] = field(default_factory=list)
    failed: dict[datetime, str] = field(default_factory=dict)


def complete_hours(start: datetime, end: datetime) -> list[datetime]:
    """Hour starts h with start <= h and h + 1 h <= end."""
    h = start.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    if h < start:
        h += timedelta(hours=1)
    out = []
    while h + timedelta(hours=1) <= end:
        out.append(h)
        h += timedelta(hours=1)
    return out


def watermark(engine: Engine, cluster: str) -> datetime | None:
    with engine.connect() as conn:
        found = conn.execute(select(Watermark.hour).where(Watermark.cluster == cluster)).scalar()
    return as_utc(found) if found is not None else None


def failed_hours(engine: Engine, cluster: str) -> list[datetime]:
    """Hours whose latest ingest run failed (or never finished) and none succeeded since."""
    r = IngestRun
    with engine.connect() as conn:
        latest = (
            select(r.hour, func.max(r.id).label("id"))
            .where(r.cluster == cluster, r.kind == "ingest")
            .group_by(r.hour)
            .subquery()
        )
        rows = conn.execute(select(r.hour).join(latest, r.id == latest.c.id)
                            .where(r.status != "done")).scalars().all()  # fmt: skip
    return sorted({as_utc(h) for h in rows})


def pending_hours(engine: Engine, cluster: str, stop: datetime,
                  first_run_span: timedelta = timedelta(days=1)) -> list[datetime]:  # fmt: skip
    """What a plain ``ingest`` does: hours that failed before, then every complete hour after
    the watermark (or, on the first run, of the last ``first_run_span``) up to ``stop``."""
    mark = watermark(engine, cluster)
    begin = mark + timedelta(hours=1) if mark else stop - first_run_span
    fresh = complete_hours(begin, stop)
    retry = [h for h in failed_hours(engine, cluster) if h + timedelta(hours=1) <= stop]
    return sorted(set(retry) | set(fresh))


def ingest(
    engine: Engine,
    prom: PrometheusReader,
    model: CostModel,
    cluster: str,
    hours: list[datetime],
) -> Report:
    report = Report()
    model_id = record_cost_model(engine, model)
    for hour in hours:
        run_id = start_run(engine, cluster, hour, "ingest", model_id)
        try:
            facts = collect_hour(prom, hour, cluster)
            _merge_label_history(facts, LabelHistory(engine, cluster), cluster)
            owners = _owners(facts, model.labels)
            result = attribute_hour(hour, facts.gpus, facts.holdings, owners, model)
            _write_hour(engine, cluster, facts, result, model.currency, run_id)
        except RETRYABLE as exc:
            record_failure(engine, run_id, hour, exc, report)
            break  # later hours wait for this one
        except BaseException as exc:  # a bug or an interrupt: recorded, then raised
            finish_run(engine, run_id, "failed", f"{type(exc).__name__}: {exc}")
            raise
        report.done.append(hour)
    return report


def record_cost_model(engine: Engine, model: CostModel) -> int:
    """The id of this cost-model document in ``cost_model_versions``, stored on first use."""
    digest, t = model.sha256(), CostModelVersion
    for _ in range(2):  # a concurrent ingester may store the same document first
        try:
            with engine.begin() as conn:
                found = conn.execute(select(t.id).where(t.sha256 == digest)).scalar()
                if found is not None:
                    return int(found)
                return int(conn.execute(insert(t).values(
                    sha256=digest, document=model.document(), loaded_at=datetime.now(UTC)
                ).returning(t.id)).scalar_one())  # fmt: skip
        except IntegrityError:
            continue
    raise RuntimeError("could not record the cost model")


def record_failure(
    engine: Engine, run_id: int, hour: datetime, exc: Exception, report: Report
) -> None:
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    report.failed[hour] = message
    log.warning("hour %s not done, will retry: %s", hour.isoformat(), message)
    try:
        finish_run(engine, run_id, "failed", message)
    except OperationalError as again:  # the database itself is the trouble
        log.warning("could not record the failure: %s", again)


def _merge_label_history(facts: HourFacts, history: LabelHistory, cluster: str) -> None:
    """Labels from the Kubernetes-API history win; kube-state-metrics fills the rest."""
    pods, spaces = history.labels_during(facts.start, facts.start + timedelta(hours=1))
    for (ns, pod), labels in pods.items():
        facts.pod_labels[(cluster, ns, pod)] = {sanitize(k): v for k, v in labels.items()}
    for name, labels in spaces.items():
        facts.namespace_labels[(cluster, name)] = {sanitize(k): v for k, v in labels.items()}


def _owners(facts: HourFacts, keys: LabelKeys) -> OwnerLookup:
    # kube-state-metrics writes label keys sanitised; look the configured keys up that way
    sanitized = LabelKeys(team=[sanitize(k) for k in keys.team],
                          project=[sanitize(k) for k in keys.project],
                          stage=[sanitize(k) for k in keys.stage],
                          namespace_fallback=keys.namespace_fallback)  # fmt: skip
    return OwnerLookup(facts, sanitized)


class OwnerLookup:
    def __init__(self, facts: HourFacts, keys: LabelKeys) -> None:
        self._facts, self._keys = facts, keys

    def __call__(self, cluster: str, namespace: str, pod: str) -> Owner | None:
        pod_labels = self._facts.pod_labels.get((cluster, namespace, pod), {})
        ns_labels = self._facts.namespace_labels.get((cluster, namespace), {})
        return resolve_owner(pod_labels, ns_labels, self._keys)


def start_run(engine: Engine, cluster: str, hour: datetime, kind: str, model_id: int) -> int:
    with engine.begin() as conn:
        return int(conn.execute(
            insert(IngestRun).values(cluster=cluster, hour=hour, started_at=datetime.now(UTC),
                                     status="running", kind=kind, cost_model_id=model_id)
            .returning(IngestRun.id)
        ).scalar_one())  # fmt: skip


def finish_run(engine: Engine, run_id: int, status: str, error: str | None = None) -> None:
    with engine.begin() as conn:
        values = {"status": status, "error": (error or "")[:2000] or None,
                  "finished_at": datetime.now(UTC)}  # fmt: skip
        conn.execute(update(IngestRun).where(IngestRun.id == run_id).values(**values))


def lock_clusters(conn: Connection, clusters: set[str]) -> None:
    """Serialise writers of these clusters until the transaction ends (PostgreSQL; SQLite's
    database write lock does the same there). Taken in a fixed order: no deadlock."""
    if conn.dialect.name == "postgresql":
        for c in sorted(clusters):
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"),
                         {"k": zlib.crc32(f"gpu-costsvc/{c}".encode())})  # fmt: skip


def _write_hour(engine: Engine, cluster: str, facts: HourFacts, result: HourResult,
                currency: str, run_id: int) -> None:  # fmt: skip
    hour = facts.start
    clusters = {cluster} | {g.cluster for g in facts.gpus}
    with engine.begin() as conn:
        lock_clusters(conn, clusters)
        replace_hour(conn, clusters, facts, result, currency, usage=True)
        current = conn.execute(select(Watermark.hour).where(Watermark.cluster == cluster)).scalar()
        if current is None:
            conn.execute(insert(Watermark).values(cluster=cluster, hour=hour))
        elif as_utc(current) < hour:
            conn.execute(update(Watermark).where(Watermark.cluster == cluster).values(hour=hour))
        mark_done(conn, run_id)


def mark_done(conn: Connection, run_id: int) -> None:
    conn.execute(update(IngestRun).where(IngestRun.id == run_id).values(
        status="done", finished_at=datetime.now(UTC)))  # fmt: skip


def replace_hour(conn: Connection, clusters: set[str], facts: HourFacts, result: HourResult,
                 currency: str, usage: bool) -> None:  # fmt: skip
    """Replace the hour's GPU rows and chargeback (and its usage facts, when ``usage``)."""
    hour = facts.start
    tables = (UsageFact, GpuPresence) if usage else (GpuPresence,)
    for table in tables:
        conn.execute(delete(table).where(table.hour == hour, table.cluster.in_(clusters)))
    if facts.gpus:
        conn.execute(insert(GpuPresence), [
            {"hour": hour, "cluster": g.cluster, "node": g.node, "gpu_uuid": g.gpu_uuid,
             "model": g.model, "node_pool": g.node_pool,
             "present_us": int(g.present_seconds * US),
             "price": result.gpu_price[g.gpu_uuid], "cost": result.gpu_cost[g.gpu_uuid]}
            for g in facts.gpus])  # fmt: skip
    if usage and facts.holdings:
        conn.execute(insert(UsageFact), [
            {"hour": hour, "cluster": facts.cluster_of[h.gpu_uuid],
             "node": facts.node_of[h.gpu_uuid], "gpu_uuid": h.gpu_uuid,
             "gi_id": -1 if h.gi_id is None else h.gi_id, "namespace": h.namespace,
             "pod": h.pod, "container": h.container,
             "share_us": int(h.share_seconds * US),
             "busy_share_us": int(h.busy_share_seconds * US),
             "sm_us": int(h.sm_seconds * US), "shared": h.shared,
             "compute_slices": h.compute_slices, "memory_slices": h.memory_slices,
             "mig_profile": h.mig_profile}
            for h in facts.holdings])  # fmt: skip
    write_lines(conn, hour, clusters, result.lines, currency)
