"""``make demo``: the whole product on one machine, no GPU and no external server.

1. **History, honestly made.** Three simulated GPU nodes (examples/fleet-h100x8.yaml: whole
   H100s; fleet-shared.yaml: MIG, time-sliced and whole GPUs, several teams and an unlabelled
   pod; fleet-mixed.yaml: A100/L4/T4) run the real exporter — fake NVML, real kubelet
   pod-resources gRPC server, real /proc attribution — on a simulated clock stepped through
   yesterday (UTC). Every collection's exposition is kept with its timestamp (what Prometheus
   would have scraped), plus kube-state-metrics' ``kube_pod_labels`` for the pods, and loaded
   into a real Prometheus with ``promtool tsdb create-blocks-from openmetrics``.
2. **Chargeback through the production path.** The cost service ingests each of those 24
   hours from that Prometheus into SQLite (examples/cost-model.yaml).
3. **Left running:** live exporters for the three nodes, Prometheus, and the cost-service API
   with its /docs; an admin token is printed with a per-team cost table read from the API.
   Ctrl-C stops everything.

Needs the ``prometheus`` and ``promtool`` binaries (Debian's ``prometheus`` package).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
NODES = ("fleet-h100x8.yaml", "fleet-shared.yaml", "fleet-mixed.yaml")
CLUSTER = "demo"


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _port(preferred: int) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _say(text: str) -> None:
    print(text, flush=True)


class FamilyFiles:
    """OpenMetrics wants each family's samples together: one temporary file per family,
    joined at the end, so a day of history never has to fit in memory."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir / "families"
        self.dir.mkdir()
        self.meta: dict[str, list[str]] = {}
        self.files: dict[str, IO[str]] = {}
        self.samples = 0

    def add(self, body: str, stamp: int, extra: str) -> None:
        family = ""
        for line in body.splitlines():
            if line.startswith("#"):
                parts = line.split(" ", 3)
                if len(parts) >= 3 and parts[1] in ("TYPE", "HELP", "UNIT"):
                    family = parts[2]
                    meta = self.meta.setdefault(family, [])
                    if len(meta) < 3 and line not in meta:
                        meta.append(line)
                continue
            if not line:
                continue
            name_end = line.find("{")
            space = line.find(" ")
            if name_end == -1 or space < name_end:  # no labels: add ours
                sample = f"{line[:space]}{{{extra}}}{line[space:]}"
            else:
                sample = f"{line[: name_end + 1]}{extra},{line[name_end + 1 :]}"
            f = self.files.get(family)
            if f is None:
                f = self.files[family] = (self.dir / f"{len(self.files)}.om").open("w")
            f.write(f"{sample} {stamp}\n")
            self.samples += 1

    def write(self, out: Path) -> None:
        with out.open("w") as dst:
            for family, f in self.files.items():
                f.close()
                dst.write("\n".join(self.meta.get(family, [])) + "\n")
                with open(f.name) as src:
                    shutil.copyfileobj(src, dst)
            dst.write("# EOF\n")


def _node(spec_path: Path, clock: Clock) -> tuple[Any, Any, Callable[[], None]]:
    """The exporter of one simulated node on ``clock`` (cli.run's simulate path)."""
    from exporter.catalogue import COLLECTORS, OFF_BY_DEFAULT
    from exporter.kubelet.assignments import PodResourcesAssignments
    from exporter.kubelet.client import PodResourcesClient
    from exporter.kubelet.devices import DEFAULT_RESOURCES
    from exporter.nvml import Nvml
    from exporter.proc_owner import ProcOwner
    from exporter.runtime import Exporter
    from exporter.selfmetrics import SelfMetrics
    from exporter.simulate.fake_nvml import FakeNvml
    from exporter.simulate.node import SimulatedNode
    from exporter.simulate.spec import load

    spec = load(spec_path)
    fake = FakeNvml(spec, now=clock)
    node = SimulatedNode(spec, fake)
    nvml = Nvml(fake)
    stats = SelfMetrics(nvml.bindings_version(), "simulate")
    assignments = PodResourcesAssignments(PodResourcesClient(node.socket_path, 5.0),
                                          stats.count_error, DEFAULT_RESOURCES)  # fmt: skip
    exporter = Exporter(nvml, spec.hostname, set(COLLECTORS) - OFF_BY_DEFAULT, 60.0,
                        mode="simulate", clock=clock, monotonic=clock, stats=stats,
                        assignments=assignments,
                        owner=ProcOwner(node.directory, node.proc_root, stats.count_error,
                                        monotonic=clock))  # fmt: skip
    return spec, exporter, node.stop


