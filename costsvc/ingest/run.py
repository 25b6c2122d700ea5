"""Ingest complete hours: which, in what order, and by whom (this process: the serial loop of
costsvc/ingest/serial.py, collect -> attribute -> store, each hour in one transaction; or
worker processes: costsvc/ingest/parallel.py).

Re-running an hour replaces it. The watermark is the last hour done; it only moves forward. An
hour that fails — Prometheus down, an unpriced GPU model, any unexpected error in its data — is
recorded as a failed run and never stops the hours after it: they are ingested and the
watermark passes it. The database itself failing — unreachable, or its disk full — stops the
run (:class:`~costsvc.db.engine.DatabaseTrouble`, naming the database): the hours it did not
do stay pending, for the next run. Failed hours are retried by later runs with back-off
(:func:`retry_due`), and listed (``gpu-costsvc ingest --status``, ``/v1/ingest/failed-hours``,
the ``costsvc_ingest_failed_hours`` gauge). Two ingesters never write the same cluster at once
(costsvc/db/runs.py: the writers' lock), and every run records the cost-model document it
priced with. Many hours on PostgreSQL can be ingested by worker processes
(costsvc/ingest/parallel.py), each running the serial loop over a chunk of them.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from costsvc.db import runs
from costsvc.ingest.parallel import ingest_parallel
from costsvc.ingest.prom import PrometheusReader
from costsvc.ingest.serial import Report, ingest_hours
from costsvc.kit.times import hour_floor
from costsvc.rules.cost_model import CostModel

log = logging.getLogger(__name__)
# back-off of a failed hour: retried RETRY_FIRST after its first failure, then twice as long
# after each further one, at most RETRY_MAX apart; sooner when the cost model changed
RETRY_FIRST = timedelta(hours=1)
RETRY_MAX = timedelta(hours=24)
RETRY_SLACK = timedelta(minutes=5)  # an hourly scheduler starting a little early still retries


def complete_hours(start: datetime, end: datetime) -> list[datetime]:
    """Hour starts h with start <= h and h + 1 h <= end (callers clip ``end`` to now:
    :func:`clip_end`)."""
    h = hour_floor(start)
    if h < start:
        h += timedelta(hours=1)
    out = []
    while h + timedelta(hours=1) <= end:
        out.append(h)
        h += timedelta(hours=1)
    return out


def last_complete(now: datetime) -> datetime:
    """The end of the last complete hour at ``now``: the hour running now is not one."""
    return hour_floor(now)


def clip_end(end: datetime, now: datetime | None = None) -> tuple[datetime, bool]:
    """The rule of what may be ingested: hours that have ended. ``end`` clipped to the end of
    the last complete hour (:func:`last_complete`), and whether it was: an hour still running
    would be billed in part, a future one written empty, and the watermark would pass them
    (the hourly ingest resumes after it, so they would never be ingested again)."""
    limit = last_complete(datetime.now(UTC) if now is None else now)
    return (limit, True) if end > limit else (end, False)


def retry_delay(attempts: int) -> timedelta:
    """How long after its latest failed attempt a failed hour is retried."""
    return min(RETRY_FIRST * (1 << min(max(attempts - 1, 0), 16)), RETRY_MAX)


def retry_due(failed: runs.FailedHour, now: datetime, model_id: int | None = None) -> bool:
    """Whether a failed hour is retried now: its back-off has passed, or the cost model is
    not the one it failed with (say, the missing price was added)."""
    if model_id is not None and failed.cost_model_id != model_id:
        return True
    return now + RETRY_SLACK >= failed.last_attempt_at + retry_delay(failed.attempts)


def pending_hours(
    engine: Engine,
    cluster: str,
    stop: datetime,
    first_run_span: timedelta = timedelta(days=1),
    now: datetime | None = None,
    model_id: int | None = None,
) -> list[datetime]:
    """What a plain ``ingest`` does: every complete hour after the watermark (or, on the
    first run, of the last ``first_run_span``) up to ``stop`` that has not failed, then the
    failed hours whose retry is due (:func:`retry_due`, at ``now``, default the clock's)."""
    mark = runs.watermark(engine, cluster)
    begin = mark + timedelta(hours=1) if mark else stop - first_run_span
    failed = runs.failed_hour_states(engine, cluster)
    bad = {f.hour for f in failed}
    fresh = [h for h in complete_hours(begin, stop) if h not in bad]
    when = datetime.now(UTC) if now is None else now
    retry = [
        f.hour
        for f in failed
        if f.hour + timedelta(hours=1) <= stop and retry_due(f, when, model_id)
    ]
    # new hours first: a failed hour retried never holds them up
    return fresh + sorted(set(retry) - set(fresh))


def ingest(
    engine: Engine,
    prom: PrometheusReader,
    model: CostModel,
    cluster: str,
    hours: list[datetime],
    progress: Callable[[datetime, str | None], None] | None = None,
    source: str = "auto",
    workers: int = 1,
) -> Report:
    """Ingest ``hours`` in the order given. An hour that fails is recorded and the next is
    tried; only when the source looks down (:data:`SOURCE_DOWN_AFTER` failures of
    Prometheus in a row) or the database itself fails (unreachable, its disk full:
    :class:`~costsvc.db.engine.DatabaseTrouble`) does the run stop. ``progress(hour, error)`` is
    called after each hour (error None: done). ``source``: whose series to read
    (costsvc/ingest/collect.py: ``collect_hour``).

    ``workers`` > 1 on PostgreSQL: the hours in that many contiguous chunks, each in a process
    of its own (costsvc/ingest/parallel.py; the per-hour work is CPU-bound Python). SQLite has
    one writer: there the hours are always ingested one after another. An hour that has not
    ended (:func:`clip_end`) is never taken."""
    hours = _complete_only(hours)
    if workers > 1 and len(hours) > 1 and engine.dialect.name == "postgresql":
        return ingest_parallel(engine, prom, model, cluster, hours, progress, source, workers)
    return ingest_hours(engine, prom, model, cluster, hours, progress, source)


def _complete_only(hours: list[datetime]) -> list[datetime]:
    limit = last_complete(datetime.now(UTC))
    kept = [h for h in hours if h + timedelta(hours=1) <= limit]
    if len(kept) < len(hours):
        log.warning("%d hour(s) not complete yet: left for later", len(hours) - len(kept))
    return kept


@contextmanager
def collections_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while hours are ingested — in a process that
    only ingests: the ``ingest`` command, a parallel ingest's workers and ``serve``'s hourly
    child (costsvc/commands/hourly.py), never the API process (its requests' cycles would pile
    up for the whole run).
    An hour allocates millions of short-lived objects that form no cycles (samples, Decimals,
    rows: reference counting frees them) while the process holds millions of long-lived ones
    (a block's summaries, label sets); the collector's automatic runs traverse the long-lived
    ones again and again: measured, 40 % of the ingest's CPU (1,000 GPUs / 5,000 pods: 0.93 ->
    0.52 CPU-s an hour), and a collection of the young generations after every hour still
    30-90 ms of it. The few cycles an hour makes (connections, pools, tracebacks) are freed by
    a full collection every :data:`FULL_COLLECTION_EVERY` hours (~0.2 s) and when the run
    ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.collect()
