"""``gpu-costsvc``: the cost service's command line.

Settings come from ``COSTSVC_*`` environment variables (see costsvc/settings.py). Commands:
``db upgrade`` / ``db downgrade``, ``ingest`` (from the watermark, or a backfill range),
``serve`` (the HTTP API and the hourly ingest scheduler), ``report`` (a month as CSV or FOCUS),
``close`` (freeze a month), ``cost-model`` (import, show: where the cost model lives in the
database), ``recommend`` (GPU rightsizing: compute, store, print the top savings) and ``token``
(create, revoke, list API tokens), ``opencost-proxy`` (OpenCost's clients against
``/allocation``: costsvc/opencost_proxy.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import ValidationError
from pydantic_settings import SettingsError

from costsvc import __version__
from costsvc.settings import Settings
from costsvc.utc import hour_floor

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from costsvc.costmodel import CostModel
    from costsvc.ingest.prom import PrometheusReader

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
    report = sub.add_parser("report", help="a month's chargeback as CSV or FOCUS 1.2")
    report.add_argument("--month", required=True, help="YYYY-MM")
    report.add_argument("--format", choices=["csv", "focus"], default="csv")
    report.add_argument("-o", "--output", help="file to write (default: standard output)")
    report.add_argument("--group-by", help="csv only: comma-separated dimensions")
    close = sub.add_parser("close", help="freeze a month: later data becomes corrections")
    close.add_argument("--month", required=True, help="YYYY-MM (a month that has ended)")
    close.add_argument("--as", dest="actor", default="cli", help="who closes it (audit log)")
    close.add_argument(
        "--force",
        action="store_true",
        help="close even with failed or missing hours (they are recorded in the audit log)",
    )
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
    token = sub.add_parser("token", help="API bearer tokens (stored hashed)")
    token.add_argument("action", choices=["create", "revoke", "list"])
    token.add_argument("--name", help="a unique name (create, revoke)")
    token.add_argument("--role", choices=["admin", "finance", "team", "metrics"], default="team")
    token.add_argument("--team", help="the team a team token may see")
    token.add_argument(
        "--output",
        help="create: write the token to this file (mode 0644) instead of standard output, "
        "and do nothing when the file already holds a live token (for a scraper's token file)",
    )
    token.add_argument(
        "--from-file",
        dest="from_file",
        help="create: register the token held in this file (e.g. a mounted Secret) instead of "
        "a new one; nothing is done when it is a live token already",
    )
    from costsvc.opencost_proxy import add_parser as add_proxy_parser

    add_proxy_parser(sub)
    return p


def _span(start: str | None, end: str | None) -> tuple[datetime | None, datetime]:
    """``--start`` and ``--end``, the end clipped to the last complete hour (said so)."""
    from costsvc.costmodel import utc
    from costsvc.ingest.run import clip_end

    try:
        stop = utc(end) if end else datetime.now(UTC)
        begin = utc(start) if start else None
    except ValueError as exc:
        raise UsageError(f"--start/--end: {exc}") from None
    stop, clipped = clip_end(stop)
    if clipped and end:
        print(
            f"{PROG}: --end {end} is after the last complete hour: clipped to "
            f"{stop:%Y-%m-%dT%H:%M:%SZ} (an hour is ingested once it has ended)",
            file=sys.stderr,
        )
    return begin, stop


def _hours(
    settings: Settings, engine: Engine, start: str | None, end: str | None, model_id: int
) -> list[datetime]:
    from costsvc.ingest.run import complete_hours, pending_hours

    begin, stop = _span(start, end)
    if begin is None:  # everything after the watermark, then failed hours due for a retry
        return pending_hours(engine, settings.cluster, stop, model_id=model_id)
    return complete_hours(begin, stop)


def _progress(what: str, i: int, n: int, hour: datetime) -> None:
    if n > 1:
        end = "\n" if i == n else ""
        print(
            f"\r{PROG}: {what} {i}/{n} hours ({hour:%Y-%m-%d %H:00})",
            end=end,
            file=sys.stderr,
            flush=True,
        )


def _cost_model(settings: Settings, engine: Engine, hint: str = "") -> CostModel:
    """The cost model in force (costsvc/model_source.py), or a usage error naming why not."""
    from sqlalchemy.exc import SQLAlchemyError

    from costsvc.costmodel import CostModelError
    from costsvc.model_source import in_force

    try:
        return in_force(settings.cost_model, engine).model
    except CostModelError as exc:
        raise UsageError(f"COSTSVC_COST_MODEL: {exc}{hint}") from None
    except SQLAlchemyError as exc:  # no file, and a database without the schema (or down)
        from costsvc.db.engine import trouble

        if (down := trouble(engine, exc)) is not None:
            raise down from None
        raise UsageError(
            "COSTSVC_COST_MODEL is not set and the database holds no cost model (run "
            f"gpu-costsvc db upgrade, then gpu-costsvc cost-model import FILE){hint}"
        ) from None


def _eol(i: int) -> str:
    """A new line to end a progress line before a message (after the first hour)."""
    return "\n" if i > 1 else ""


def _reader_headers(settings: Settings) -> dict[str, str]:
    try:
        return settings.prometheus_request_headers()
    except (OSError, ValueError) as exc:
        raise UsageError(f"COSTSVC_PROMETHEUS_BEARER_TOKEN_FILE: {exc}") from None


def _reader(settings: Settings) -> PrometheusReader:
    """The query API client of the settings (a bad token file fails start-up, naming it)."""
    from costsvc.ingest.prom import PrometheusReader

    return PrometheusReader(
        settings.prometheus_url,
        headers=_reader_headers(settings),
        params=settings.prometheus_params,
        reads=settings.ingest_reads,
        compress=settings.prometheus_compression,
    )


def _ingest(settings: Settings, start: str | None, end: str | None, paused: bool = False) -> int:
    """Ingest (and reprice); ``paused``: the ``ingest`` command, a process of its own, runs
    with the garbage collector paused (costsvc/ingest/run.py ``collections_paused``), never
    ``serve``'s scheduler thread, which shares its process with the API."""
    from contextlib import nullcontext

    from costsvc.ingest.run import collections_paused

    with collections_paused() if paused else nullcontext():
        return _ingest_once(settings, start, end)


