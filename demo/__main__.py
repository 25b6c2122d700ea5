"""``make demo``: the whole product on one machine, no GPU and no external server.

1. **History, honestly made.** Five simulated GPU nodes (examples/fleet-h100x8.yaml: whole
   H100s; fleet-shared.yaml: MIG, time-sliced and whole GPUs, several teams and an unlabelled
   pod; fleet-mixed.yaml: A100/L4/T4; fleet-dra.yaml: GPUs held through DRA claims, one
   shared by three pods; fleet-hami.yaml: HAMi fractions and memory-profile vGPUs) run the
   real exporter — fake NVML, real kubelet pod-resources gRPC server, real /proc
   attribution — on a simulated clock stepped from the start of yesterday (UTC) until now.
   Every collection's exposition is kept with its timestamp (what Prometheus would have
   scraped), plus kube-state-metrics' ``kube_pod_labels`` for the pods, and loaded into a real
   Prometheus with ``promtool tsdb create-blocks-from openmetrics``.
2. **Chargeback through the production path.** The cost service ingests each complete hour
   of it — yesterday's 24 and today's so far — from that Prometheus into SQLite
   (examples/cost-model.yaml), then computes the GPU rightsizing recommendations over those
   hours (docs/rightsizing.md).
3. **Left running:** live exporters for the five nodes (going on where the history stops),
   ``kube_pod_labels`` for their pods, Prometheus scraping them, and the cost-service API with
   its /docs; the cost service ingests each new hour a minute after it ends. An admin token
   is printed with a per-team cost table read from the API and the top three rightsizing
   savings. Ctrl-C stops everything.

Ports (flags): the API 8080, Prometheus 9090, the exporters from 9400 (one per node),
``kube_pod_labels`` 9408. A busy port is reported and waited for (``--port-wait`` seconds),
then the demo exits naming it — it never moves to another port in silence.

Needs the ``prometheus`` and ``promtool`` binaries (Debian's ``prometheus`` package).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import uvicorn
from sqlalchemy import Engine

from costsvc.advise import Options
from costsvc.advise import run as advise
from costsvc.advise import table as advice_table
from costsvc.api.app import create_app
from costsvc.api.server import config as server_config
from costsvc.costmodel import CostModel, load
from costsvc.db.advice import recommendations
from costsvc.db.engine import make_engine
from costsvc.db.migrate import upgrade
from costsvc.db.tokens import create_token
from costsvc.ingest.prom import PrometheusReader
from costsvc.ingest.run import complete_hours, ingest, pending_hours
from costsvc.rightsizing import ACTIONABLE, Rules
from costsvc.settings import Settings
from demo.history import NODES, ROOT, PodLabels, make_history, spec_with_epoch
from demo.stack import PortBusy, Stack, claim_port, wait_http

CLUSTER = "demo"
SETTLE = timedelta(minutes=1)  # an hour is ingested once it is this long over (last scrapes)
CHECK_EVERY = 30.0  # seconds between looks for a new hour to ingest


def _say(text: str) -> None:
    print(text, flush=True)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def _table(rows: list[dict[str, Any]], currency: str) -> str:
    lines = [
        f"  {'team':<18} {'cost':>12} {'allocated':>12} {'idle waste':>12} "
        f"{'GPU-hours':>10} {'efficiency':>10}"
    ]
    for r in sorted(rows, key=lambda r: -float(r["total_cost"])):
        eff = f"{float(r['efficiency']):.0%}" if r["efficiency"] is not None else "-"
        lines.append(
            f"  {r['group']['team'][:18]:<18} {r['total_cost']:>12} "
            f"{r['allocated_cost']:>12} {r['allocated_idle_cost']:>12} "
            f"{float(r['gpu_hours']):>10.2f} {eff:>10}"
        )
    total = sum(float(r["total_cost"]) for r in rows)
    lines.append(f"  {'total (' + currency + ')':<18} {total:>12.6f}")
    return "\n".join(lines)


def _ingest_live(
    engine: Engine, reader: PrometheusReader, model: CostModel, stopping: threading.Event
) -> None:
    """Each new hour (and any failed one due for a retry), once it is over, while the demo
    runs: the path ``gpu-costsvc serve`` takes every hour."""
    while not stopping.wait(CHECK_EVERY):
        hours = pending_hours(engine, CLUSTER, datetime.now(UTC) - SETTLE)
        if not hours:
            continue
        report = ingest(engine, reader, model, CLUSTER, hours)
        for hour in report.done:
            _say(f"  cost service: ingested {hour:%Y-%m-%d %H:00} (live)")
        for hour, why in report.failed.items():
            _say(f"  cost service: {hour:%Y-%m-%d %H:00} failed: {why} (it will be retried)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make demo", description=__doc__.split("\n")[0])
    ap.add_argument("--step", type=int, default=60, help="seconds between simulated scrapes")
    ap.add_argument(
        "--duration",
        type=float,
        default=None,
        help="stop after this many seconds (default: run until Ctrl-C)",
    )
    ap.add_argument("--workdir", type=Path, default=None, help="keep the files here")
    ap.add_argument("--api-port", type=int, default=8080, help="the cost-service API (8080)")
    ap.add_argument("--prometheus-port", type=int, default=9090, help="Prometheus (9090)")
    ap.add_argument(
        "--exporter-port", type=int, default=9400, help="the first exporter's (9400; then +1, +2)"
    )
    ap.add_argument("--labels-port", type=int, default=9408, help="kube_pod_labels (9408)")
    ap.add_argument(
        "--port-wait",
        type=float,
        default=60.0,
        help="seconds to wait for a busy port before exiting (default 60)",
    )
    args = ap.parse_args(argv)

    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            _say(
                f"make demo: `{tool}` is missing: install Debian's `prometheus` package "
                "(sudo apt-get install prometheus)"
            )
            return 1
    started = time.monotonic()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gpu-finops-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    stack = Stack()
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        wanted = [
            (args.api_port, "the cost-service API", "--api-port"),
            (args.prometheus_port, "Prometheus", "--prometheus-port"),
            *(
                (args.exporter_port + i, f"the exporter of {name}", "--exporter-port")
                for i, name in enumerate(NODES)
            ),
            (args.labels_port, "kube_pod_labels", "--labels-port"),
        ]
        for port, what, flag in wanted:  # before the minutes of simulation, not after
            claim_port(port, what, args.port_wait, _say, flag)
        now = datetime.now(UTC)
        today = now.replace(hour=0, minute=0, second=0, microsecond=0)
        day = today - timedelta(days=1)
        _say(
            f"gpu-finops demo: simulating {len(NODES)} GPU nodes from {day:%Y-%m-%d} 00:00 "
            f"until now ({now:%H:%M} UTC), a scrape every {args.step} s ..."
        )
        history, samples = make_history(workdir, day, args.step, now)
        _say(f"  {samples:,} samples of exporter output; loading them into Prometheus ...")
        data = workdir / "prometheus"
        subprocess.run(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(history), str(data)],
            check=True,
            capture_output=True,
        )
        history.unlink()

        def port(number: int, what: str, flag: str) -> int:  # still free? (no waiting now)
            return claim_port(number, what, 0, _say, flag)

        exporters, specs = [], []
        for i, name in enumerate(NODES):
            specs.append(spec_with_epoch(name, day, workdir))  # live, where the history ends
            p = port(args.exporter_port + i, f"the exporter of {name}", "--exporter-port")
            stack.process(
                [
                    "gpu-exporter",
                    "--simulate",
                    str(specs[-1]),
                    "--web.listen-address",
                    f"127.0.0.1:{p}",
                ],
                workdir / f"exporter-{i}.log",
            )
            exporters.append(p)
        labels_port = port(args.labels_port, "kube_pod_labels", "--labels-port")
        stack.stops.append(PodLabels(specs, day, labels_port).stop)
        api_port = port(args.api_port, "the cost-service API", "--api-port")
        prom_port = port(args.prometheus_port, "Prometheus", "--prometheus-port")
        config = workdir / "prometheus.yml"
        (workdir / "costsvc-token").write_text("")  # the token comes once the database exists
        config.write_text(
            "global: {scrape_interval: 15s}\nscrape_configs:\n"
            "  - job_name: gpu-exporter\n    static_configs:\n      - targets: ["
            + ", ".join(f'"127.0.0.1:{p}"' for p in exporters)
            + "]\n"
            "  - job_name: kube-state-metrics\n    static_configs:\n"
            f'      - targets: ["127.0.0.1:{labels_port}"]\n'
            "  - job_name: gpu-costsvc\n    static_configs:\n"
            f'      - targets: ["127.0.0.1:{api_port}"]\n'
            # /metrics needs a metrics-role token (docs/security.md), written below
            f"    authorization: {{credentials_file: {workdir / 'costsvc-token'}}}\n"
            f"rule_files: [{ROOT / 'alerts' / 'gpu-finops.rules.yml'}]\n"
        )
        prom = stack.process(
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
                "--storage.tsdb.retention.time=10y",
            ],
            workdir / "prometheus.log",
        )
        prom_url = f"http://127.0.0.1:{prom_port}"
        wait_http(f"{prom_url}/-/ready", 60, prom)

        db_url = f"sqlite:///{workdir / 'gpu-costsvc.db'}"
        upgrade(db_url)
        engine = make_engine(db_url)
        stack.stops.append(engine.dispose)
        model = load(ROOT / "examples" / "cost-model.yaml")
        reader = PrometheusReader(prom_url)
        stack.stops.append(reader.close)
        hours = complete_hours(day, now)
        for i, hour in enumerate(hours, 1):
            report = ingest(engine, reader, model, CLUSTER, [hour])
            if report.failed:
                raise RuntimeError(f"ingest {hour:%H:00}: {report.failed[hour]}")
            print(f"\r  cost service: ingested {i}/{len(hours)} hours", end="", flush=True)
        print(flush=True)
        # rightsizing over the simulated hours (the product's default: 7 days, 24 hours)
        advised_until = hours[-1] + timedelta(hours=1)
        advise(
            engine,
            reader,
            model,
            CLUSTER,
            advised_until,
            Options(
                window=advised_until - day,
                step_s=max(300, args.step),
                rules=Rules(min_hours=Decimal(6)),
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
            cost_model=ROOT / "examples" / "cost-model.yaml",
        )
        server = uvicorn.Server(  # as `gpu-costsvc serve` runs it: the same time-outs
            server_config(
                create_app(settings), settings, "127.0.0.1", api_port, log_level="warning"
            )
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()

        def stop_api() -> None:
            server.should_exit = True
            thread.join(10)

        stack.stops.append(stop_api)
        api = f"http://127.0.0.1:{api_port}"
        wait_http(f"{api}/healthz", 30)
        answer = httpx.get(
            f"{api}/v1/costs",
            params={"window": "yesterday", "group_by": "team"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        ).json()
        currency = answer["rows"][0]["currency"] if answer["rows"] else model.currency
        took = time.monotonic() - started
        _say(
            f"\nGPU cost per team on {day:%Y-%m-%d} (from {api}/v1/costs):\n"
            f"{_table(answer['rows'], currency)}\n\n"
            f"Top {len(top)} GPU savings (rightsizing over {day:%Y-%m-%d %H:00} to "
            f"{advised_until:%Y-%m-%d %H:00}, {api}/v1/recommendations):\n"
            + (_indent(advice_table(top)) if top else "  none")
            + "\n\n"
            f"ready in {took:.0f} s. Look at:\n"
            f"  exporters:   "
            + "  ".join(f"http://127.0.0.1:{p}/metrics" for p in exporters)
            + f"\n  Prometheus:  {prom_url}/graph   (alerts: {prom_url}/alerts)\n"
            f"  cost API:    {api}/docs\n"
            f"  admin token: {token}\n"
            f"  try:         curl -s -H 'Authorization: Bearer {token}' "
            f"'{api}/v1/costs?window=yesterday&group_by=team,project'\n"
            f"               curl -s -H 'Authorization: Bearer {token}' "
            f"'{api}/v1/reports/chargeback.csv?month={day:%Y-%m}'\n"
            f"  files:       {workdir}\n"
            "Ctrl-C stops everything."
        )
        stopping.wait(args.duration)
        return 0
    except PortBusy as exc:
        _say(f"make demo: {exc}")
        return 1
    finally:
        stopping.set()
        stack.close()
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        _say("gpu-finops demo: stopped")


if __name__ == "__main__":
    raise SystemExit(main())
