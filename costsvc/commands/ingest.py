"""``gpu-costsvc ingest`` (and ``ingest --status``) and ``recommend``: hours from Prometheus
into the database, rightsizing and quota usage computed and stored. ``serve``'s scheduler runs
the same functions every hour (costsvc/cli.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from costsvc.commands.common import (
    PROG,
    UsageError,
    cost_model_in_force,
    prometheus_reader,
    reader_headers,
)
from costsvc.kit.settings import Settings
from costsvc.kit.times import iso_z, parse_utc

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from costsvc.ingest.prom import PrometheusReader
    from costsvc.rules.cost_model import CostModel

# the progress line: what, hours done, hours in all, the hour (costsvc/cli.py draws it)
Progress = Callable[[str, int, int, datetime], None]


def span(
    start: str | None, end: str | None, now: datetime | None = None
) -> tuple[datetime | None, datetime]:
    """``--start`` and ``--end`` (no end: ``now``, default the clock's), the end clipped to
    the last complete hour at ``now`` (said so)."""
    from costsvc.ingest.run import clip_end

    try:
        stop = parse_utc(end) if end else now or datetime.now(UTC)
        begin = parse_utc(start) if start else None
    except ValueError as exc:
        raise UsageError(f"--start/--end: {exc}") from None
    stop, clipped = clip_end(stop, now)
    if clipped and end:
        print(
            f"{PROG}: --end {end} is after the last complete hour: clipped to "
            f"{iso_z(stop)} (an hour is ingested once it has ended)",
            file=sys.stderr,
        )
    return begin, stop


def hours_of(
    settings: Settings,
    engine: Engine,
    start: str | None,
    end: str | None,
    model_id: int,
    now: datetime | None = None,
) -> list[datetime]:
    from costsvc.ingest.run import complete_hours, pending_hours

    begin, stop = span(start, end, now)
    if begin is None:  # everything after the watermark, then failed hours due for a retry
        return pending_hours(engine, settings.cluster, stop, model_id=model_id, now=now)
    return complete_hours(begin, stop)


def eol(i: int) -> str:
    """A new line to end a progress line before a message (after the first hour)."""
    return "\n" if i > 1 else ""


def ingest_command(
    settings: Settings,
    start: str | None,
    end: str | None,
    show: Progress,
    paused: bool = False,
    now: datetime | None = None,
) -> int:
    """Ingest (and reprice), each hour done shown by ``show``; ``paused``: in a process that
    only ingests (the ``ingest`` command, ``serve``'s hourly child: costsvc/commands/hourly.py)
    the garbage collector is paused (costsvc/ingest/run.py ``collections_paused``), never in a
    process that serves the API; ``now``: the clock reading the hours end at (default the
    clock's)."""
    from contextlib import nullcontext

    from costsvc.ingest.run import collections_paused

    with collections_paused() if paused else nullcontext():
        return ingest_once(settings, start, end, show, now)


def ingest_once(
    settings: Settings,
    start: str | None,
    end: str | None,
    show: Progress,
    now: datetime | None = None,
) -> int:
    from costsvc.db import runs
    from costsvc.db.engine import make_engine
    from costsvc.ingest.reprice import reprice, stale_hours
    from costsvc.ingest.run import ingest

    engine = make_engine(settings.database_url)
    try:
        model = cost_model_in_force(settings, engine)
        reader = prometheus_reader(settings)
    except UsageError:
        engine.dispose()
        raise
    failed = done = seen = 0
    hours: list[datetime] = []
    try:
        # hours the cost model now prices differently (a new or back-dated version)
        stale = stale_hours(engine, model)
        for i, hour in enumerate(stale, 1):
            report = reprice(engine, model, settings.cluster, [hour])
            for bad, why in report.failed.items():
                failed += 1
                print(
                    f"{eol(i)}{PROG}: reprice {bad:%Y-%m-%d %H:00} failed: {why}", file=sys.stderr
                )
            show("repriced", i, len(stale), hour)
        if stale:
            print(f"{PROG}: repriced {len(stale) - failed} hour(s) for the cost model")
        model_id = runs.record_cost_model(engine, model)
        hours = [] if settings.clusters else hours_of(settings, engine, start, end, model_id, now)

        def progress(hour: datetime, error: str | None) -> None:
            nonlocal done, failed, seen
            seen += 1
            i = seen
            if error is None:
                done += 1
                show("ingested", i, len(hours), hour)
            else:
                failed += 1
                print(
                    f"{eol(i)}{PROG}: {hour:%Y-%m-%d %H:00} failed: {error} "
                    "(it will be retried; see ingest --status)",
                    file=sys.stderr,
                )

        if settings.clusters:
            ingest_clusters(settings, engine, model, start, end, progress, now)
        else:
            ingest(
                engine,
                reader,
                model,
                settings.cluster,
                hours,
                progress,
                settings.source,
                settings.ingest_workers,
            )
        print(f"{PROG}: ingested {done} hour(s){f', {failed} failed' if failed else ''}")
        return 1 if failed else 0
    except Exception:
        if len(hours) > 1 and 0 < seen < len(hours):
            print(file=sys.stderr)  # end the progress line before the error's
        raise
    finally:
        reader.close()
        engine.dispose()


def ingest_clusters(
    settings: Settings,
    engine: Engine,
    model: CostModel,
    start: str | None,
    end: str | None,
    progress: Callable[[datetime, str | None], None],
    now: datetime | None = None,
) -> None:
    """``COSTSVC_CLUSTERS``: each cluster this replica can claim, with its own hours
    (costsvc/ingest/clusters.py); the clusters other replicas hold are named."""
    from costsvc.db.runs import record_cost_model
    from costsvc.ingest import clusters
    from costsvc.ingest.run import complete_hours, pending_hours

    begin, stop = span(start, end, now)
    hours_for: Callable[[str, datetime], list[datetime]]
    if begin is None:  # each cluster: after its watermark, then its failed hours due
        model_id = record_cost_model(engine, model)

        def hours_for(cluster: str, began: datetime) -> list[datetime]:
            return pending_hours(engine, cluster, stop, model_id=model_id, now=now)

    else:
        hours_for = clusters.backfill_hours(engine, complete_hours(begin, stop))
    names = settings.clusters
    if names == [clusters.ALL]:
        reader = prometheus_reader(settings)
        try:
            names = clusters.discover(
                reader, begin or stop - timedelta(days=1), stop, settings.cluster
            )
        finally:
            reader.close()
    headers = reader_headers(settings)

    def reader_for(cluster: str) -> PrometheusReader:
        return clusters.ClusterReader(
            settings.prometheus_url,
            cluster,
            settings.cluster,
            headers=headers,
            params=settings.prometheus_params,
            compress=settings.prometheus_compression,
        )

    report = clusters.ingest_clusters(
        engine,
        reader_for,
        model,
        names,
        hours_for,
        settings.source,
        lambda _cluster, hour, error: progress(hour, error),
        workers=settings.ingest_workers,
    )
    if report.skipped:
        print(f"{PROG}: left to another replica: {', '.join(report.skipped)}", file=sys.stderr)


def ingest_status(settings: Settings) -> int:
    """Each cluster's watermark, and every failed hour: attempts, next retry, last error."""
    from costsvc.db.engine import make_engine
    from costsvc.db.runs import failed_hour_states, watermarks
    from costsvc.ingest.run import retry_delay
    from costsvc.kit.times import iso_z

    engine = make_engine(settings.database_url)
    try:
        marks = watermarks(engine)
        failed = failed_hour_states(engine)
    finally:
        engine.dispose()
    for cluster, hour in sorted(marks.items()):
        print(f"cluster {cluster}: ingested up to {iso_z(hour)} (the hour starting then)")
    if not failed:
        print("no failed hours")
        return 0
    print(f"{len(failed)} failed hour(s):")
    print("cluster\thour\tattempts\tnext retry\terror")
    for f in failed:
        retry = iso_z(f.last_attempt_at + retry_delay(f.attempts))
        error = (f.error or "").replace("\t", " ").replace("\n", " ")
        print(f"{f.cluster}\t{iso_z(f.hour)}\t{f.attempts}\t{retry}\t{error}")
    return 1


def advise(
    settings: Settings,
    window_days: float = 7.0,
    min_hours: float = 24.0,
    end: str | None = None,
) -> None:
    """Compute and store recommendations and quota usage (costsvc/advice/run.py)."""
    from decimal import Decimal

    from costsvc.advice.rightsizing import Rules
    from costsvc.advice.run import Options, run
    from costsvc.db.engine import make_engine

    if not 1 / 24 <= window_days <= 90 or not 0 <= min_hours <= 24 * 90:
        raise UsageError("--window: 1 hour to 90 days; --min-hours: 0 to the window")
    try:
        stop = parse_utc(end) if end else datetime.now(UTC)
    except ValueError as exc:
        raise UsageError(f"--end: {exc}") from None
    options = Options(
        window=timedelta(days=window_days), rules=Rules(min_hours=Decimal(str(min_hours)))
    )
    engine = make_engine(settings.database_url)
    try:
        model = cost_model_in_force(settings, engine)  # the file, or the database's
        reader = prometheus_reader(settings)
        try:
            run(engine, reader, model, settings.cluster, stop, options)
        finally:
            reader.close()
    finally:
        engine.dispose()


def recommend(settings: Settings, args: argparse.Namespace) -> int:
    from costsvc.advice.repository import recommendations
    from costsvc.advice.rightsizing import ACTIONABLE
    from costsvc.advice.run import table
    from costsvc.db.engine import make_engine
    from costsvc.ingest.prom import PrometheusError

    try:
        advise(settings, args.window, args.min_hours, args.end)
    except PrometheusError as exc:
        print(f"{PROG}: Prometheus: {exc}", file=sys.stderr)
        return 1
    engine = make_engine(settings.database_url)
    try:
        filters = {"team": [args.team]} if args.team else None
        rows = recommendations(engine, filters, ACTIONABLE, args.top)
    finally:
        engine.dispose()
    print(table(rows) if rows else f"{PROG}: no recommendations")
    return 0