def _ingest_once(settings: Settings, start: str | None, end: str | None) -> int:
    from costsvc.db import runs
    from costsvc.db.engine import make_engine
    from costsvc.ingest.reprice import reprice, stale_hours
    from costsvc.ingest.run import ingest

    engine = make_engine(settings.database_url)
    try:
        model = _cost_model(settings, engine)
        reader = _reader(settings)
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
                    f"{_eol(i)}{PROG}: reprice {bad:%Y-%m-%d %H:00} failed: {why}", file=sys.stderr
                )
            _progress("repriced", i, len(stale), hour)
        if stale:
            print(f"{PROG}: repriced {len(stale) - failed} hour(s) for the cost model")
        model_id = runs.record_cost_model(engine, model)
        hours = [] if settings.clusters else _hours(settings, engine, start, end, model_id)

        def progress(hour: datetime, error: str | None) -> None:
            nonlocal done, failed, seen
            seen += 1
            i = seen
            if error is None:
                done += 1
                _progress("ingested", i, len(hours), hour)
            else:
                failed += 1
                print(
                    f"{_eol(i)}{PROG}: {hour:%Y-%m-%d %H:00} failed: {error} "
                    "(it will be retried; see ingest --status)",
                    file=sys.stderr,
                )

        if settings.clusters:
            _ingest_clusters(settings, engine, model, start, end, progress)
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


