"""``make demo``: the whole product on one machine, no GPU and no external server.

1. **Live from the start.** Five simulated GPU nodes (examples/fleet-h100x8.yaml: whole
   H100s; fleet-shared.yaml: MIG, time-sliced and whole GPUs, several teams and an unlabelled
   pod; fleet-mixed.yaml: A100/L4/T4; fleet-dra.yaml: GPUs held through DRA claims, one
   shared by three pods; fleet-hami.yaml: HAMi fractions and memory-profile vGPUs) run the
   real exporter — fake NVML, real kubelet pod-resources gRPC server, real /proc
   attribution — one process each, with a stand-in for kube-state-metrics (pod and
   namespace labels, GPU ResourceQuotas: demo/cluster.py) and the token counters of the DRA
   node's serving pods (simulated vLLM and SGLang: demo/vllm.py, the inference deployment),
   and Prometheus scrapes them.
2. **History, honestly made, up to that moment.** The same exporters, built the same way
   (demo/history.py), are stepped on a simulated clock over the last ``--hours`` complete
   hours and this one so far, until the moment Prometheus started scraping: every
   collection's exposition is kept with its timestamp and target labels (what Prometheus
   would have scraped), turned into TSDB blocks by ``promtool tsdb create-blocks-from
   openmetrics``, and Prometheus is started again over them — so recorded history and live
   scrapes are one series with no gap. The demo's incidents (an XID, a GPU lost, throttled
   clocks) fall in the last three hours. The previous calendar month (UTC) is recorded too,
   whole, from the same nodes scraped once an hour (demo/month.py), so that the finance page
   has a month to close.
3. **Chargeback through the production path.** The cost service ingests each complete hour
   from that Prometheus into SQLite (examples/cost-model.yaml), computes the rightsizing
   recommendations and quota use over them (docs/rightsizing.md), and its API starts; two
   budgets are set through it (one exceeded, one near its limit).
4. **Left running:** exporters, kube-state-metrics, Prometheus (with the alert rules,
   scraping the cost service's /metrics too) and the cost service, which ingests the previous
   month's hours first, in the background (then says it is ready to close, and where), and
   each new hour a minute after it ends. It prints the cost table of the simulated hours (read from
   the API; each row adds up: cost = used + idle waste + unmeasured + unallocated idle), the
   budgets, quotas and top savings, an admin token and the links to look at. Ctrl-C stops
   everything.

Ports (flags): the API 8080, Prometheus 9090, the exporters from 9400 (one per node), the
served models' metrics the port after the exporters' (9405), kube-state-metrics 9408. A busy
port is reported and waited for (``--port-wait`` seconds), then the demo exits naming it — it
never moves to another port in silence.

Needs the ``prometheus`` and ``promtool`` binaries (Debian's ``prometheus`` package).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType

import httpx

from demo import cluster, report, vllm
from demo.history import (
    NODES,
    ROOT,
    NodeHistories,
    record,
    record_targets,
    spec_with_epoch,
    stamps,
    target_labels,
)
from demo.month import STEP as MONTH_STEP
from demo.month import PastMonth
from demo.stack import PortBusy, Prometheus, Stack, claim_port, wait_http
from exporter.cli import main as exporter_main
from exporter.simulate.spec import load as load_spec

COSTSVC_SCRAPE = 15  # seconds between Prometheus' scrapes of the cost service's /metrics


def _say(text: str) -> None:
    print(text, flush=True)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def _prometheus_config(
    path: Path, step: int, targets: dict[str, list[int]], api_port: int, token: Path, more: str
) -> None:
    """Every target of ``targets`` (job -> ports) every ``step`` s, as the history has them,
    and the jobs of ``more`` (YAML ``scrape_configs`` entries); the cost service's /metrics
    (with a metrics-role token: docs/security.md) more often."""
    jobs = "".join(
        f"  - job_name: {job}\n    static_configs:\n      - targets: ["
        + ", ".join(f'"127.0.0.1:{p}"' for p in ports)
        + "]\n"
        for job, ports in targets.items()
    )
    path.write_text(
        f"global: {{scrape_interval: {step}s, evaluation_interval: {step}s}}\n"
        f"scrape_configs:\n{jobs}{more}"
        f"  - job_name: gpu-costsvc\n    scrape_interval: {COSTSVC_SCRAPE}s\n"
        f'    static_configs:\n      - targets: ["127.0.0.1:{api_port}"]\n'
        f"    authorization: {{credentials_file: {token}}}\n"
        f"rule_files: [{ROOT / 'alerts' / 'gpu-finops.rules.yml'}]\n"
    )


def _age() -> float:
    """Seconds since this process started (Linux: /proc), imports included."""
    ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")


def _first_answering(urls: list[str]) -> str:
    """The first of ``urls`` that answers 200 (Debian's Prometheus 2.42 has only its classic
    UI, under /classic/; upstream builds have the new one at /)."""
    for url in urls:
        try:
            if httpx.get(url, timeout=10).status_code == 200:
                return url
        except httpx.HTTPError:
            pass
    return urls[-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make demo", description=__doc__.split("\n")[0])
    ap.add_argument(
        "--hours", type=int, default=3, help="complete hours of history before this one (3)"
    )
    ap.add_argument(
        "--step", type=int, default=60, help="seconds between scrapes, history and live (60)"
    )
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
        "--exporter-port",
        type=int,
        default=9400,
        help=f"the first exporter's (9400; one per node, {len(NODES)} in all)",
    )
    ap.add_argument("--labels-port", type=int, default=9408, help="kube-state-metrics (9408)")
    ap.add_argument(
        "--vllm-port",
        type=int,
        default=None,
        help="the served models' vLLM/SGLang metrics (default: the port after the exporters')",
    )
    ap.add_argument(
        "--port-wait",
        type=float,
        default=60.0,
        help="seconds to wait for a busy port before exiting (default 60)",
    )
    args = ap.parse_args(argv)
    if args.vllm_port is None:
        args.vllm_port = args.exporter_port + len(NODES)
    if not 1 <= args.hours <= 48:
        ap.error("--hours: from 1 to 48")
    if not 5 <= args.step <= 120:
        ap.error("--step: from 5 to 120 seconds")

    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            _say(
                f"make demo: `{tool}` is missing: install Debian's `prometheus` package "
                "(sudo apt-get install prometheus)"
            )
            return 1
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gpu-finops-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    stack = Stack()
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        exporter_ports = [args.exporter_port + i for i in range(len(NODES))]
        wanted = [
            (args.api_port, "the cost-service API", "--api-port"),
            (args.prometheus_port, "Prometheus", "--prometheus-port"),
            *(
                (p, f"the exporter of {name}", "--exporter-port")
                for p, name in zip(exporter_ports, NODES, strict=True)
            ),
            (args.labels_port, "kube-state-metrics", "--labels-port"),
            (args.vllm_port, "the served models' metrics", "--vllm-port"),
        ]
        for port, what, flag in wanted:  # before the simulation, not after
            claim_port(port, what, args.port_wait, _say, flag)
        now = datetime.now(UTC)
        first = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=args.hours)
        specs, incidents = [], []
        for name in NODES:
            spec, happened = spec_with_epoch(name, first, workdir, now)
            specs.append(spec)
            incidents += happened
        # forked before this process starts any thread
        histories = NodeHistories(
            specs,
            [target_labels("gpu-exporter", p) for p in exporter_ports],
            workdir,
            first,
            args.step,
        )
        stack.stops.append(histories.stop)
        past = PastMonth(workdir, now, first, exporter_ports)  # forked now too; it starts now
        stack.stops.append(past.stop)
        _say(
            f"gpu-finops demo: {len(NODES)} simulated GPU nodes, live from {now:%H:%M:%S} UTC "
            f"with their history from {first:%Y-%m-%d %H:%M}, a scrape every {args.step} s ..."
        )

        def port(number: int, what: str, flag: str) -> int:  # still free? (no waiting now)
            return claim_port(number, what, 0, _say, flag)

        for i, name in enumerate(NODES):
            p = port(exporter_ports[i], f"the exporter of {name}", "--exporter-port")
            # `gpu-exporter --simulate SPEC --web.listen-address ...`, forked: no interpreter
            # to start and import it all again, five times, while the history is made
            argv = ["--simulate", str(specs[i]), "--web.listen-address", f"127.0.0.1:{p}"]
            stack.fork(exporter_main, argv, workdir / f"exporter-{i}.log")
        labels_port = port(args.labels_port, "kube-state-metrics", "--labels-port")
        ksm = cluster.KubeStateMetrics(specs, first, labels_port)
        stack.stops.append(ksm.stop)
        vllm_port = port(args.vllm_port, "the served models' metrics", "--vllm-port")
        served = vllm.ServedMetrics(specs, first, vllm_port)
        stack.stops.append(served.stop)
        api_port = port(args.api_port, "the cost-service API", "--api-port")
        prom_port = port(args.prometheus_port, "Prometheus", "--prometheus-port")
        # every target answers before Prometheus' first scrape (else: a gap at the handover)
        targets = {"gpu-exporter": exporter_ports, "kube-state-metrics": [labels_port]}
        for ports in targets.values():
            for p in ports:
                wait_http(f"http://127.0.0.1:{p}/metrics", 60)
        token_file = workdir / "costsvc-token"  # written once the database exists
        token_file.write_text("")
        config = workdir / "prometheus.yml"
        for pod in vllm.SERVED:
            wait_http(f"http://127.0.0.1:{vllm_port}{vllm.path(pod)}", 60)
        more = vllm.scrape_config(vllm_port)
        _prometheus_config(config, args.step, targets, api_port, token_file, more)
        data = workdir / "prometheus"
        prometheus = Prometheus(stack, config, data, prom_port, workdir / "prometheus.log")
        handover = datetime.now(UTC)  # live scrapes from here on, history until here
        prometheus.start()
        histories.record(handover)
        # the cost service's modules load while the nodes' processes make their history
        from demo.costs import cost_model, serve_costs

        fleets = [load_spec(p) for p in specs]
        t0 = first.timestamp()
        ksm_blocks, ksm_samples = record(
            workdir / "kube-state-metrics",
            stamps(first, handover, args.step),
            target_labels("kube-state-metrics", labels_port),
            lambda stamp: cluster.scrape(fleets, stamp - t0),
        )
        served_history = record_targets(
            workdir / "vllm",
            stamps(first, handover, args.step),
            lambda stamp: vllm.scrapes(fleets, stamp - t0, vllm_port),
        )
        made = [*histories.results(), (ksm_blocks, ksm_samples), served_history]
        month = past.results(labels_port, vllm_port)
        _say(
            f"  {sum(n for _, n in made):,} samples of history until {handover:%H:%M:%S}, and "
            f"{month.samples:,} of {month.month} (a scrape every {MONTH_STEP // 60} min); "
            "loading them into Prometheus ..."
        )
        prometheus.ready()
        prometheus.stop()
        for folder in [*(f for f, _ in made), *month.folders]:
            for block in folder.iterdir():
                block.rename(data / block.name)
        prometheus.start()
        prometheus.ready()

        model_file, moved = cost_model(workdir, month.start)
        c = serve_costs(
            stack,
            workdir,
            prometheus.url,
            first,
            handover,
            args.step,
            api_port,
            stopping,
            month,
            model_file,
        )
        token, api_url, rows, hours, advised_until = c.token, c.api_url, c.rows, c.hours, c.until
        prom_url = prometheus.url
        took = _age()
        graph = _first_answering([f"{prom_url}/graph", f"{prom_url}/classic/graph"])
        alerts = _first_answering([f"{prom_url}/alerts", f"{prom_url}/classic/alerts"])
        lost = report.unavailable(rows)
        currency = rows[0]["currency"] if rows else "USD"
        _say(
            f"\nGPU cost per team, {report.hours_text(hours[0], advised_until)}, "
            f"from {api_url}/v1/costs:\n"
            f"{report.cost_table(rows, currency)}\n"
            "  (idle waste: held but idle; unmeasured: held, with no utilisation series; "
            "unalloc. idle: nobody held it"
            + (f", {lost} of it on lost GPUs)" if lost else ")")
            + "\n\n"
            f"Budgets this month ({api_url}/v1/budgets):\n{report.budget_lines(c.budgets)}\n\n"
            f"GPU quotas ({api_url}/v1/quotas):\n{report.quota_lines(c.quotas)}\n\n"
            f"Cost per 1M tokens by served model, {report.hours_text(hours[0], advised_until)} "
            f"({api_url}/v1/inference; allocation basis, then usage basis):\n"
            f"{report.served_lines(c.served)}\n\n"
            f"Top {len(c.top)} GPU savings (rightsizing over "
            f"{report.hours_text(hours[0], advised_until)}, {api_url}/v1/recommendations):\n"
            + (_indent(c.advice) if c.top else "  none")
            + "\n\nIncidents in the last three hours (UTC):\n"
            + "\n".join(f"  {at:%H:%M:%S}  {what}" for at, what in sorted(incidents))
            + "\n\n"
            f"Last month, {month.month} ({month.hours} hours), to close on the finance page: "
            f"{api_url}/ui/finance/close?month={month.month}\n"
            "  made as the hours above, only coarser: the same simulated nodes (no incidents), "
            f"scraped by Prometheus every {MONTH_STEP // 60} min, each exporter\n"
            "  collecting as often (the cost service reads each hour from the exporters' "
            f"integrals): {month.samples:,} samples. The cost service ingests its hours\n"
            "  now, in the background (about a minute), and says here when the month is ready "
            "to close"
            + (f".\n  Cost model: examples/cost-model.yaml, {moved}" if moved else "")
            + ".\n\n"
            f"ready in {took:.0f} s. Look at:\n"
            f"  pages:       {api_url}/  (sign in with the admin token below)\n"
            f"               {api_url}/ui/explore  (any window, grouping, filter, idle choice)\n"
            f"               {api_url}/ui/fleet  (money by model and node, lost GPUs and "
            "their XIDs, the alerts firing now)\n"
            f"  cost API:    {api_url}/docs\n"
            f"  Prometheus:  {graph}   (alerts: {alerts})\n"
            f"  exporters:   "
            + "  ".join(f"http://127.0.0.1:{p}/metrics" for p in exporter_ports)
            + f"\n  kube-state-metrics: http://127.0.0.1:{labels_port}/metrics\n"
            f"  served models: http://127.0.0.1:{vllm_port}"
            f"{vllm.path(vllm.SERVED[0])}  (vLLM; tokens per model: /v1/inference)\n"
            f"  admin token: {token}\n"
            f"  try:         curl -s -H 'Authorization: Bearer {token}' "
            f"'{api_url}/v1/costs?window=today&group_by=team,project'\n"
            f"               curl -s -H 'Authorization: Bearer {token}' "
            f"'{api_url}/v1/reports/chargeback.csv?month={hours[-1]:%Y-%m}'\n"
            f"               curl -s -H 'Authorization: Bearer {token}' "
            f"'{api_url}/v1/inference?window=today&group_by=model'\n"
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