def make_history(workdir: Path, day: datetime, step: int) -> tuple[Path, int]:
    """A day of scrapes of the three nodes (and kube_pod_labels), as OpenMetrics."""
    from kube.labels import sanitize_label

    logging.getLogger("exporter").setLevel(logging.ERROR)  # simulated XIDs are not news here
    families = FamilyFiles(workdir)
    clock = Clock(day.timestamp())
    nodes = []
    for i, name in enumerate(NODES):
        spec, exporter, stop = _node(ROOT / "examples" / name, clock)
        nodes.append((spec, exporter, stop, f'job="gpu-exporter",instance="node-{i}:9400"'))
    try:
        end = day.timestamp() + 86400
        while clock.t < end:
            stamp = int(clock.t)
            for spec, exporter, _, extra in nodes:
                exporter.collect_once()
                families.add(exporter.exposition.body("openmetrics").decode(), stamp, extra)
                ksm = ["# TYPE kube_pod_labels gauge"]
                for pod in spec.pods:
                    if not pod.alive(clock.t - day.timestamp()):
                        continue
                    labels = "".join(f',{sanitize_label(k)}="{v}"'
                                     for k, v in sorted(pod.labels.items()))  # fmt: skip
                    ksm.append(f'kube_pod_labels{{namespace="{pod.namespace}",'
                               f'pod="{pod.name}"{labels}}} 1')  # fmt: skip
                families.add("\n".join(ksm), stamp, 'job="kube-state-metrics"')
            clock.t += step
    finally:
        for _, exporter, stop, _ in nodes:
            exporter.close()
            stop()
    out = workdir / "history.om"
    families.write(out)
    return out, families.samples


