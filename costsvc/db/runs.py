"""Ingest runs, watermarks, the writers' lock and the cost-model documents runs priced with.

Every ingest or reprice of an hour is a run (``running`` -> ``done`` | ``failed``) naming the
cost-model document it priced with (``cost_model_versions``, by content hash). The watermark
is the last hour ingested per cluster. Two writers never write the same cluster at once: a
transaction-scoped advisory lock on PostgreSQL, the database write lock on SQLite.
"""

from __future__ import annotations

import logging
import zlib
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError, OperationalError

from costsvc.costmodel import CostModel
from costsvc.db.models import AuditEntry, CostModelVersion, IngestRun, Watermark
from costsvc.utc import as_utc

log = logging.getLogger(__name__)


def record_cost_model(engine: Engine, model: CostModel) -> int:
    """The id of this cost-model document in ``cost_model_versions``, stored on first use."""
    digest, t = model.sha256(), CostModelVersion
    for _ in range(2):  # a concurrent ingester may store the same document first
        try:
            with engine.begin() as conn:
                found = conn.execute(select(t.id).where(t.sha256 == digest)).scalar()
                if found is not None:
                    return int(found)
                new = insert(t).values(
                    sha256=digest, document=model.document(), loaded_at=datetime.now(UTC)
                )
                return int(conn.execute(new.returning(t.id)).scalar_one())
        except IntegrityError:
            continue
    raise RuntimeError("could not record the cost model")


def start_run(engine: Engine, cluster: str, hour: datetime, kind: str, model_id: int) -> int:
    values = {
        "cluster": cluster,
        "hour": hour,
        "started_at": datetime.now(UTC),
        "status": "running",
        "kind": kind,
        "cost_model_id": model_id,
    }
    with engine.begin() as conn:
        return int(
            conn.execute(insert(IngestRun).values(values).returning(IngestRun.id)).scalar_one()
        )


def finish_run(engine: Engine, run_id: int, status: str, error: str | None = None) -> None:
    values = {
        "status": status,
        "error": (error or "")[:2000] or None,
        "finished_at": datetime.now(UTC),
    }
    with engine.begin() as conn:
        conn.execute(update(IngestRun).where(IngestRun.id == run_id).values(**values))


def fail_run(engine: Engine, run_id: int, message: str) -> None:
    """Record a run as failed; when the database itself is the trouble, only log it."""
    try:
        finish_run(engine, run_id, "failed", message)
    except OperationalError as again:
        log.warning("could not record the failure: %s", again)


def mark_done(conn: Connection, run_id: int) -> None:
    """The run is done — in the transaction that wrote its hour."""
    done = {"status": "done", "finished_at": datetime.now(UTC)}
    conn.execute(update(IngestRun).where(IngestRun.id == run_id).values(**done))


def watermark(engine: Engine, cluster: str) -> datetime | None:
    with engine.connect() as conn:
        found = conn.execute(select(Watermark.hour).where(Watermark.cluster == cluster)).scalar()
    return as_utc(found) if found is not None else None


def advance_watermark(conn: Connection, cluster: str, hour: datetime) -> None:
    """Move the cluster's watermark forward to ``hour`` (never back)."""
    current = conn.execute(select(Watermark.hour).where(Watermark.cluster == cluster)).scalar()
    if current is None:
        conn.execute(insert(Watermark).values(cluster=cluster, hour=hour))
    elif as_utc(current) < hour:
        conn.execute(update(Watermark).where(Watermark.cluster == cluster).values(hour=hour))


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
        query = select(r.hour).join(latest, r.id == latest.c.id).where(r.status != "done")
        rows = conn.execute(query).scalars().all()
    return sorted({as_utc(h) for h in rows})


def lock_clusters(conn: Connection, clusters: set[str]) -> None:
    """Serialise writers of these clusters until the transaction ends (PostgreSQL; SQLite's
    database write lock does the same there). Taken in a fixed order: no deadlock."""
    if conn.dialect.name == "postgresql":
        for c in sorted(clusters):
            key = zlib.crc32(f"gpu-costsvc/{c}".encode())
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})


def data_version(engine: Engine) -> tuple[int, int]:
    """The newest ingest/reprice run and the newest audit entry: every write that can change
    a read answer adds one of those rows, whichever process makes it."""
    runs = select(func.max(IngestRun.id)).scalar_subquery()
    audit = select(func.max(AuditEntry.id)).scalar_subquery()
    with engine.connect() as conn:
        found = conn.execute(select(runs, audit)).one()
    return int(found[0] or 0), int(found[1] or 0)
