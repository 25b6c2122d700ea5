"""gpu-exporter benchmark: scrape latency, collection time, CPU and RSS; node_exporter as peer.

    python bench/exporter_scrape.py            # full run (about 5 minutes)
    python bench/exporter_scrape.py --quick    # shorter windows, fewer requests

Every figure is measured in this run on this machine; medians and ratios are what to compare,
since the machine is shared and noisy. Results are also written as JSON to bench/results/.

What it measures, per fleet spec (each run through the real exporter over the fake NVML):
  - scrape latency p50/p99 with 4 concurrent keep-alive clients, sending Prometheus's own
    Accept and Accept-Encoding headers (answered in text 0.0.4 + gzip, docs/metrics.md), and
    plain text without gzip;
  - time per collection (in-process: NVML reads + attribution, and rendering), median and p99
    (the shared node also with 100 DRA claims: kubelet dynamic_resources + ResourceSlice
    lookups; target <= 100 ms);
  - CPU seconds per hour and RSS of the exporter process at 5 s collection with a scrape every
    15 s over a window;
and Debian's prometheus-node-exporter's scrape latency with the same clients, as the peer.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import cpu_model  # noqa: E402 (after the path)

PROM_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def machine() -> dict[str, Any]:
    model = cpu_model()
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_exporter(spec: Path, interval: str = "5s") -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter.cli",
            "--simulate",
            str(spec),
            "--collect-interval",
            interval,
            "--web.listen-address",
            "127.0.0.1:0",
            "--log-level",
            "warn",
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    # the port line is logged at info; ask the process instead: find its listening socket
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        port = _listening_port(proc.pid)
        if port:
            return proc, port
        if proc.poll() is not None:
            raise RuntimeError(f"exporter exited: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.05)
    raise RuntimeError("exporter did not start listening")


def _listening_port(pid: int) -> int | None:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return None
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:  # LISTEN
                return int(parts[1].split(":")[1], 16)
    return None


def wait_for_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def scrape_latency(port: int, headers: dict[str, str], total: int, clients: int = 4) -> list[float]:
    """Milliseconds per scrape (request to last body byte), ``clients`` keep-alive connections."""
    per_client = total // clients
    results: list[list[float]] = [[] for _ in range(clients)]

    def run(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for n in range(per_client + 5):
            t0 = time.perf_counter_ns()
            conn.request("GET", "/metrics", headers=headers)
            resp = conn.getresponse()
            resp.read()
            if n >= 5:  # the first few warm the connection up
                results[i].append((time.perf_counter_ns() - t0) / 1e6)
        conn.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [x for r in results for x in r]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_and_rss(pid: int, port: int, window: float) -> dict[str, float]:
    """CPU and RSS over ``window`` seconds with a Prometheus-like scrape every 15 s."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def scrape() -> None:
        conn.request("GET", "/metrics", headers=PROM_HEADERS)
        conn.getresponse().read()

    scrape()
    start_ticks, start = cpu_ticks(pid), time.monotonic()
    rss_max, next_scrape = rss_mib(pid), start + 15
    while (now := time.monotonic()) < start + window:
        if now >= next_scrape:
            scrape()
            next_scrape += 15
        rss_max = max(rss_max, rss_mib(pid))
        time.sleep(0.5)
    seconds = (cpu_ticks(pid) - start_ticks) / CLK_TCK
    elapsed = time.monotonic() - start
    conn.close()
    return {
        "cpu_seconds_per_hour": seconds / elapsed * 3600,
        "cpu_percent_of_core": seconds / elapsed * 100,
        "rss_max_mib": rss_max,
        "rss_final_mib": rss_mib(pid),
        "window_s": elapsed,
    }