class Stack:
    """Processes and servers to stop on the way out, last started first."""

    def __init__(self) -> None:
        self.stops: list[Callable[[], None]] = []

    def process(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

        def stop() -> None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()

        self.stops.append(stop)
        return proc

    def close(self) -> None:
        for stop in reversed(self.stops):
            stop()


def _wait_http(url: str, seconds: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {seconds:g} s")


def _table(rows: list[dict[str, Any]], currency: str) -> str:
    lines = [f"  {'team':<18} {'cost':>12} {'allocated':>12} {'idle waste':>12} "
             f"{'GPU-hours':>10} {'efficiency':>10}"]  # fmt: skip
    for r in sorted(rows, key=lambda r: -float(r["total_cost"])):
        eff = f"{float(r['efficiency']):.0%}" if r["efficiency"] is not None else "-"
        lines.append(f"  {r['group']['team'][:18]:<18} {r['total_cost']:>12} "
                     f"{r['allocated_cost']:>12} {r['allocated_idle_cost']:>12} "
                     f"{float(r['gpu_hours']):>10.2f} {eff:>10}")  # fmt: skip
    total = sum(float(r["total_cost"]) for r in rows)
    lines.append(f"  {'total (' + currency + ')':<18} {total:>12.6f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make demo", description=__doc__.split("\n")[0])
    ap.add_argument("--step", type=int, default=60, help="seconds between simulated scrapes")
    ap.add_argument("--duration", type=float, default=None,
                    help="stop after this many seconds (default: run until Ctrl-C)")  # fmt: skip
    ap.add_argument("--workdir", type=Path, default=None, help="keep the files here")
    args = ap.parse_args(argv)

    import httpx
    import uvicorn
    from sqlalchemy import create_engine

    from costsvc.api.app import create_app
    from costsvc.costmodel import load
    from costsvc.db.migrate import upgrade
    from costsvc.db.tokens import create_token
    from costsvc.ingest.prom import PrometheusReader
    from costsvc.ingest.run import complete_hours, ingest
    from costsvc.settings import Settings

    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            _say(f"make demo: `{tool}` is missing: install Debian's `prometheus` package "
                 "(sudo apt-get install prometheus)")  # fmt: skip
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
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        day = today - timedelta(days=1)
        _say(f"gpu-finops demo: simulating {len(NODES)} GPU nodes through {day:%Y-%m-%d} "
             f"(UTC), a scrape every {args.step} s ...")  # fmt: skip
        history, samples = make_history(workdir, day, args.step)
        _say(f"  {samples:,} samples of exporter output; loading them into Prometheus ...")
        data = workdir / "prometheus"
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(history),
                        str(data)], check=True, capture_output=True)  # fmt: skip
        history.unlink()

        exporters = []
        for i, name in enumerate(NODES):
            port = _port(9400 + i)
            stack.process(["gpu-exporter", "--simulate", str(ROOT / "examples" / name),
                           "--web.listen-address", f"127.0.0.1:{port}"],
                          workdir / f"exporter-{i}.log")  # fmt: skip
            exporters.append(port)
        api_port, prom_port = _port(8080), _port(9090)
        config = workdir / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 15s}\nscrape_configs:\n"
            "  - job_name: gpu-exporter\n    static_configs:\n      - targets: ["
            + ", ".join(f'"127.0.0.1:{p}"' for p in exporters)
            + "]\n"
            "  - job_name: gpu-costsvc\n    static_configs:\n"
            f'      - targets: ["127.0.0.1:{api_port}"]\n'
            f"rule_files: [{ROOT / 'alerts' / 'gpu-finops.rules.yml'}]\n"
        )
        prom = stack.process(["prometheus", f"--config.file={config}",
                              f"--storage.tsdb.path={data}",
                              f"--web.listen-address=127.0.0.1:{prom_port}",
                              "--storage.tsdb.retention.time=10y"],
                             workdir / "prometheus.log")  # fmt: skip
        prom_url = f"http://127.0.0.1:{prom_port}"
        _wait_http(f"{prom_url}/-/ready", 60, prom)

        db_url = f"sqlite:///{workdir / 'gpu-costsvc.db'}"
        upgrade(db_url)
        engine = create_engine(db_url)
        model = load(ROOT / "examples" / "cost-model.yaml")
        reader = PrometheusReader(prom_url)
        hours = complete_hours(day, today)
        for i, hour in enumerate(hours, 1):
            report = ingest(engine, reader, model, CLUSTER, [hour])
            if report.failed:
                raise RuntimeError(f"ingest {hour:%H:00}: {report.failed[hour]}")
            print(f"\r  cost service: ingested {i}/{len(hours)} hours", end="", flush=True)
        print(flush=True)
        reader.close()
        token = create_token(engine, f"demo-admin-{int(time.time())}", "admin", None, "demo")
        engine.dispose()

        settings = Settings(database_url=db_url, prometheus_url=prom_url, cluster=CLUSTER,
                            cost_model=ROOT / "examples" / "cost-model.yaml")  # fmt: skip
        server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1",
                                               port=api_port, log_level="warning"))  # fmt: skip
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()

        def stop_api() -> None:
            server.should_exit = True
            thread.join(10)

        stack.stops.append(stop_api)
        api = f"http://127.0.0.1:{api_port}"
        _wait_http(f"{api}/healthz", 30)
        answer = httpx.get(
            f"{api}/v1/costs",
            params={"window": "yesterday", "group_by": "team"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        ).json()
        currency = answer["rows"][0]["currency"] if answer["rows"] else model.currency
        took = time.monotonic() - started
        _say(f"\nGPU cost per team on {day:%Y-%m-%d} (from {api}/v1/costs):\n"
             f"{_table(answer['rows'], currency)}\n\n"
             f"ready in {took:.0f} s. Look at:\n"
             f"  exporters:   " + "  ".join(f"http://127.0.0.1:{p}/metrics" for p in exporters)
             + f"\n  Prometheus:  {prom_url}/graph   (alerts: {prom_url}/alerts)\n"
             f"  cost API:    {api}/docs\n"
             f"  admin token: {token}\n"
             f"  try:         curl -s -H 'Authorization: Bearer {token}' "
             f"'{api}/v1/costs?window=yesterday&group_by=team,project'\n"
             f"               curl -s -H 'Authorization: Bearer {token}' "
             f"'{api}/v1/reports/chargeback.csv?month={day:%Y-%m}'\n"
             f"  files:       {workdir}\n"
             "Ctrl-C stops everything.")  # fmt: skip
        stopping.wait(args.duration)
        return 0
    finally:
        stack.close()
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        _say("gpu-finops demo: stopped")


if __name__ == "__main__":
    raise SystemExit(main())
