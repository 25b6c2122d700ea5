"""``gpu-costsvc``: the cost service's command line.

Settings come from ``COSTSVC_*`` environment variables (see costsvc/settings.py). Implemented so
far: ``db upgrade`` / ``db downgrade``, ``ingest`` (from the watermark, or a backfill range) and
``serve`` (the hourly ingest scheduler; the HTTP API comes later). ``report`` and ``close`` come
with the API work and say so instead of pretending.
"""

from __future__ import annotations

import argparse
import logging
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import ValidationError

from costsvc import __version__
from costsvc.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

PROG = "gpu-costsvc"
log = logging.getLogger(PROG)


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="GPU chargeback: hourly cost per team from Prometheus.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    db = sub.add_parser("db", help="database schema (Alembic)")
    db.add_argument("action", choices=["upgrade", "downgrade"])
    db.add_argument("revision", nargs="?", default=None, help="default: head / base")
    ingest = sub.add_parser("ingest", help="ingest complete hours from Prometheus")
    ingest.add_argument("--start", help="first hour (ISO 8601, UTC); default: after the watermark")
    ingest.add_argument("--end", help="stop before this instant; default: now")
    serve = sub.add_parser("serve", help="ingest every hour, a few minutes past the hour")
    serve.add_argument("--delay", type=float, default=300.0,
                       help="seconds after the hour before ingesting it (default 300)")  # fmt: skip
    for name in ("report", "close"):
        sub.add_parser(name, help="not implemented yet")
    return p


def _hours(
    settings: Settings, engine: Engine, start: str | None, end: str | None
) -> list[datetime]:
    from costsvc.costmodel import utc
    from costsvc.ingest.run import complete_hours, pending_hours

    try:
        stop = utc(end) if end else datetime.now(UTC)
        begin = utc(start) if start else None
    except ValueError as exc:
        raise UsageError(f"--start/--end: {exc}") from None
    if begin is None:  # failed hours, then everything after the watermark
        return pending_hours(engine, settings.cluster, stop)
    return complete_hours(begin, stop)


def _progress(what: str, i: int, n: int, hour: datetime) -> None:
    if n > 1:
        end = "\n" if i == n else ""
        print(f"\r{PROG}: {what} {i}/{n} hours ({hour:%Y-%m-%d %H:00})", end=end,
              file=sys.stderr, flush=True)  # fmt: skip


def _eol(i: int) -> str:
    """A new line to end a progress line before a message (after the first hour)."""
    return "\n" if i > 1 else ""


def _ingest(settings: Settings, start: str | None, end: str | None) -> int:
    from costsvc.costmodel import CostModelError, load
    from costsvc.db.engine import make_engine
    from costsvc.ingest.prom import PrometheusReader
    from costsvc.ingest.reprice import reprice, stale_hours
    from costsvc.ingest.run import ingest

    if settings.cost_model is None:
        raise UsageError("COSTSVC_COST_MODEL: set it to the cost model file")
    try:
        model = load(settings.cost_model)
    except CostModelError as exc:
        raise UsageError(f"COSTSVC_COST_MODEL: {exc}") from None
    engine = make_engine(settings.database_url)
    reader = PrometheusReader(settings.prometheus_url)
    failed = 0
    try:
        # hours the cost model now prices differently (a new or back-dated version)
        stale = stale_hours(engine, model)
        for i, hour in enumerate(stale, 1):
            report = reprice(engine, model, settings.cluster, [hour])
            for bad, why in report.failed.items():
                failed += 1
                print(f"{_eol(i)}{PROG}: reprice {bad:%Y-%m-%d %H:00} failed: {why}",
                      file=sys.stderr)  # fmt: skip
            _progress("repriced", i, len(stale), hour)
        if stale:
            print(f"{PROG}: repriced {len(stale) - failed} hour(s) for the cost model")
        hours = _hours(settings, engine, start, end)
        done = 0
        for i, hour in enumerate(hours, 1):
            report = ingest(engine, reader, model, settings.cluster, [hour])
            done += len(report.done)
            if report.failed:
                failed += 1
                print(f"{_eol(i)}{PROG}: {hour:%Y-%m-%d %H:00} failed: {report.failed[hour]} "
                      "(it will be retried)", file=sys.stderr)  # fmt: skip
                break
            _progress("ingested", i, len(hours), hour)
        print(f"{PROG}: ingested {done} hour(s){f', {failed} failed' if failed else ''}")
        return 1 if failed else 0
    finally:
        reader.close()
        engine.dispose()


def _serve(settings: Settings, delay: float) -> int:
    import signal
    import threading

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    print(f"{PROG}: ingesting every hour, {delay:g} s past it; Ctrl-C stops", file=sys.stderr)
    watcher = _label_watcher(settings)
    while not stop.is_set():
        try:
            _ingest(settings, None, None)
        except UsageError as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return 2
        except Exception as exc:  # e.g. the database is down: try again next hour
            log.exception("ingest failed: %s", exc)
        now = datetime.now(UTC)
        next_run = now.replace(minute=0, second=0, microsecond=0) + timedelta(
            hours=1, seconds=delay
        )
        stop.wait((next_run - now).total_seconds())
    if watcher is not None:
        watcher.stop()
    return 0


def _label_watcher(settings: Settings) -> Any:
    """Pod and namespace labels from the Kubernetes API into the history tables, when an API
    is configured (or we run in a pod); otherwise kube-state-metrics' series are used."""
    import os

    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if not (settings.kube_api_url or settings.kubeconfig or in_cluster):
        return None
    from costsvc.db.engine import make_engine
    from costsvc.k8slabels import LabelHistory, LabelWatcher
    from exporter.kubepods import core_api

    kubeconfig = str(settings.kubeconfig) if settings.kubeconfig else None
    try:
        api = core_api(kubeconfig, settings.kube_api_url)
    except Exception as exc:
        raise UsageError(f"COSTSVC_KUBECONFIG: {exc}") from None
    history = LabelHistory(make_engine(settings.database_url), settings.cluster)
    watcher = LabelWatcher(history, api, lambda kind: None)
    watcher.start()
    return watcher


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
        try:
            settings = Settings()
        except ValidationError as exc:
            err = exc.errors()[0]
            field = "COSTSVC_" + str(err["loc"][0]).upper()
            raise UsageError(f"{field}: {err['msg']}") from None
        if args.command == "db":
            from costsvc.db.migrate import downgrade, upgrade

            if args.action == "upgrade":
                upgrade(settings.database_url, args.revision or "head")
            else:
                downgrade(settings.database_url, args.revision or "base")
            return 0
        if args.command == "ingest":
            return _ingest(settings, args.start, args.end)
        if args.command == "serve":
            return _serve(settings, args.delay)
        print(f"{PROG}: error: '{args.command}' is not implemented yet", file=sys.stderr)
        return 1
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
