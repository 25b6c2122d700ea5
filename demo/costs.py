"""The cost service's part of the demo, on the history in Prometheus: each complete hour
ingested into SQLite (examples/cost-model.yaml), rightsizing and quota use over them, an admin
token and Prometheus' metrics token, the API, each new hour ingested a minute after it ends
(the path ``gpu-costsvc serve`` takes every hour), two budgets set through the API, and what
the demo prints read back from it."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import uvicorn
from sqlalchemy import Engine, event

from costsvc.advice.repository import recommendations
from costsvc.advice.rightsizing import ACTIONABLE, Rules
from costsvc.advice.run import Options
from costsvc.advice.run import run as advise
from costsvc.advice.run import table as advice_table
from costsvc.api.app import create_app
from costsvc.api.server import config as server_config
from costsvc.auth.tokens import create_token
from costsvc.db.engine import make_engine
from costsvc.db.migrate import upgrade
from costsvc.ingest.prom import PrometheusReader
from costsvc.ingest.run import complete_hours, ingest, pending_hours
from costsvc.kit.settings import Settings
from costsvc.months.billing import month_state
from costsvc.months.close import ingested_hours
from costsvc.rules.cost_model import CostModel, load
from demo import report
from demo.history import ROOT
from demo.month import Made
from demo.stack import Stack, wait_http

CLUSTER = "demo"
COST_MODEL = ROOT / "examples" / "cost-model.yaml"
SETTLE = timedelta(minutes=1)  # an hour is ingested once it is this long over (last scrapes)
CHECK_EVERY = 30.0  # seconds between looks for a new hour to ingest


def _say(text: str) -> None:
    print(text, flush=True)


def cost_model(workdir: Path, since: datetime) -> tuple[Path, str]:
    """The demo's cost model: examples/cost-model.yaml, with its first prices' ``effective_from``
    moved back to ``since`` (the start of the demo's history) where they start later — the
    example's prices start on a fixed date, the demo's history wherever the clock is — and
    what was moved ("" where nothing was)."""
    text = COST_MODEL.read_text()
    first = min(v.effective_from for v in load(COST_MODEL).versions)
    if first <= since:
        return COST_MODEL, ""
    out = workdir / "cost-model.yaml"
    was = f"{first:%Y-%m-%dT%H:%M:%SZ}"
    text, n = re.subn(
        rf"(effective_from: ){re.escape(was)}", rf"\g<1>{since:%Y-%m-%dT%H:%M:%SZ}", text, count=1
    )
    assert n == 1, f"{COST_MODEL}: no effective_from: {was}"
    out.write_text(text)
    load(out)  # still valid
    return out, f"its first prices from {since:%Y-%m-%d %H:%M} UTC instead of {first:%Y-%m-%d}"


@dataclass(frozen=True, slots=True)
class Costs:
    api_url: str
    token: str  # an admin token
    hours: list[datetime]  # the complete hours ingested
    until: datetime  # the end of the last
    rows: list[dict[str, Any]]  # /v1/costs of those hours by team
    budgets: list[dict[str, Any]]  # their /status
    quotas: list[dict[str, Any]]  # /v1/quotas rows
    served: list[dict[str, Any]]  # /v1/inference of those hours by model
    top: list[Any]  # the top three savings
    advice: str  # as a table


def _ingest_month(
    engine: Engine,
    reader: PrometheusReader,
    model: CostModel,
    stopping: threading.Event,
    month: Made,
    close_url: str,
) -> None:
    """Every hour of the past month, as ``gpu-costsvc ingest --start … --end …`` backfills
    them (a day per run: Ctrl-C is not kept waiting), then what the finance page says of it."""
    started = time.monotonic()
    hours = complete_hours(month.start, month.end)
    failed: dict[datetime, str] = {}
    for day in range(0, len(hours), 24):
        if stopping.is_set():
            return
        failed.update(ingest(engine, reader, model, CLUSTER, hours[day : day + 24]).failed)
    took = time.monotonic() - started
    state = month_state(engine, month.month, datetime.now(UTC)).state
    said = "ready to close" if state == "closable" else f"{state}, not ready to close"
    ingested, of = ingested_hours(engine, month.month)  # the recent hours' part of it too
    _say(
        f"  cost service: ingested {month.month} ({len(hours)} hours in {took:.0f} s), "
        f"{ingested} of its {of} hours in all: {said}: {close_url}"
    )
    for hour, why in sorted(failed.items())[:3]:
        _say(f"  cost service: {hour:%Y-%m-%d %H:00} failed: {why}")


def _ingest_live(
    engine: Engine,
    reader: PrometheusReader,
    model: CostModel,
    stopping: threading.Event,
    month: Made,
    close_url: str,
) -> None:
    """The past month first (:func:`_ingest_month`); then each new hour (and any failed one
    due for a retry), once it is over, while the demo runs: the path ``gpu-costsvc serve``
    takes every hour."""
    _ingest_month(engine, reader, model, stopping, month, close_url)
    while not stopping.wait(CHECK_EVERY):
        hours = pending_hours(engine, CLUSTER, datetime.now(UTC) - SETTLE)
        if not hours:
            continue
        done = ingest(engine, reader, model, CLUSTER, hours)
        for hour in done.done:
            _say(f"  cost service: ingested {hour:%Y-%m-%d %H:00} (live)")
        for hour, why in done.failed.items():
            _say(f"  cost service: {hour:%Y-%m-%d %H:00} failed: {why} (it will be retried)")


def serve_costs(
    stack: Stack,
    workdir: Path,
    prom_url: str,
    first: datetime,
    handover: datetime,
    step: int,
    api_port: int,
    stopping: threading.Event,
    month: Made,
    model_file: Path,
) -> Costs:
    db_url = f"sqlite:///{workdir / 'gpu-costsvc.db'}"
    upgrade(db_url)
    engine = make_engine(db_url)
    # the demo's database is thrown away: its ingest commits without waiting for the disk
    # (SQLite's fsyncs were half of the past month's ingest); the API's engine is the product's
    event.listen(engine, "connect", lambda conn, _: conn.execute("PRAGMA synchronous=OFF"))
    stack.stops.append(engine.dispose)
    model = load(model_file)
    reader = PrometheusReader(prom_url)
    stack.stops.append(reader.close)
    hours = complete_hours(first, handover)
    for i, hour in enumerate(hours, 1):
        done = ingest(engine, reader, model, CLUSTER, [hour])
        if done.failed:
            raise RuntimeError(f"ingest {hour:%H:00}: {done.failed[hour]}")
        print(f"\r  cost service: ingested {i}/{len(hours)} hours", end="", flush=True)
    print(flush=True)
    # rightsizing and quotas over the simulated hours (the product's default: 7 days)
    advised_until = hours[-1] + timedelta(hours=1)
    advise(
        engine,
        reader,
        model,
        CLUSTER,
        advised_until,
        Options(
            window=advised_until - first,
            step_s=max(300, step),
            rules=Rules(min_hours=Decimal(len(hours)) / 2),
        ),
    )
    top = recommendations(engine, actions=ACTIONABLE, limit=3)
    token = create_token(engine, f"demo-admin-{int(time.time())}", "admin", None, "demo")
    scrape = f"demo-prometheus-{int(time.time())}"
    (workdir / "costsvc-token").write_text(
        create_token(engine, scrape, "metrics", None, "demo") + "\n"
    )
    api_url = f"http://127.0.0.1:{api_port}"
    close_url = f"{api_url}/ui/finance/close?month={month.month}"
    live = threading.Thread(
        target=_ingest_live,
        args=(engine, reader, model, stopping, month, close_url),
        name="ingest",
        daemon=True,
    )
    live.start()
    stack.stops.append(lambda: live.join(30))

    settings = Settings(
        database_url=db_url,
        prometheus_url=prom_url,
        cluster=CLUSTER,
        cost_model=model_file,
    )
    server = uvicorn.Server(  # as `gpu-costsvc serve` runs it: the same time-outs
        server_config(create_app(settings), settings, "127.0.0.1", api_port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()

    def stop_api() -> None:
        server.should_exit = True
        thread.join(10)

    stack.stops.append(stop_api)
    wait_http(f"{api_url}/healthz", 30)
    api = report.Api(api_url, token)
    stack.stops.append(api.close)
    budgets = report.set_budgets(api)
    span = {"start": f"{hours[0]:%Y-%m-%dT%H:00:00Z}", "end": f"{advised_until:%Y-%m-%dT%H:00:00Z}"}
    rows = api.get("/v1/costs", **span, group_by="team")["rows"]
    quotas = api.get("/v1/quotas")["rows"]
    served = api.get("/v1/inference", **span, group_by="model")["rows"]
    return Costs(
        api_url,
        token,
        hours,
        advised_until,
        rows,
        budgets,
        quotas,
        served,
        top,
        advice_table(top) if top else "",
    )
