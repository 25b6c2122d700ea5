"""The cost service's part of the demo, on the history in Prometheus: each complete hour
ingested into SQLite (examples/cost-model.yaml), rightsizing and quota use over them, an admin
token and Prometheus' metrics token, the API, each new hour ingested a minute after it ends
(the path ``gpu-costsvc serve`` takes every hour), two budgets set through the API, and what
the demo prints read back from it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import uvicorn
from sqlalchemy import Engine

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
from costsvc.rules.cost_model import CostModel, load
from demo import report
from demo.history import ROOT
from demo.stack import Stack, wait_http

CLUSTER = "demo"
COST_MODEL = ROOT / "examples" / "cost-model.yaml"
SETTLE = timedelta(minutes=1)  # an hour is ingested once it is this long over (last scrapes)
CHECK_EVERY = 30.0  # seconds between looks for a new hour to ingest


def _say(text: str) -> None:
    print(text, flush=True)


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


def _ingest_live(
    engine: Engine, reader: PrometheusReader, model: CostModel, stopping: threading.Event
) -> None:
    """Each new hour (and any failed one due for a retry), once it is over, while the demo
    runs: the path ``gpu-costsvc serve`` takes every hour."""
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
) -> Costs:
    db_url = f"sqlite:///{workdir / 'gpu-costsvc.db'}"
    upgrade(db_url)
    engine = make_engine(db_url)
    stack.stops.append(engine.dispose)
    model = load(COST_MODEL)
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
    live = threading.Thread(
        target=_ingest_live, args=(engine, reader, model, stopping), name="ingest", daemon=True
    )
    live.start()
    stack.stops.append(lambda: live.join(30))

    settings = Settings(
        database_url=db_url,
        prometheus_url=prom_url,
        cluster=CLUSTER,
        cost_model=COST_MODEL,
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
    api_url = f"http://127.0.0.1:{api_port}"
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