def collection_times(spec_path: Path, n: int) -> dict[str, float]:
    """In-process: the real collector, attribution and renderer over the fake NVML, with the
    simulated node's real pod-resources server and /proc tree."""
    from exporter.catalogue import COLLECTORS, OFF_BY_DEFAULT
    from exporter.collection import Exporter
    from exporter.nvml.boundary import Nvml
    from exporter.pods.assignments import PodResourcesAssignments
    from exporter.pods.kubelet.client import PodResourcesClient
    from exporter.pods.proc_owner import ProcOwner
    from exporter.simulate.fake_nvml import FakeNvml
    from exporter.simulate.node import SimulatedNode
    from exporter.simulate.spec import load

    spec = load(spec_path)
    fake = FakeNvml(spec)
    node = SimulatedNode(spec, fake)
    client = PodResourcesClient(node.socket_path)
    try:
        nvml = Nvml(fake)
        exporter = Exporter(
            nvml,
            spec.hostname,
            frozenset(COLLECTORS) - OFF_BY_DEFAULT,
            5.0,
            assignments=PodResourcesAssignments(
                client,
                lambda *_: None,
                slices=node.slices,
                pods=node.directory,
                profiles=dict(spec.vgpu_profiles),
            ),
            owner=ProcOwner(node.directory, node.proc_root),
        )
        exporter.collect_once()
        totals, reads, renders = [], [], []
        for _ in range(n):
            t0 = time.perf_counter()
            exporter.collect_once()
            totals.append((time.perf_counter() - t0) * 1000)
            reads.append(exporter.stats.last_duration * 1000)
            renders.append(exporter.stats.last_render_duration * 1000)
        text = exporter.exposition.body("text")
        om_gz = exporter.exposition.body("openmetrics+gzip")
        exporter.close()
        return {
            "collection_ms_p50": statistics.median(totals),
            "collection_ms_p99": pct(totals, 99),
            "read_and_attribute_ms_p50": statistics.median(reads),
            "render_ms_p50": statistics.median(renders),
            "exposition_bytes_text": len(text),
            "exposition_bytes_openmetrics_gzip": len(om_gz),
            "exposition_lines": text.count(b"\n"),
            "gpus": len(fake.gpus),
            "nvml_calls_per_collection": fake.calls // (n + 1),
        }
    finally:
        client.close()
        node.stop()