def _ingest_clusters(
    settings: Settings,
    engine: Engine,
    model: CostModel,
    start: str | None,
    end: str | None,
    progress: Callable[[datetime, str | None], None],
) -> None:
    """``COSTSVC_CLUSTERS``: each cluster this replica can claim, with its own hours
    (costsvc/ingest/clusters.py); the clusters other replicas hold are named."""
    from costsvc.db.runs import record_cost_model
    from costsvc.ingest import clusters as fleet
    from costsvc.ingest.run import complete_hours, pending_hours

    begin, stop = _span(start, end)
    hours_for: Callable[[str, datetime], list[datetime]]
    if begin is None:  # each cluster: after its watermark, then its failed hours due
        model_id = record_cost_model(engine, model)

        def hours_for(cluster: str, began: datetime) -> list[datetime]:
            return pending_hours(engine, cluster, stop, model_id=model_id)

    else:
        hours_for = fleet.backfill_hours(engine, complete_hours(begin, stop))
    names = settings.clusters
    if names == [fleet.ALL]:
        reader = _reader(settings)
        try:
            names = fleet.discover(
                reader, begin or stop - timedelta(days=1), stop, settings.cluster
            )
        finally:
            reader.close()
    headers = _reader_headers(settings)

    def reader_for(cluster: str) -> PrometheusReader:
        return fleet.ClusterReader(
            settings.prometheus_url,
            cluster,
            settings.cluster,
            headers=headers,
            params=settings.prometheus_params,
            reads=settings.ingest_reads,
            compress=settings.prometheus_compression,
        )

    report = fleet.ingest_clusters(
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


def _ingest_status(settings: Settings) -> int:
    """Each cluster's watermark, and every failed hour: attempts, next retry, last error."""
    from costsvc.db.engine import make_engine
    from costsvc.db.runs import failed_hour_states, watermarks
    from costsvc.ingest.run import retry_delay
    from costsvc.utc import iso_z

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


def _advise(
    settings: Settings,
    window_days: float = 7.0,
    min_hours: float = 24.0,
    end: str | None = None,
) -> None:
    """Compute and store recommendations and quota usage (costsvc/advise.py)."""
    from decimal import Decimal

    from costsvc.advise import Options, run
    from costsvc.costmodel import utc
    from costsvc.db.engine import make_engine
    from costsvc.rightsizing import Rules

    if not 1 / 24 <= window_days <= 90 or not 0 <= min_hours <= 24 * 90:
        raise UsageError("--window: 1 hour to 90 days; --min-hours: 0 to the window")
    try:
        stop = utc(end) if end else datetime.now(UTC)
    except ValueError as exc:
        raise UsageError(f"--end: {exc}") from None
    options = Options(
        window=timedelta(days=window_days), rules=Rules(min_hours=Decimal(str(min_hours)))
    )
    engine = make_engine(settings.database_url)
    try:
        model = _cost_model(settings, engine)  # the one in force: the file, or the database's
        reader = _reader(settings)
        try:
            run(engine, reader, model, settings.cluster, stop, options)
        finally:
            reader.close()
    finally:
        engine.dispose()


def _recommend(settings: Settings, args: argparse.Namespace) -> int:
    from costsvc.advise import table
    from costsvc.db.advice import recommendations
    from costsvc.db.engine import make_engine
    from costsvc.ingest.prom import PrometheusError
    from costsvc.rightsizing import ACTIONABLE

    try:
        _advise(settings, args.window, args.min_hours, args.end)
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


def _scheduler(settings: Settings, delay: float, stop: threading.Event) -> None:
    """Ingest every hour, ``delay`` seconds past it, until ``stop``; then recompute the
    rightsizing recommendations and quota usage."""
    while not stop.is_set():
        try:
            _ingest(settings, None, None)
        except Exception as exc:  # e.g. the database is down: try again next hour
            if (line := _database_failure(settings, exc)) is not None:
                log.error("ingest stopped: %s; the next run tries again", line)
            else:
                log.exception("ingest failed: %s", exc)
        try:
            _advise(settings)
        except Exception as exc:
            log.exception("recommendations failed: %s", exc)
        now = datetime.now(UTC)
        next_run = hour_floor(now) + timedelta(hours=1, seconds=delay)
        stop.wait((next_run - now).total_seconds())


def _serve(settings: Settings, delay: float, ingest: bool, workers: int = 1) -> int:
    import uvicorn

    from costsvc.api import server
    from costsvc.api.app import create_app

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if ingest:  # a bad cost model fails here, at start-up, naming the field
        from costsvc.db.engine import make_engine

        engine = make_engine(settings.database_url)
        try:
            _cost_model(settings, engine, " (or serve with --no-ingest)")
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


def _report(settings: Settings, month: str, fmt: str, out: str | None, group_by: str | None) -> int:
    from costsvc.chargeback import parse_month
    from costsvc.db.engine import make_engine
    from costsvc.reports import chargeback_csv, focus_csv

    try:
        parse_month(month)
    except ValueError as exc:
        raise UsageError(f"--month: {exc}") from None
    groups = [g for g in (group_by or "").split(",") if g]
    if groups and fmt != "csv":
        raise UsageError("--group-by applies to --format csv only")
    engine = make_engine(settings.database_url)
    try:
        pieces = chargeback_csv(engine, month, groups) if fmt == "csv" else focus_csv(engine, month)
        try:
            first = next(pieces)
        except ValueError as exc:
            raise UsageError(f"--group-by: {exc}") from None
        if out is None or out == "-":
            sys.stdout.write(first)
            for piece in pieces:
                sys.stdout.write(piece)
        else:
            tmp = f"{out}.part"
            with open(tmp, "w", encoding="utf-8", newline="") as f:
                f.write(first)
                for piece in pieces:
                    f.write(piece)
            os.replace(tmp, out)
            print(f"{PROG}: wrote {out}", file=sys.stderr)
    finally:
        engine.dispose()
    return 0


def _close(settings: Settings, month: str, actor: str, force: bool = False) -> int:
    from costsvc.close import MonthError, MonthIncomplete, close_month
    from costsvc.db.engine import make_engine

    engine = make_engine(settings.database_url)
    try:
        closed = close_month(engine, month, actor, datetime.now(UTC), force)
    except MonthIncomplete as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 3
    except MonthError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:
        raise UsageError(f"--month: {exc}") from None
    finally:
        engine.dispose()
    print(
        f"{PROG}: closed {closed.month}; chargeback.csv sha256 {closed.csv_sha256}, "
        f"focus.csv sha256 {closed.focus_sha256}"
    )
    return 0


def _cost_model_command(settings: Settings, action: str, file: str | None, actor: str) -> int:
    """``import FILE``: validate it and put it in force in the database (audited); ``show``:
    the cost model in force, where it lives, as YAML."""
    import yaml

    from costsvc.costmodel import CostModelError, load
    from costsvc.db.engine import make_engine
    from costsvc.model_source import in_force, replace

    if action == "import" and not file:
        raise UsageError("cost-model import needs the FILE to import")
    engine = make_engine(settings.database_url)
    try:
        if action == "import":
            assert file is not None
            try:
                document = load(file).document()  # YAML errors name the line, fields the field
                model = replace(settings.cost_model, engine, document, actor, "cli", file)
            except CostModelError as exc:
                raise UsageError(str(exc)) from None
            print(f"{PROG}: cost model {model.sha256()[:12]} in force (kept in the database)")
            return 0
        found = in_force(settings.cost_model, engine)
        where = f"file {found.path}" if found.path else "the database"
        print(f"# the cost model in force, from {where}, sha256 {found.model.sha256()}")
        sys.stdout.write(yaml.safe_dump(found.model.document(), sort_keys=False))
        return 0
    except CostModelError as exc:
        raise UsageError(str(exc)) from None
    finally:
        engine.dispose()


def _token(settings: Settings, args: argparse.Namespace) -> int:
    from costsvc.db.engine import make_engine
    from costsvc.db.tokens import (
        LastAdmin,
        create_token,
        digest,
        principal_of,
        revoke_token,
        tokens,
    )

    if args.action in ("create", "revoke") and not args.name:
        raise UsageError(f"token {args.action} needs --name")
    engine = make_engine(settings.database_url)
    try:
        if args.action == "create" and args.from_file:
            return _token_from_file(engine, args)
        if args.action == "create":
            out = Path(args.output) if args.output else None
            if out is not None and out.is_file():
                held = out.read_text().strip()
                if held and principal_of(engine, digest(held)) is not None:
                    print(f"{PROG}: {out} holds a live token", file=sys.stderr)
                    return 0
            try:
                token = create_token(engine, args.name, args.role, args.team, "cli")
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            if out is None:
                print(token)  # shown once: only its hash is stored
            else:
                out.write_text(token + "\n")
                out.chmod(0o644)  # the scraper runs as another user (docs/security.md)
        elif args.action == "revoke":
            try:
                revoked = revoke_token(engine, args.name, "cli")
            except LastAdmin as exc:
                raise UsageError(str(exc)) from None
            if not revoked:
                raise UsageError(f"no live token named {args.name!r}")
        else:
            for t in tokens(engine):
                state = "revoked" if t.revoked_at else "live"
                print(f"{t.name}\t{t.role}\t{t.team or '-'}\t{state}")
    finally:
        engine.dispose()
    return 0


def _token_from_file(engine: Engine, args: argparse.Namespace) -> int:
    """``token create --from-file``: the token of a file (an admin token from a Kubernetes
    Secret, deploy/helm), registered once; its hash only is stored."""
    from costsvc.db.tokens import register_given

    if args.output or args.team:
        raise UsageError("--from-file takes neither --output nor --team")
    try:
        token = Path(args.from_file).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--from-file {args.from_file}: {exc}") from None
    try:
        added = register_given(engine, args.name, args.role, token, "cli")
    except ValueError as exc:
        raise UsageError(f"--from-file {args.from_file}: {exc}") from None
    state = "registered" if added else "is a live token already"
    print(f"{PROG}: the token of {args.from_file} {state} ({args.name})", file=sys.stderr)
    return 0


def _label_watcher(settings: Settings) -> Any:
    """Pod and namespace labels from the Kubernetes API into the history tables, when an API
    is configured (or we run in a pod); otherwise kube-state-metrics' series are used."""
    import os

    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if not (settings.kube_api_url or settings.kubeconfig or in_cluster):
        return None
    from costsvc.db.engine import make_engine
    from costsvc.db.labels import LabelHistory
    from costsvc.k8slabels import LabelWatcher
    from kube.client import core_api

    kubeconfig = str(settings.kubeconfig) if settings.kubeconfig else None
    try:
        api = core_api(kubeconfig, settings.kube_api_url)
    except Exception as exc:
        raise UsageError(f"COSTSVC_KUBECONFIG: {exc}") from None
    from costsvc.db.advice import OwnerHistory, QuotaStore
    from costsvc.k8sowners import OwnerWatcher
    from kube.watch import SharedWatches

    engine = make_engine(settings.database_url)
    history = LabelHistory(engine, settings.cluster)
    # one list + watch of pods for both histories (kube/watch.py SharedWatches), not two
    watcher = SharedWatches(
        LabelWatcher(history, api, lambda kind: None),
        OwnerWatcher(
            OwnerHistory(engine, settings.cluster),
            QuotaStore(engine, settings.cluster),
            api,
            lambda kind: None,
        ),
        name="costsvc",
    )
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
            from costsvc.db.migrate import downgrade, upgrade

            if args.action == "upgrade":
                upgrade(settings.database_url, args.revision or "head")
            else:
                downgrade(settings.database_url, args.revision or "base")
            return 0
        if args.command == "ingest":
            if args.status:
                return _ingest_status(settings)
            return _ingest(settings, args.start, args.end, paused=True)
        if args.command == "serve":
            if not 1 <= args.workers <= 64:
                raise UsageError("--workers: between 1 and 64")
            return _serve(settings, args.delay, not args.no_ingest, args.workers)
        if args.command == "report":
            return _report(settings, args.month, args.format, args.output, args.group_by)
        if args.command == "close":
            return _close(settings, args.month, args.actor, args.force)
        if args.command == "cost-model":
            return _cost_model_command(settings, args.action, args.file, args.actor)
        if args.command == "recommend":
            return _recommend(settings, args)
        if args.command == "opencost-proxy":
            from costsvc.opencost_proxy import ProxyError, run

            try:
                return run(args)
            except ProxyError as exc:
                raise UsageError(str(exc)) from None
        return _token(settings, args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        line = _database_failure(settings, exc)
        if line is None:
            raise
        print(f"{PROG}: error: {line}", file=sys.stderr)
        return 1


def _database_failure(settings: Settings | None, exc: BaseException) -> str | None:
    """One line for an error of the database itself or of a statement in it (naming the
    database, never its password), or None for any other error."""
    from sqlalchemy.exc import DBAPIError

    from costsvc.db.engine import DatabaseTrouble, make_engine, trouble

    if isinstance(exc, DatabaseTrouble):
        return str(exc)
    if not isinstance(exc, DBAPIError) or settings is None:
        return None
    engine = make_engine(settings.database_url)
    try:
        found = trouble(engine, exc)
        where = engine.url.render_as_string(hide_password=True)
    finally:
        engine.dispose()
    if found is not None:
        return str(found)
    lines = str(exc.orig).strip().splitlines() or [type(exc.orig).__name__]
    return f"the database {where}: {lines[0][:300]}"


if __name__ == "__main__":
    raise SystemExit(main())
