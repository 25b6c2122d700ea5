"""Ingest runs, watermarks, the writers' lock and the cost-model documents runs priced with.

Every ingest or reprice of an hour is a run (``running`` -> ``done`` | ``failed``) naming the
cost-model document it priced with (``cost_model_versions``, by content hash). The watermark
is the last hour ingested per cluster. Two writers never write the same cluster at once: a
transaction-scoped advisory lock on PostgreSQL, the database write lock on SQLite. Beyond that,
a replica ingesting several clusters claims each cluster for its whole run
(:func:`claim_cluster`): another replica skips a claimed cluster instead of collecting its hours
again, and the claim dies with the process that holds it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, and_, func, insert, or_, select, text, update
from sqlalchemy.exc import IntegrityError, OperationalError

from costsvc.db.models import CostModelVersion, IngestRun, Watermark
from costsvc.db.version import bump
from costsvc.kit.times import as_utc
from costsvc.rules.cost_model import CostModel

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
        found = conn.execute(insert(IngestRun).values(values).returning(IngestRun.id))
        run_id = int(found.scalar_one())
        bump(conn)  # the run's status is an answer (ingest status, failed hours)
        return run_id


def finish_run(engine: Engine, run_id: int, status: str, error: str | None = None) -> None:
    values = {
        "status": status,
        "error": (error or "")[:2000] or None,
        "finished_at": datetime.now(UTC),
    }
    with engine.begin() as conn:
        conn.execute(update(IngestRun).where(IngestRun.id == run_id).values(**values))
        bump(conn)


def fail_run(engine: Engine, run_id: int, message: str) -> None:
    """Record a run as failed; when the database itself is the trouble, only log it."""
    try:
        finish_run(engine, run_id, "failed", message)
    except OperationalError as again:
        log.warning("could not record the failure: %s", again)


def fail_unfinished(engine: Engine, run_id: int, message: str) -> str:
    """Record a run that another process started as failed, unless it finished (that process
    may have written its hour and died before saying so); its status after."""
    values = {"status": "failed", "error": message[:2000], "finished_at": datetime.now(UTC)}
    r = IngestRun
    with engine.begin() as conn:
        conn.execute(update(r).where(r.id == run_id, r.status == "running").values(**values))
        status = str(conn.execute(select(r.status).where(r.id == run_id)).scalar_one())
        bump(conn)
        return status


def mark_done(conn: Connection, run_id: int) -> None:
    """The run is done — in the transaction that wrote its hour, as its last statement: the
    data version moves with the hour's commit (costsvc/db/version.py)."""
    done = {"status": "done", "finished_at": datetime.now(UTC)}
    conn.execute(update(IngestRun).where(IngestRun.id == run_id).values(**done))
    bump(conn)


def watermark(engine: Engine, cluster: str) -> datetime | None:
    with engine.connect() as conn:
        found = conn.execute(select(Watermark.hour).where(Watermark.cluster == cluster)).scalar()
    return as_utc(found) if found is not None else None


def watermarks(engine: Engine) -> dict[str, datetime]:
    """Every cluster's watermark."""
    with engine.connect() as conn:
        rows = conn.execute(select(Watermark.cluster, Watermark.hour)).all()
    return {cluster: as_utc(hour) for cluster, hour in rows}


def advance_watermark(conn: Connection, cluster: str, hour: datetime) -> None:
    """Move the cluster's watermark forward to ``hour`` (never back)."""
    current = conn.execute(select(Watermark.hour).where(Watermark.cluster == cluster)).scalar()
    if current is None:
        conn.execute(insert(Watermark).values(cluster=cluster, hour=hour))
    elif as_utc(current) < hour:
        conn.execute(update(Watermark).where(Watermark.cluster == cluster).values(hour=hour))


def move_watermark(engine: Engine, cluster: str, hour: datetime) -> None:
    """:func:`advance_watermark` in a transaction of its own, under the writers' lock (a
    parallel ingest's parent: costsvc/ingest/parallel.py)."""
    with engine.begin() as conn:
        lock_clusters(conn, {cluster})
        advance_watermark(conn, cluster, hour)
        bump(conn)


def failed_hours(engine: Engine, cluster: str) -> list[datetime]:
    """Hours whose ingest failed (or never finished) and has not succeeded since."""
    return [f.hour for f in failed_hour_states(engine, cluster)]


def _rows(source: Engine | Connection, query: Any) -> list[Any]:
    """``query``'s rows, on a connection of its own or in ``source``'s transaction."""
    if isinstance(source, Connection):
        return list(source.execute(query))
    with source.connect() as conn:
        return list(conn.execute(query))


def done_hours(
    source: Engine | Connection, start: datetime, end: datetime
) -> dict[str, set[datetime]]:
    """Per cluster, the hours in [start, end) that an ingest run has done."""
    r = IngestRun
    query = (
        select(r.cluster, r.hour)
        .where(r.kind == "ingest", r.status == "done", r.hour >= start, r.hour < end)
        .distinct()
    )
    out: dict[str, set[datetime]] = {}
    for cluster, hour in _rows(source, query):
        out.setdefault(cluster, set()).add(as_utc(hour))
    return out


def first_hours(source: Engine | Connection) -> dict[str, datetime]:
    """Per cluster, the first hour any ingest run was started for (where its history begins)."""
    r = IngestRun
    query = select(r.cluster, func.min(r.hour)).where(r.kind == "ingest").group_by(r.cluster)
    return {cluster: as_utc(hour) for cluster, hour in _rows(source, query)}


