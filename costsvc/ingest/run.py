"""Ingest complete hours: collect -> attribute -> write, each hour in one transaction.

Re-running an hour replaces it. The watermark is the last hour done; hours after a failed one
wait, so it only moves forward over complete hours and a failed hour is retried next time.
Two ingesters never write the same cluster at once: a transaction-scoped advisory lock on
PostgreSQL, the database write lock on SQLite, and unique keys on every table besides.
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, delete, insert, select, text, update

from costsvc.attribution import HourResult, Owner, attribute_hour
from costsvc.costmodel import CostModel, LabelKeys, MissingPrices
from costsvc.db.models import Chargeback, GpuPresence, IngestRun, UsageFact, Watermark
from costsvc.ingest.hour import HourFacts, collect_hour, sanitize
from costsvc.ingest.prom import PrometheusError, PrometheusReader
from costsvc.k8slabels import LabelHistory
from costsvc.labels import resolve_owner

log = logging.getLogger(__name__)
US = 1_000_000


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
    return _utc(found) if found is not None else None


def ingest(
    engine: Engine,
    prom: PrometheusReader,
    model: CostModel,
    cluster: str,
    hours: list[datetime],
) -> Report:
    report = Report()
    for hour in hours:
        run_id = _start_run(engine, cluster, hour)
        try:
            facts = collect_hour(prom, hour, cluster)
            _merge_label_history(facts, LabelHistory(engine, cluster))
            owners = _owners(facts, model.labels)
            result = attribute_hour(hour, facts.gpus, facts.holdings, owners, model)
            _write_hour(engine, cluster, facts, result, model.currency, run_id)
        except (PrometheusError, MissingPrices) as exc:
            _finish_run(engine, run_id, "failed", str(exc))
            report.failed[hour] = str(exc)
            log.warning("hour %s not ingested, will retry: %s", hour.isoformat(), exc)
            break  # later hours wait for this one
        report.done.append(hour)
    return report


def _merge_label_history(facts: HourFacts, history: LabelHistory) -> None:
    """Labels from the Kubernetes-API history win; kube-state-metrics fills the rest."""
    pods, spaces = history.labels_during(facts.start, facts.start + timedelta(hours=1))
    for key, labels in pods.items():
        facts.pod_labels[key] = {sanitize(k): v for k, v in labels.items()}
    for name, labels in spaces.items():
        facts.namespace_labels[name] = {sanitize(k): v for k, v in labels.items()}


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

    def __call__(self, namespace: str, pod: str) -> Owner | None:
        pod_labels = self._facts.pod_labels.get((namespace, pod), {})
        ns_labels = self._facts.namespace_labels.get(namespace, {})
        return resolve_owner(pod_labels, ns_labels, self._keys)


def _start_run(engine: Engine, cluster: str, hour: datetime) -> int:
    with engine.begin() as conn:
        return int(conn.execute(
            insert(IngestRun).values(cluster=cluster, hour=hour, started_at=datetime.now(UTC),
                                     status="running").returning(IngestRun.id)
        ).scalar_one())  # fmt: skip


def _finish_run(engine: Engine, run_id: int, status: str, error: str | None = None) -> None:
    with engine.begin() as conn:
        values = {"status": status, "error": (error or "")[:2000] or None,
                  "finished_at": datetime.now(UTC)}  # fmt: skip
        conn.execute(update(IngestRun).where(IngestRun.id == run_id).values(**values))


def _write_hour(engine: Engine, cluster: str, facts: HourFacts, result: HourResult,
                currency: str, run_id: int) -> None:  # fmt: skip
    hour = facts.start
    clusters = {cluster} | {g.cluster for g in facts.gpus}
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            for c in sorted(clusters):
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"),
                             {"k": zlib.crc32(f"gpu-costsvc/{c}".encode())})  # fmt: skip
        for table in (Chargeback, UsageFact, GpuPresence):
            conn.execute(delete(table).where(table.hour == hour, table.cluster.in_(clusters)))
        node_of = {g.gpu_uuid: (g.cluster, g.node) for g in facts.gpus}
        if facts.gpus:
            conn.execute(insert(GpuPresence), [
                {"hour": hour, "cluster": g.cluster, "node": g.node, "gpu_uuid": g.gpu_uuid,
                 "model": g.model, "node_pool": g.node_pool,
                 "present_us": int(g.present_seconds * US)} for g in facts.gpus])  # fmt: skip
        facts_rows: dict[tuple[str, str, int, str, str, str], dict[str, object]] = {}
        for h in facts.holdings:
            c, node = node_of.get(h.gpu_uuid, (cluster, ""))
            gi = -1 if h.gi_id is None else h.gi_id
            key = (c, h.gpu_uuid, gi, h.namespace, h.pod, h.container)
            row = facts_rows.setdefault(key, {
                "hour": hour, "cluster": c, "node": node, "gpu_uuid": h.gpu_uuid, "gi_id": gi,
                "namespace": h.namespace, "pod": h.pod, "container": h.container,
                "share_us": 0, "busy_share_us": 0, "sm_us": 0, "shared": h.shared,
                "compute_slices": h.compute_slices, "memory_slices": h.memory_slices})  # fmt: skip
            for column, seconds in (("share_us", h.share_seconds),
                                    ("busy_share_us", h.busy_share_seconds),
                                    ("sm_us", h.sm_seconds)):  # fmt: skip
                row[column] = int(row[column]) + int(seconds * US)  # type: ignore[call-overload]
        if facts_rows:
            conn.execute(insert(UsageFact), list(facts_rows.values()))
        if result.lines:
            conn.execute(insert(Chargeback), [
                {"hour": hour, "cluster": ln.cluster, "team": ln.team, "project": ln.project,
                 "stage": ln.stage, "namespace": ln.namespace, "pod": ln.pod,
                 "currency": currency, "allocated": ln.allocated, "used": ln.used,
                 "waste": ln.waste, "idle": ln.idle, "gpu_hours": ln.gpu_hours}
                for ln in result.lines])  # fmt: skip
        current = conn.execute(select(Watermark.hour).where(Watermark.cluster == cluster)).scalar()
        if current is None:
            conn.execute(insert(Watermark).values(cluster=cluster, hour=hour))
        elif _utc(current) < hour:
            conn.execute(update(Watermark).where(Watermark.cluster == cluster).values(hour=hour))
        conn.execute(update(IngestRun).where(IngestRun.id == run_id).values(
            status="done", finished_at=datetime.now(UTC)))  # fmt: skip


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
