"""Ingest complete hours: collect -> attribute -> store, each hour in one transaction.

Re-running an hour replaces it. The watermark is the last hour done; hours after a failed one
wait, so it only moves forward over complete hours, and a failed hour — even one behind the
watermark, from a backfill — is retried by the next run (:func:`pending_hours`). Two ingesters
never write the same cluster at once (costsvc/db/runs.py: the writers' lock), and every run
records the cost-model document it priced with.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from costsvc.attribution import attribute_hour
from costsvc.costmodel import CostModel, MissingPrices
from costsvc.db import runs
from costsvc.db.hours import store_hour
from costsvc.db.labels import LabelHistory
from costsvc.ingest.hour import collect_hour
from costsvc.ingest.prom import PrometheusError, PrometheusReader
from costsvc.labels import OwnerLookup, merge_history

log = logging.getLogger(__name__)
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


def pending_hours(
    engine: Engine, cluster: str, stop: datetime, first_run_span: timedelta = timedelta(days=1)
) -> list[datetime]:
    """What a plain ``ingest`` does: hours that failed before, then every complete hour after
    the watermark (or, on the first run, of the last ``first_run_span``) up to ``stop``."""
    mark = runs.watermark(engine, cluster)
    begin = mark + timedelta(hours=1) if mark else stop - first_run_span
    fresh = complete_hours(begin, stop)
    retry = [h for h in runs.failed_hours(engine, cluster) if h + timedelta(hours=1) <= stop]
    return sorted(set(retry) | set(fresh))


def ingest(
    engine: Engine,
    prom: PrometheusReader,
    model: CostModel,
    cluster: str,
    hours: list[datetime],
    source: str = "auto",
) -> Report:
    """``source``: whose series to read (costsvc/ingest/hour.py: ``collect_hour``)."""
    report = Report()
    model_id = runs.record_cost_model(engine, model)
    history = LabelHistory(engine, cluster)
    for hour in hours:
        run_id = runs.start_run(engine, cluster, hour, "ingest", model_id)
        try:
            facts = collect_hour(prom, hour, cluster, source)
            merge_history(facts, cluster, *history.labels_during(hour, hour + timedelta(hours=1)))
            owners = OwnerLookup(facts, model.labels)
            result = attribute_hour(hour, facts.gpus, facts.holdings, owners, model)
            store_hour(engine, cluster, facts, result, model.currency, run_id)
        except RETRYABLE as exc:
            record_failure(engine, run_id, hour, exc, report)
            break  # later hours wait for this one
        except BaseException as exc:  # a bug or an interrupt: recorded, then raised
            runs.finish_run(engine, run_id, "failed", f"{type(exc).__name__}: {exc}")
            raise
        report.done.append(hour)
    return report


def record_failure(
    engine: Engine, run_id: int, hour: datetime, exc: Exception, report: Report
) -> None:
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    report.failed[hour] = message
    log.warning("hour %s not done, will retry: %s", hour.isoformat(), message)
    runs.fail_run(engine, run_id, message)