def shared_spec(path: Path, gpus: int = 16, replicas: int = 10, processes: int = 1000) -> Path:
    """16 GPUs x 10 time-slice replicas, one pod per replica, 1,000 processes among them."""
    raw: dict[str, Any] = {"hostname": "bench-shared", "gpus": [], "pods": []}
    pid = 10000
    per_gpu = [processes // gpus + (1 if i < processes % gpus else 0) for i in range(gpus)]
    for g in range(gpus):
        procs = []
        pods: list[list[int]] = [[] for _ in range(replicas)]
        for k in range(per_gpu[g]):
            pid += 1
            procs.append({"pid": pid, "sm_util": 5 + (pid % 40), "memory_used_mib": 600})
            pods[k % replicas].append(pid)
        raw["gpus"].append(
            {
                "model": "NVIDIA H100 80GB HBM3",
                "memory_total_mib": 81559,
                "time_slicing_replicas": replicas,
                "processes": procs,
                "utilization": {"gpu": 70},
                "power_w": 500,
            }
        )
        for r in range(replicas):
            raw["pods"].append(
                {
                    "namespace": f"team-{r % 7}",
                    "name": f"job-{g}-{r}",
                    "labels": {"team": f"team-{r % 7}"},
                    "containers": [
                        {
                            "name": "main",
                            "pids": pods[r],
                            "devices": [
                                {"resource": "nvidia.com/gpu.shared", "ids": [f"gpu{g}::{r}"]}
                            ],
                        }
                    ],
                }
            )
    path.write_text(yaml.safe_dump(raw))
    return path


def dra_spec(path: Path, gpus: int = 20, claims_per_gpu: int = 5) -> Path:
    """The shared node of :func:`shared_spec` plus ``gpus`` H100s handed out through DRA:
    ``claims_per_gpu`` claims on each (devices shared between claims), one pod per claim —
    100 DRA claims by default."""
    shared_spec(path)
    raw = yaml.safe_load(path.read_text())
    raw["hostname"] = "bench-dra"
    base = len(raw["gpus"])
    for g in range(gpus):
        raw["gpus"].append(
            {"model": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "power_w": 400}
        )
        for c in range(claims_per_gpu):
            name = f"claim-{g}-{c}"
            raw["pods"].append(
                {
                    "namespace": f"dra-{c}",
                    "name": name,
                    "labels": {"team": f"team-{c}"},
                    "containers": [
                        {"name": "main", "claims": [{"name": name, "devices": [f"gpu{base + g}"]}]}
                    ],
                }
            )
    path.write_text(yaml.safe_dump(raw))
    return path


def node_exporter_latency(total: int) -> dict[str, Any]:
    binary = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if binary is None:
        return {"error": "prometheus-node-exporter not installed (make bench installs it)"}
    port = free_port()
    proc = subprocess.Popen(
        [binary, f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        version = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, check=False
        ).stdout.split("\n")[0]
        lat = scrape_latency(port, PROM_HEADERS, total)
        return {"version": version, "p50_ms": statistics.median(lat), "p99_ms": pct(lat, 99)}
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter windows, fewer requests")
    ap.add_argument("--window", type=float, default=None, help="CPU/RSS window per spec, s")
    args = ap.parse_args()
    window = args.window or (20.0 if args.quick else 60.0)
    requests = 400 if args.quick else 2000
    collections = 10 if args.quick else 40

    tmp = Path(tempfile.mkdtemp(prefix="gpu-bench-"))
    specs = {
        "8xH100 (examples/fleet-h100x8.yaml)": ROOT / "examples" / "fleet-h100x8.yaml",
        "64 GPUs (bench/fleet-64gpu.yaml)": ROOT / "bench" / "fleet-64gpu.yaml",
        "16 GPUs x 10 replicas, 160 pods, 1000 processes": shared_spec(tmp / "shared.yaml"),
        "the shared node + 20 GPUs through 100 DRA claims": dra_spec(tmp / "dra.yaml"),
    }
    report: dict[str, Any] = {"machine": machine(), "requests": requests, "specs": {}}
    m = report["machine"]
    print(
        f"machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, "
        f"Linux {m['kernel']}, {m['date']}"
    )
    print(
        f"scrapes: {requests} per case, 4 concurrent keep-alive clients; CPU/RSS window "
        f"{window:.0f} s at 5 s collection, 15 s scrapes\n"
    )

    peer = node_exporter_latency(requests)
    report["node_exporter"] = peer
    for name, path in specs.items():
        figures: dict[str, Any] = collection_times(path, collections)
        proc, port = start_exporter(path)
        try:
            time.sleep(0.5)
            prom = scrape_latency(port, PROM_HEADERS, requests)
            plain = scrape_latency(port, {}, requests)
            figures |= {
                "scrape_p50_ms": statistics.median(prom),
                "scrape_p99_ms": pct(prom, 99),
                "scrape_plain_p50_ms": statistics.median(plain),
                "scrape_plain_p99_ms": pct(plain, 99),
            }
            figures |= cpu_and_rss(proc.pid, port, window)
        finally:
            proc.terminate()
            proc.wait(10)
        report["specs"][name] = figures
        _print(name, figures, peer)

    if "p50_ms" in peer:
        print(
            f"peer: {peer['version']}: scrape p50 {peer['p50_ms']:.2f} ms, "
            f"p99 {peer['p99_ms']:.2f} ms"
        )
    else:
        print(f"peer: {peer['error']}")
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    stamp = re.sub(r"[^0-9]", "", report["machine"]["date"])[:12]
    (out / f"exporter_scrape-{stamp}.json").write_text(json.dumps(report, indent=2))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _print(name: str, f: dict[str, Any], peer: dict[str, Any]) -> None:
    def verdict(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    ratio = f["scrape_p50_ms"] / peer["p50_ms"] if "p50_ms" in peer else float("nan")
    print(
        f"== {name}: {f['gpus']} GPUs, exposition {f['exposition_lines']} lines, "
        f"{f['exposition_bytes_text'] / 1024:.0f} KiB text, "
        f"{f['exposition_bytes_openmetrics_gzip'] / 1024:.0f} KiB OpenMetrics+gzip"
    )
    print(
        f"  scrape (Prometheus headers)  p50 {f['scrape_p50_ms']:.3f} ms  "
        f"p99 {f['scrape_p99_ms']:.3f} ms   [p50 <= 2 ms: {verdict(f['scrape_p50_ms'] <= 2)}; "
        f"{ratio:.3f} x node_exporter, <= 0.25: {verdict(ratio <= 0.25)}]"
    )
    print(
        f"  scrape (plain text)          p50 {f['scrape_plain_p50_ms']:.3f} ms  "
        f"p99 {f['scrape_plain_p99_ms']:.3f} ms"
    )
    print(
        f"  collection                   p50 {f['collection_ms_p50']:.2f} ms  "
        f"p99 {f['collection_ms_p99']:.2f} ms  (read+attribute "
        f"{f['read_and_attribute_ms_p50']:.2f} ms, render {f['render_ms_p50']:.2f} ms, "
        f"{f['nvml_calls_per_collection']} NVML calls)"
    )
    print(
        f"  CPU                          {f['cpu_seconds_per_hour']:.1f} s/hour = "
        f"{f['cpu_percent_of_core']:.3f} % of one core   [<= 1 %: "
        f"{verdict(f['cpu_percent_of_core'] <= 1)}]"
    )
    print(
        f"  RSS                          max {f['rss_max_mib']:.1f} MiB, final "
        f"{f['rss_final_mib']:.1f} MiB   [<= 80 MiB: {verdict(f['rss_max_mib'] <= 80)}; "
        f"<= 150 MiB for the shared node]\n"
    )


if __name__ == "__main__":
    raise SystemExit(main())
