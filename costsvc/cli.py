"""``gpu-costsvc``: the cost service's command line.

Settings come from ``COSTSVC_*`` environment variables (see costsvc/kit/settings.py). Commands:
``db upgrade`` / ``db downgrade``, ``ingest`` (from the watermark, or a backfill range),
``serve`` (the HTTP API and the hourly ingest scheduler), ``report`` (a month as CSV or FOCUS),
``close`` (freeze a month), ``cost-model`` (import, show: where the cost model lives in the
database), ``recommend`` (GPU rightsizing: compute, store, print the top savings) and ``token``
(create, revoke, list API tokens), ``opencost-proxy`` (OpenCost's clients against
``/allocation``: costsvc/opencost/proxy.py).

This module is the entry point (the parser, ``main``, its exit codes) and ``serve``; the other
commands are in costsvc/commands/ (``ingest``: ingest.py; ``db``, ``report``, ``close``,
``cost-model``, ``token``: admin.py).
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import threading
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from pydantic import ValidationError
from pydantic_settings import SettingsError

from costsvc import __version__
from costsvc.auth.roles import ROLES
from costsvc.commands import admin
from costsvc.commands.common import PROG, UsageError, cost_model_in_force, database_failure
from costsvc.commands.common import prometheus_reader as _reader
from costsvc.commands.hourly import LOG_FORMAT
from costsvc.commands.ingest import ingest_command, ingest_status, recommend
from costsvc.kit.settings import Settings
from costsvc.kit.times import hour_floor

__all__ = ["PROG", "UsageError", "build_parser", "main"]
log = logging.getLogger(PROG)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _token_parser(sub: Any) -> None:
    """``gpu-costsvc token``: create, revoke and list API tokens."""
    token = sub.add_parser("token", help="API bearer tokens (stored hashed)")
    token.add_argument("action", choices=["create", "revoke", "list"])
    token.add_argument("--name", help="a unique name (create, revoke)")
    token.add_argument("--role", choices=ROLES, default="team")
    token.add_argument("--team", help="the team a team token may see")
    token.add_argument(
        "--output",
        help="create: write the token to this file (mode 0600) instead of standard output, "
        "and do nothing when the file already holds a live token (for a scraper's token file)",
    )
    token.add_argument(
        "--owner",
        help="create --output: UID:GID to own the file (the user that reads it, e.g. a "
        "Prometheus running as 65534:65534); needs the right to chown",
    )
    token.add_argument(
        "--from-file",
        dest="from_file",
        help="create: register the token held in this file (e.g. a mounted Secret) instead of "
        "a new one; nothing is done when it is a live token already",
    )
    token.add_argument(
        "--ensure",
        action="store_true",
        help="create --from-file: exit 0 when --name is that token already (or register it), "
        "and refuse with exit status 4 when --name holds another token (a changed Secret)",
    )
    token.add_argument(
        "--on-conflict",
        dest="on_conflict",
        choices=["fail", "warn"],
        default="fail",
        help="create --ensure: on another token of that name, fail (exit 4; the default) or "
        "warn and exit 0, the registered token staying in force (a pod's init container)",
    )


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="GPU chargeback: hourly cost per team from Prometheus.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    db = sub.add_parser("db", help="database schema (Alembic)")
    db.add_argument("action", choices=["upgrade", "downgrade"])
    db.add_argument("revision", nargs="?", default=None, help="default: head / base")
    ingest = sub.add_parser("ingest", help="ingest complete hours from Prometheus")
    ingest.add_argument("--start", help="first hour (ISO 8601, UTC); default: after the watermark")
    ingest.add_argument(
        "--end", help="stop before this instant; default: now (never past the last whole hour)"
    )
    ingest.add_argument(
        "--status",
        action="store_true",
        help="list the failed hours (exit 1 if there are any) and ingest nothing",
    )
    serve = sub.add_parser("serve", help="ingest every hour, a few minutes past the hour")
    serve.add_argument(
        "--delay",
        type=float,
        default=300.0,
        help="seconds after the hour before ingesting it (default 300)",
    )
    serve.add_argument(
        "--no-ingest", action="store_true", help="serve the API only (another process ingests)"
    )
    serve.add_argument(
        "--workers", type=int, default=1, help="API worker processes (ingest stays in this one)"
    )
    report = sub.add_parser("report", help="a month's chargeback as CSV or FOCUS (1.2, 1.3)")
    report.add_argument("--month", required=True, help="YYYY-MM")
    report.add_argument("--format", choices=["csv", "focus"], default="csv")
    report.add_argument(
        "--focus-version",
        choices=["1.2", "1.3"],
        default="1.2",
        help="focus only: 1.3 adds split cost allocation (docs/focus.md)",
    )
    report.add_argument("-o", "--output", help="file to write (default: standard output)")
    report.add_argument("--group-by", help="csv only: comma-separated dimensions")
    close = sub.add_parser("close", help="freeze a month: later data becomes corrections")
    close.add_argument("--month", required=True, help="YYYY-MM (a month that has ended)")
    close.add_argument("--as", dest="actor", default="cli", help="who closes it (audit log)")
    forced = "close even with failed or missing hours (they are recorded in the audit log)"
    close.add_argument("--force", action="store_true", help=forced)
    close.add_argument("--reason", default="", help="why it is forced (audit log; needed if empty)")
    model = sub.add_parser(
        "cost-model",
        help="the cost model kept in the database (when COSTSVC_COST_MODEL is not set)",
    )
    model.add_argument("action", choices=["import", "show"])
    model.add_argument("file", nargs="?", help="import: the YAML file to put in force")
    model.add_argument("--as", dest="actor", default="cli", help="who imports it (audit log)")
    rec = sub.add_parser(
        "recommend", help="GPU rightsizing: compute, store and print the recommendations"
    )
    rec.add_argument("--window", type=float, default=7.0, help="look-back in days (default 7)")
    rec.add_argument(
        "--min-hours", type=float, default=24.0, help="hours of data before recommending (24)"
    )
    rec.add_argument("--end", help="end of the window (ISO 8601, UTC); default: now")
    rec.add_argument("--top", type=int, default=20, help="rows to print (default 20)")
    rec.add_argument("--team", help="only this team's recommendations")
    _token_parser(sub)
    from costsvc.opencost.proxy import add_parser as add_proxy_parser

    add_proxy_parser(sub)
    return p


def _progress(what: str, i: int, n: int, hour: datetime) -> None:
    if n > 1:
        end = "\n" if i == n else ""
        print(
            f"\r{PROG}: {what} {i}/{n} hours ({hour:%Y-%m-%d %H:00})",
            end=end,
            file=sys.stderr,
            flush=True,
        )


def _ingest(settings: Settings, start: str | None, end: str | None, paused: bool = False) -> int:
    """The ingest (costsvc/commands/ingest.py), its progress line drawn by :func:`_progress`."""

    def show(what: str, i: int, n: int, hour: datetime) -> None:
        _progress(what, i, n, hour)  # looked up at each call: a test may replace it

    return ingest_command(settings, start, end, show, paused)


def _scheduler(settings: Settings, delay: float, stop: threading.Event) -> None:
    """Every hour, ``delay`` seconds past it, until ``stop``: the hour's work (ingest, then the
    rightsizing recommendations and quota usage) in a process of its own
    (costsvc/commands/hourly.py), this thread waiting for it."""
    from costsvc.commands.hourly import run_hour

    while not stop.is_set():
        now = datetime.now(UTC)
        try:
            run_hour(settings, now, stop)
        except Exception as exc:  # e.g. no process could be started: try again next hour
            log.exception("hourly run failed to start: %s", exc)
        now = datetime.now(UTC)
        next_run = hour_floor(now) + timedelta(hours=1, seconds=delay)
        stop.wait((next_run - now).total_seconds())


def _serve(settings: Settings, delay: float, ingest: bool, workers: int = 1) -> int:
    import uvicorn

    from costsvc.api import server
    from costsvc.api.app import create_app

    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    if ingest:  # a bad cost model fails here, at start-up, naming the field
        from costsvc.db.engine import make_engine

        engine = make_engine(settings.database_url)
        try:
            cost_model_in_force(settings, engine, " (or serve with --no-ingest)")
        finally:
            engine.dispose()
        _reader(settings).close()  # a bad query-API token file fails here too
    host, _, port = settings.listen_address.rpartition(":")
    bind_host, bind_port = host.strip("[]") or "0.0.0.0", int(port)
    stop = threading.Event()
    watcher = _label_watcher(settings)
    worker = None
    if ingest:
        print(f"{PROG}: ingesting every hour, {delay:g} s past it", file=sys.stderr)
        worker = threading.Thread(
            target=_scheduler, args=(settings, delay, stop), name="ingest", daemon=True
        )
        worker.start()
    print(f"{PROG}: API on http://{settings.listen_address}/docs; Ctrl-C stops", file=sys.stderr)
    try:
        if workers > 1:  # worker processes build the app from the same COSTSVC_* environment
            uvicorn.run(
                "costsvc.api.app:create_app",
                factory=True,
                workers=workers,
                host=bind_host,
                port=bind_port,
                log_level="info",
                **server.options(settings, by_name=True),
            )
        else:  # handles SIGINT / SIGTERM
            uvicorn.Server(
                server.config(create_app(settings), settings, bind_host, bind_port)
            ).run()
    finally:
        stop.set()
        if watcher is not None:
            watcher.stop()
        if worker is not None:
            worker.join(30)
    return 0


def _label_watcher(settings: Settings) -> Any:
    """Pod and namespace labels from the Kubernetes API into the history tables, when an API
    is configured (or we run in a pod); otherwise kube-state-metrics' series are used."""
    import os

    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if not (settings.kube_api_url or settings.kubeconfig or in_cluster):
        return None
    from costsvc.db.engine import make_engine
    from costsvc.labels.history import LabelHistory
    from costsvc.labels.kube_watch import LabelWatcher
    from kube.client import core_api

    kubeconfig = str(settings.kubeconfig) if settings.kubeconfig else None
    try:
        api = core_api(kubeconfig, settings.kube_api_url)
    except Exception as exc:
        raise UsageError(f"COSTSVC_KUBECONFIG: {exc}") from None
    from costsvc.advice.kube_owners import OwnerWatcher
    from costsvc.advice.repository import OwnerHistory, QuotaStore
    from kube.watch import SharedWatches

    engine = make_engine(settings.database_url)
    history = LabelHistory(engine, settings.cluster)
    # one list + watch of pods for both histories (kube/watch.py SharedWatches), not two
    watches: list[Any] = [
        LabelWatcher(history, api, lambda kind: None),
        OwnerWatcher(
            OwnerHistory(engine, settings.cluster),
            QuotaStore(engine, settings.cluster),
            api,
            lambda kind: None,
        ),
    ]
    if settings.kueue_api_version:  # Kueue's LocalQueues: their ClusterQueue over time
        from costsvc.queues.kube_watch import LocalQueueWatcher
        from costsvc.queues.links import LocalQueueHistory
        from kube.client import custom_api

        links = LocalQueueHistory(engine, settings.cluster)
        version = settings.kueue_api_version
        watches.append(LocalQueueWatcher(links, custom_api(api), version, lambda kind: None))
    watcher = SharedWatches(*watches, name="costsvc")
    watcher.start()
    return watcher


