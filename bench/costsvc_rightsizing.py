"""gpu-costsvc rightsizing benchmark: recommendations and quota figures for a large fleet over
a week of history in a real Prometheus, through the production path (costsvc/advice/run.py).

    python bench/costsvc_rightsizing.py [--pods 5000] [--days 7] [--interval 300]

The synthetic history (OpenMetrics, one file per 2-hour block loaded with ``promtool tsdb
create-blocks-from openmetrics``, which reads its input once per block it spans): pods in
Deployments of 5 replicas over 50 namespaces (a team label each, a GPU
ResourceQuota each through kube-state-metrics' ``kube_resourcequota``); 70 % hold a whole
H100 (profiling activity), 10 % a whole A100 (utilisation), 20 % a quarter of a time-sliced
H100 (per-process SM time); every pod's GPU memory; every GPU's ``gpu_device_up`` (and the
framebuffer of ten GPUs per model: its size is all that is read). Memory and activity vary
over each day. Samples every 5 minutes (the points the recommendations count; a real
15-30 s scrape interval means more samples for Prometheus to decode in the quantiles, not
more work in the cost service). Prints the machine, the sizes, the
time to load the history, and the advice run's time (Prometheus queries, rules, store into
SQLite) and peak RSS of this process and of Prometheus. Target: <= 60 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import cpu_model, status_kib  # noqa: E402 (after the path)
from bench.scale_history import start_prometheus  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
END = datetime(2026, 11, 20, tzinfo=UTC)
NAMESPACES = 50
REPLICAS = 5
GB = 10**9


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fleet(pods: int) -> list[tuple[int, str, str, str, str, float]]:
    """(pod index, namespace, pod name, GPU uuid, model/kind, share) of every pod."""
    out = []
    shared_gpu = 0
    for p in range(pods):
        workload = p // REPLICAS
        ns = f"ns-{workload % NAMESPACES:02d}"
        # a Deployment's pod: <deployment>-<pod-template-hash>-<5 generated characters>
        name = f"wl{workload:04d}-7d4b9c8f6-x2k{'bcdfg'[p % REPLICAS]}z"
        kind = p % 10
        if kind < 7:
            out.append((p, ns, name, f"GPU-H{p:05d}", "h100", 1.0))
        elif kind == 7:
            out.append((p, ns, name, f"GPU-A{p:05d}", "a100", 1.0))
        else:
            out.append((p, ns, name, f"GPU-S{shared_gpu // 4:05d}", "shared", 0.25))
            shared_gpu += 1
    return out


Series = dict[str, list[tuple[str, list[str] | str]]]  # family -> (labels, values or one)


def series_of(pods: list[tuple[int, str, str, str, str, float]]) -> Series:
    """Every series of the history, with its values over one day of 5-minute points (288;
    repeated each day) or one constant value."""

    def gpu(uuid: str, model: str) -> str:
        return f'UUID="{uuid}",modelName="{model}",Hostname="n-{uuid[5:]}",gpu="0"'

    def day(fn: object) -> list[str]:
        return [str(fn(i)) for i in range(288)]  # type: ignore[operator]

    out: Series = {name: [] for name in (
        "gpu_device_up", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "gpu_allocation_share",
        "gpu_container_memory_used_bytes", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_DEV_GPU_UTIL", "gpu_container_sm_utilization_ratio", "kube_namespace_labels",
        "kube_resourcequota",
    )}  # fmt: skip
    gpus: dict[str, str] = {}
    for p, ns, pod, uuid, kind, share in pods:
        model = A100 if kind == "a100" else H100
        gpus[uuid] = model
        h = f'{gpu(uuid, model)},namespace="{ns}",pod="{pod}",container="main"'
        resource_name = "nvidia.com/gpu.shared" if kind == "shared" else "nvidia.com/gpu"
        out["gpu_allocation_share"].append((f'{h},resource="{resource_name}"', str(share)))
        base = (2 + p % 60) * GB
        out["gpu_container_memory_used_bytes"].append((h, day(lambda i, b=base: b + i * 10**6)))
        level = (p % 100) / 100
        ratio = day(lambda i, a=level: round(a * (0.5 + (i % 144) / 288), 4))
        if kind == "h100":
            out["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].append((h, ratio))
        elif kind == "a100":
            out["DCGM_FI_DEV_GPU_UTIL"].append((h, [f"{float(v) * 100:.2f}" for v in ratio]))
        else:
            out["gpu_container_sm_utilization_ratio"].append((h, ratio))
    per_model: dict[str, int] = {}
    for uuid, model in gpus.items():
        out["gpu_device_up"].append((gpu(uuid, model), "1"))
        if per_model.get(model, 0) < 10:  # the framebuffer size of each model: a few suffice
            per_model[model] = per_model.get(model, 0) + 1
            out["DCGM_FI_DEV_FB_FREE"].append((gpu(uuid, model), "60000"))
            out["DCGM_FI_DEV_FB_USED"].append((gpu(uuid, model), "21559"))
    for i in range(NAMESPACES):
        ns = f'namespace="ns-{i:02d}"'
        out["kube_namespace_labels"].append((f'{ns},label_team="team-{i % 10}"', "1"))
        for t, v in (("hard", "100"), ("used", "80")):
            out["kube_resourcequota"].append(
                (f'{ns},resourcequota="gpus",resource="requests.nvidia.com/gpu",type="{t}"', v)
            )
    return out


def write_window(path: Path, series: Series, first: int, stamps: range) -> int:
    """One 2-hour block's samples (promtool reads its input once per block it spans: one file
    per block keeps that to once). ``first``: index of the first point within the day."""
    n = 0
    with path.open("w") as f:
        for name, rows in series.items():
            f.write(f"# TYPE {name} gauge\n")
            for labels, values in rows:
                if isinstance(values, str):
                    f.write("".join(f"{name}{{{labels}}} {values} {t}\n" for t in stamps))
                else:
                    f.write(
                        "".join(
                            f"{name}{{{labels}}} {values[(first + k) % 288]} {t}\n"
                            for k, t in enumerate(stamps)
                        )
                    )
                n += len(stamps)
        f.write("# EOF\n")
    return n


def rss_of(pid: int) -> int:
    return status_kib(pid, "VmHWM") * 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--interval", type=int, default=300, choices=[300], help="history, s")
    ap.add_argument("--step", type=int, default=1800, help="the advice run's point spacing, s")
    ap.add_argument("--data", type=Path, help="keep the Prometheus data here; reuse it if there")
    args = ap.parse_args()

    from sqlalchemy import create_engine

    from costsvc.advice.repository import save_advice
    from costsvc.advice.run import Options, compute
    from costsvc.db.migrate import upgrade
    from costsvc.ingest.prom import PrometheusReader
    from costsvc.rules.cost_model import parse

    work = Path(tempfile.mkdtemp(prefix="rightsizing-"))
    prom_proc = None
    try:
        data = args.data or work / "data"
        reuse = data.exists() and any(data.iterdir())
        series = {} if reuse else series_of(fleet(args.pods))
        t = time.perf_counter()
        samples = 0
        t_end = int(END.timestamp())
        t_start = t_end - args.days * 86400
        windows = range(t_start, t_end, 7200)
        for w, w_start in enumerate([] if reuse else windows):
            stamps = range(max(w_start, t_start + args.interval), w_start + 7200, args.interval)
            path = work / "h.om"
            first = (stamps[0] - t_start) // 300
            samples += write_window(path, series, first, stamps)
            subprocess.run(
                ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(path), str(data)],
                check=True, capture_output=True,
            )  # fmt: skip
            path.unlink()
            print(f"\r  loaded {w + 1}/{len(windows)} two-hour blocks", end="", flush=True)
        print()
        t_load = time.perf_counter() - t
        port = free_port()
        prom_proc = start_prometheus(data, port)
        model = parse(
            {
                "versions": [
                    {
                        "effective_from": "2026-11-01T00:00:00Z",
                        "prices": [
                            {"model": H100, "hourly": "2.50"},
                            {"model": A100, "hourly": "1.80"},
                        ],
                    }
                ]
            }
        )
        url = f"sqlite:///{work / 'b.db'}"
        upgrade(url)
        engine = create_engine(url)
        reader = PrometheusReader(f"http://127.0.0.1:{port}", timeout=600)
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        took: dict[str, float] = {}
        vector = reader.vector

        def timed(query: str, at: datetime) -> list[tuple[dict[str, str], object]]:
            t0 = time.perf_counter()
            try:
                return vector(query, at)  # type: ignore[return-value]
            finally:
                took[query] = time.perf_counter() - t0

        reader.vector = timed  # type: ignore[assignment,method-assign]
        runs = []
        for _ in range(2):  # the first also warms Prometheus's page cache
            t0 = time.perf_counter()
            outcome = compute(
                engine,
                reader,
                model,
                "bench",
                END,
                Options(window=timedelta(days=args.days), step_s=args.step),
            )
            t1 = time.perf_counter()
            save_advice(engine, "bench", outcome.recommendations, outcome.quotas)
            runs.append((t1 - t0, time.perf_counter() - t1))
        reader.close()
        engine.dispose()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        actions: dict[str, int] = {}
        for r in outcome.recommendations:
            actions[r["action"]] = actions.get(r["action"], 0) + 1
        cpu = cpu_model(platform.processor() or platform.machine())
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        print(
            f"machine: {cpu}, {os.cpu_count()} cores, {mem / 2**30:.0f} GiB; Python "
            f"{sys.version.split()[0]}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
        )
        print(
            f"history: {args.pods} pods ({args.pods // REPLICAS} workloads, {NAMESPACES} "
            f"namespaces), {args.days} days at {args.interval} s = {samples:,} samples; "
            f"loaded in {t_load:.0f} s"
        )
        print(
            f"result: {len(outcome.recommendations)} recommendation rows "
            f"({', '.join(f'{k} {v}' for k, v in sorted(actions.items()))}), "
            f"{len(outcome.quotas)} quota rows"
        )
        for i, (queries, store) in enumerate(runs, 1):
            total = queries + store
            verdict = "PASS" if total <= 60 else "MISS"
            print(
                f"run {i} (points every {args.step} s): {total:.1f} s (Prometheus reads and "
                f"rules {queries:.1f} s, store {store:.2f} s)   [<= 60 s: {verdict}]"
            )
        slowest = sorted(took.items(), key=lambda kv: -kv[1])[:4]
        print("slowest queries (last run, two at a time): " + "; ".join(
            f"{q[:70]}... {d:.1f} s" for q, d in slowest))  # fmt: skip
        print(
            f"peak RSS: this process {rss / 2**20:.0f} MiB (before the runs "
            f"{rss_before / 2**20:.0f} MiB), Prometheus {rss_of(prom_proc.pid) / 2**20:.0f} MiB"
        )
        return 0
    finally:
        if prom_proc is not None:
            prom_proc.terminate()
            prom_proc.wait(30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