@dataclass(frozen=True, slots=True)
class FailedHour:
    """An hour whose ingest failed and has not succeeded since."""

    cluster: str  # the configured cluster of the ingest that failed
    hour: datetime
    attempts: int  # failed (or never finished) runs since the hour was last done
    first_failed_at: datetime
    last_attempt_at: datetime  # when the latest failed run started
    error: str | None  # the latest failed run's error
    cost_model_id: int | None  # the cost-model document the latest run priced with


# a run still "running" this long after it started was killed (an hour takes seconds to
# minutes); one younger may be in progress in another process, and is not a failure yet
RUNNING_GRACE = timedelta(minutes=15)


def failed_hour_states(source: Engine | Connection, cluster: str | None = None) -> list[FailedHour]:
    """Every failed hour (of one cluster, or all), oldest first, with its failed attempts: a
    run that failed, or that never finished (:data:`RUNNING_GRACE`)."""
    r = IngestRun
    killed = and_(r.status == "running", r.started_at < datetime.now(UTC) - RUNNING_GRACE)
    done = (
        select(r.cluster, r.hour, func.max(r.id).label("done_id"))
        .where(r.kind == "ingest", r.status == "done")
        .group_by(r.cluster, r.hour)
        .subquery()
    )
    query = (
        select(r.cluster, r.hour, r.started_at, r.error, r.cost_model_id)
        .outerjoin(done, and_(done.c.cluster == r.cluster, done.c.hour == r.hour))
        .where(r.kind == "ingest", or_(r.status == "failed", killed))
        .where(or_(done.c.done_id.is_(None), r.id > done.c.done_id))
        .order_by(r.id)
    )
    if cluster is not None:
        query = query.where(r.cluster == cluster)
    rows = _rows(source, query)
    out: dict[tuple[str, datetime], FailedHour] = {}
    for row in rows:  # in run order: the last one seen is the latest attempt
        key = (row.cluster, as_utc(row.hour))
        before = out.get(key)
        out[key] = FailedHour(
            row.cluster,
            key[1],
            1 + (before.attempts if before else 0),
            before.first_failed_at if before else as_utc(row.started_at),
            as_utc(row.started_at),
            row.error,
            row.cost_model_id,
        )
    return sorted(out.values(), key=lambda f: (f.hour, f.cluster))


def failed_hour_counts(conn: Connection) -> dict[str, int]:
    """How many failed hours each cluster has (only clusters that have some)."""
    out: dict[str, int] = {}
    for f in failed_hour_states(conn):
        out[f.cluster] = out.get(f.cluster, 0) + 1
    return out


@dataclass(frozen=True, slots=True)
class IngestState:
    cluster: str
    watermark: datetime  # the last hour ingested
    last_success: datetime | None  # when an hour was last ingested


def ingest_state(conn: Connection) -> tuple[list[IngestState], dict[str, int]]:
    """Each cluster's watermark and last successful run, and failed runs per cluster: three
    statements, however many clusters and runs there are."""
    r = IngestRun
    done = select(r.cluster, func.max(r.finished_at)).where(r.status == "done").group_by(r.cluster)
    last_done = {cluster: at for cluster, at in conn.execute(done)}
    states = []
    for cluster, hour in conn.execute(select(Watermark.cluster, Watermark.hour)):
        done_at = last_done.get(cluster)
        states.append(
            IngestState(cluster, as_utc(hour), as_utc(done_at) if done_at is not None else None)
        )
    failed = conn.execute(
        select(r.cluster, func.count()).where(r.status == "failed").group_by(r.cluster)
    )
    return states, {cluster: int(n) for cluster, n in failed}


def lock_clusters(conn: Connection, clusters: set[str]) -> None:
    """Serialise writers of these clusters until the transaction ends (PostgreSQL; SQLite's
    database write lock does the same there). Taken in a fixed order: no deadlock."""
    if conn.dialect.name == "postgresql":
        for c in sorted(clusters):
            key = zlib.crc32(f"gpu-costsvc/{c}".encode())
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})


def _claim_key(cluster: str) -> int:
    # not the writers' key (lock_clusters): a replica's own store transactions, on another
    # connection, must not wait for the claim it holds itself
    return zlib.crc32(f"gpu-costsvc-run/{cluster}".encode())


@contextmanager
def claim_cluster(engine: Engine, cluster: str) -> Iterator[bool]:
    """Claim ``cluster`` for one replica's run: yields True when this replica holds it until
    the block ends, False (at once, never waiting) when another replica holds it.

    PostgreSQL: a session-level ``pg_try_advisory_lock`` on a connection kept for the block —
    released by ``pg_advisory_unlock``, or by the server when the session ends (a replica that
    dies loses its claims with its connection; its hours stay pending for the next run).
    SQLite (one file, replicas on one machine): an exclusive ``flock`` on a file beside the
    database, released by the kernel when the process dies; an in-memory database has one
    process, and is always claimed."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            key = {"k": _claim_key(cluster)}
            got = bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), key).scalar())
            conn.commit()  # the session lock outlives the transaction; keep none open
            try:
                yield got
            finally:
                if got:
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), key)
                    conn.commit()
        return
    database = engine.url.database
    if not database or database == ":memory:":
        yield True
        return
    path = f"{database}.claim-{_claim_key(cluster):08x}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True  # closing the file releases the lock
    finally:
        os.close(fd)


def done_since(engine: Engine, cluster: str, since: datetime) -> set[datetime]:
    """The hours of ``cluster`` an ingest run started at or after ``since`` has done (another
    replica's, in a backfill both were asked to run)."""
    r = IngestRun
    query = select(r.hour).where(
        r.cluster == cluster, r.kind == "ingest", r.status == "done", r.started_at >= since
    )
    with engine.connect() as conn:
        return {as_utc(h) for h in conn.execute(query).scalars()}
