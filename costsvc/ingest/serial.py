"""The serial ingest loop: hours one after another in this process, each collect ->
attribute -> store in one transaction, and what a run reports.

An hour that fails — Prometheus down, an unpriced GPU model, any unexpected error in its data —
is recorded as a failed run (:func:`record_failure`, logged) and never stops the hours after
it. The database itself failing — unreachable, or its disk full — stops the run
(:class:`~costsvc.db.engine.DatabaseTrouble`, naming the database); so does the source looking
down (:data:`SOURCE_DOWN_AFTER` failures of Prometheus in a row). A parallel ingest's workers
(costsvc/ingest/parallel.py) each run :func:`ingest_hours` over their chunk; what to ingest and
when (the watermark, retries): costsvc/ingest/run.py.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from costsvc.advice.repository import OwnerHistory
from costsvc.db import runs
from costsvc.db.engine import trouble
from costsvc.db.hour_facts import flush_pod_days, store_hour
from costsvc.inference.split import price_hour
from costsvc.ingest.collect import collect_hour
from costsvc.ingest.kueue import collect_kueue, line_tags, queue_teams
from costsvc.ingest.prom import PrometheusError, PrometheusReader
from costsvc.ingest.reader import Counts, RunReader
from costsvc.ingest.tokens import collect_served
from costsvc.kit.times import day_floor
from costsvc.labels.history import LabelHistory
from costsvc.queues.links import LocalQueueHistory
from costsvc.rules.attribution import attribute_hour
from costsvc.rules.cost_model import CostModel, MissingPrices
from costsvc.rules.mig import UnknownMigGeometry
from costsvc.rules.owners import OwnerLookup, merge_history
from costsvc.rules.queues import PodQueues, price_queues, quota_hour
from costsvc.rules.workloads import controllers_of

log = logging.getLogger(__name__)
# an hour that fails for one of these is recorded as failed and retried by a later run
RETRYABLE = (PrometheusError, MissingPrices, UnknownMigGeometry, OperationalError)
# the source itself may be down: after this many hours in a row fail so, the run stops (the
# hours it did not try are still pending, after the watermark or among the failed hours); the
# database's own failures stop it at once (_stop_if_database_failed)
SOURCE_ERRORS = (PrometheusError,)
SOURCE_DOWN_AFTER = 2
# hours ingested between full garbage collections while the collector is paused
# (costsvc/ingest/run.py: collections_paused)
FULL_COLLECTION_EVERY = 24
# a run that writes at least this many hours of a UTC day leaves the day's per-pod rollup
# pending and writes it once from the day's chargeback when it ends (costsvc/db/rollup.py):
# an hour's per-pod upserts cost the server ~90 ms at 5,000 pods, a day's rows from its
# chargeback ~0.2 s; a run of a few hours (serve's hourly one) adds them per hour
DEFER_POD_DAYS_FROM = 6


@dataclass
class Report:
    """What a run did: the hours done and failed (with why), in the order planned, and how
    many series its reads synthesised and read raw (costsvc/ingest/reader.py)."""

    done: list[datetime] = field(default_factory=list)
    failed: dict[datetime, str] = field(default_factory=dict)
    reads: Counts = field(default_factory=Counts)


def ingest_hours(
    engine: Engine,
    prom: PrometheusReader,
    model: CostModel,
    cluster: str,
    hours: list[datetime],
    progress: Callable[[datetime, str | None], None] | None = None,
    source: str = "auto",
    watermark: bool = True,
    started: Callable[[datetime, int], None] | None = None,
) -> Report:
    """:func:`~costsvc.ingest.run.ingest`, one hour after another in this process.
    ``watermark`` False: each hour done leaves the watermark as it is (a parallel ingest's
    worker: its parent moves it). ``started(hour, run_id)``: called when an hour's run is
    recorded, before its work.

    The days of which it writes :data:`DEFER_POD_DAYS_FROM` hours or more have their per-pod
    rollup written when it ends: those days' (a worker: a sibling may still write its chunk's
    hours of a day they share), else every pending day (:func:`pod_days_flushed`)."""
    model_id = runs.record_cost_model(engine, model)
    per_day = Counter(day_floor(h) for h in hours)
    deferred = {day for day, n in per_day.items() if n >= DEFER_POD_DAYS_FROM}
    labels = (
        LabelHistory(engine, cluster),
        OwnerHistory(engine, cluster),
        LocalQueueHistory(engine, cluster),
    )
    reader = RunReader(prom)  # the run's reads, and the threads they run on
    report = Report(reads=reader.counts)
    try:
        reader.plan(hours)  # consecutive hours share their summaries' range queries
        down = 0
        for n, hour in enumerate(hours, 1):
            if n % FULL_COLLECTION_EVERY == 0 and not gc.isenabled():  # paused (run.py)
                gc.collect()
            try:
                run_id = runs.start_run(engine, cluster, hour, "ingest", model_id)
            except DBAPIError as exc:
                _stop_if_database_failed(engine, exc)
                raise
            try:
                if started is not None:  # within: a stop while it is told is recorded below
                    started(hour, run_id)
                defer = day_floor(hour) in deferred
                where = (cluster, hour, source, run_id, watermark, labels, defer)
                _hour(engine, reader, model, *where)
            except RETRYABLE as exc:
                if isinstance(exc, DBAPIError):
                    _stop_if_database_failed(engine, exc, run_id)
                record_failure(engine, run_id, hour, exc, report)
                down = down + 1 if isinstance(exc, SOURCE_ERRORS) else 0
            except Exception as exc:  # unexpected, in this hour's data: recorded, the rest go on
                log.exception("hour %s failed", hour.isoformat())
                record_failure(engine, run_id, hour, exc, report, f"{type(exc).__name__}: ")
                down = 0
            except BaseException as exc:  # an interrupt: recorded, then raised
                runs.finish_run(engine, run_id, "failed", f"{type(exc).__name__}: {exc}")
                raise
            else:
                down = 0
                report.done.append(hour)
            if progress is not None:
                progress(hour, report.failed.get(hour))
            if down >= SOURCE_DOWN_AFTER:
                log.warning("the source looks down: the remaining hours wait for the next run")
                break
    finally:
        reader.close()
    pod_days_flushed(engine, deferred if not watermark else None)
    return report


def pod_days_flushed(engine: Engine, days: set[datetime] | None = None) -> None:
    """The pending days' per-pod rollup written (``days``: only those), at the end of a run; a
    database error is logged, not raised: the run's hours are done, a pending day is read from
    the chargeback meanwhile, and the next run writes it."""
    try:
        flush_pod_days(engine, days)
    except DBAPIError as exc:
        log.warning("per-pod rollup of pending days not written (the next run will): %s", exc)


def _hour(
    engine: Engine,
    reader: RunReader,
    model: CostModel,
    cluster: str,
    hour: datetime,
    source: str,
    run_id: int,
    watermark: bool,
    labels: tuple[LabelHistory, OwnerHistory, LocalQueueHistory],
    defer: bool = False,
) -> None:
    """One hour: collected, attributed, priced and stored in one transaction (``defer``: its
    day's per-pod rollup left pending)."""
    facts = collect_hour(reader, hour, cluster, source)
    end = hour + timedelta(hours=1)
    history, owner_history, queue_history = labels
    pod_labels, spaces = history.labels_during(hour, end)
    merge_history(facts, cluster, pod_labels, spaces)
    # controllers: the Kubernetes-API history wins over kube-state-metrics'
    pods, parents = owner_history.owners_during(hour, end)
    found = controllers_of(pods, parents.items(), pod_labels)
    facts.controllers.update({(cluster, *pod): c for pod, c in found.items()})
    queue_owners = model.queues.owners
    kueue = collect_kueue(reader.prom, hour, cluster, queue_owners)
    links = {(cluster, *k): cq for k, cq in queue_history.links_during(hour, end).items()}
    pod_queues = PodQueues(kueue.uses, links, model.queues.flavors)
    teams = queue_teams(kueue, links, queue_owners)
    owners = OwnerLookup(facts, model.labels, queue_owners, teams)
    tags = line_tags(facts.pod_labels, pod_queues, owners.decided)
    result = attribute_hour(
        hour, facts.gpus, facts.holdings, owners, model, facts.controller_of, tags
    )
    served = collect_served(reader.prom, hour, cluster, facts.pod_labels, model.labels.role)
    priced = price_hour(served, result, model, owners)
    queues = {c: price_queues(quota_hour(u), model, hour) for c, u in kueue.uses.items()}
    where = (run_id, watermark, priced, defer, queues)
    store_hour(engine, cluster, facts, result, model.currency, *where)


def _stop_if_database_failed(engine: Engine, exc: DBAPIError, run_id: int | None = None) -> None:
    """An hour's database error that is the database's own (unreachable, disk full) ends the
    run, naming it (the caller says so, once): the hours after would fail the same way. The
    hour stays pending — after the watermark, or its run left unfinished — and its run is
    recorded failed where the database still takes that."""
    found = trouble(engine, exc)
    if found is None:
        return
    if run_id is not None:
        with contextlib.suppress(DBAPIError):
            runs.finish_run(engine, run_id, "failed", str(found))
    raise found from None


def record_failure(
    engine: Engine, run_id: int, hour: datetime, exc: Exception, report: Report, prefix: str = ""
) -> None:
    message = prefix + (str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    report.failed[hour] = message
    log.warning("hour %s not done, will retry: %s", hour.isoformat(), message)
    runs.fail_run(engine, run_id, message)