def main(argv: list[str] | None = None) -> int:
    settings: Settings | None = None
    try:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
        try:
            settings = Settings()
        except ValidationError as exc:
            err = exc.errors()[0]
            field = "COSTSVC_" + str(err["loc"][0]).upper()
            raise UsageError(f"{field}: {err['msg']}") from None
        except SettingsError as exc:  # a complex value (a JSON object) that does not parse
            named = re.search(r'field "(\w+)"', str(exc))
            name = "COSTSVC_" + named.group(1).upper() if named else "COSTSVC_*"
            raise UsageError(f"{name}: not valid JSON") from None
        if args.command == "db":
            return admin.db_command(settings, args.action, args.revision)
        if args.command == "ingest":
            if args.status:
                return ingest_status(settings)
            return _ingest(settings, args.start, args.end, paused=True)
        if args.command == "serve":
            if not 1 <= args.workers <= 64:
                raise UsageError("--workers: between 1 and 64")
            return _serve(settings, args.delay, not args.no_ingest, args.workers)
        if args.command == "report":
            return admin.report_command(
                settings, args.month, args.format, args.output, args.group_by, args.focus_version
            )
        if args.command == "close":
            return admin.close_command(settings, args.month, args.actor, args.force, args.reason)
        if args.command == "cost-model":
            return admin.cost_model_command(settings, args.action, args.file, args.actor)
        if args.command == "recommend":
            return recommend(settings, args)
        if args.command == "opencost-proxy":
            from costsvc.opencost.proxy import ProxyError, run

            try:
                return run(args)
            except ProxyError as exc:
                raise UsageError(str(exc)) from None
        return admin.token_command(settings, args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        line = database_failure(settings, exc)
        if line is None:
            raise
        print(f"{PROG}: error: {line}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
