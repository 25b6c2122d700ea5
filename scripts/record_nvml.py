"""Record what NVML answers the exporter on a real GPU (run on a machine with one; read-only:
it changes no GPU setting). Writes under OUT:

- ``recording.json``: every NVML call of CYCLES collections of the real collection code,
  through :class:`exporter.simulate.recorded.Recorder` (arguments, answers, ns per call);
- ``summary.json``: where and when, per-call medians (µs), a whole collection's median with
  and without the recorder, the nvidia-smi fields asked and those it does not know;
- ``smi-help.txt``, ``smi-query.csv``, ``smi-q.txt``: nvidia-smi's own account of the GPUs;
- ``metrics.txt``: one scrape of ``gpu-exporter``'s /metrics (no kubelet on the machine).

``--fake SPEC`` runs the same over the fake NVML (a dry run where there is no GPU).

    PYTHONPATH=. python3 scripts/record_nvml.py --out /tmp/rec [--fake spec.yaml]
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
import time
from pathlib import Path
from typing import Any

from exporter.catalogue import COLLECTORS
from exporter.collection import Exporter
from exporter.nvml.boundary import Nvml
from exporter.simulate.recorded import Recorder

SMI_FIELDS = [
    "index",
    "name",
    "uuid",
    "serial",
    "pci.bus_id",
    "driver_version",
    "vbios_version",
    "memory.total",
    "memory.used",
    "memory.free",
    "utilization.gpu",
    "utilization.memory",
    "temperature.gpu",
    "temperature.memory",
    "power.draw",
    "power.limit",
    "enforced.power.limit",
    "clocks.sm",
    "clocks.mem",
    "mig.mode.current",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "pcie.link.gen.current",
    "pcie.link.width.current",
]


def library(fake: str | None) -> Any:
    if fake is None:
        import pynvml

        return pynvml
    from exporter.simulate.fake_nvml import FakeNvml
    from exporter.simulate.spec import load

    return FakeNvml(load(Path(fake)))


def collect(lib: Any, cycles: int, pause: float) -> tuple[list[float], Exporter]:
    exp = Exporter(Nvml(lib), socket.gethostname(), COLLECTORS, max(pause, 1.0))
    took = []
    for i in range(cycles):
        start = time.perf_counter()
        exp.collect_once()
        took.append(time.perf_counter() - start)
        if i + 1 < cycles:
            time.sleep(pause)  # GPM and utilisation need time between two reads
    return took, exp


LOAD = """
import pathlib, sys, time
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(sys.argv[2])
first = True
while time.time() < end:
    for _ in range(10):
        b = a @ a
    torch.cuda.synchronize()
    if first:
        pathlib.Path(sys.argv[1]).write_text("ready")
        first = False
    time.sleep(0.02)
"""


def start_load(out: Path, seconds: float, log: list[str]) -> subprocess.Popen[str] | None:
    """A matrix-product loop on the GPU (PyTorch), so that the recording holds a busy GPU: a
    compute process, its utilisation samples, non-zero GPM readings."""
    ready = Path(tempfile.mkdtemp()) / "ready"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen(
        [sys.executable, "-c", LOAD, str(ready), str(seconds)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 90
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)  # waiting for the load's first product
    if not ready.exists():
        proc.kill()
        log.append(f"load did not start: {proc.communicate()[0][-2000:]}")
        return None
    return proc


def stop_load(proc: subprocess.Popen[str] | None, log: list[str]) -> None:
    if proc is not None:
        proc.terminate()
        log.append(f"load: exit {proc.wait(timeout=30)}")


def smi(out: Path, log: list[str]) -> dict[str, Any]:
    if shutil.which("nvidia-smi") is None:
        log.append("nvidia-smi: not on PATH")
        return {"nvidia_smi": None}
    help_text = run(["nvidia-smi", "--help-query-gpu"], log)
    (out / "smi-help.txt").write_text(help_text)
    known = set(re.findall(r'^"([a-z0-9_.\[\]]+)"', help_text, re.MULTILINE))
    fields = [f for f in SMI_FIELDS if f in known]
    unknown = [f for f in SMI_FIELDS if f not in known]
    csv = run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv"], log)
    (out / "smi-query.csv").write_text(csv)
    q = run(["nvidia-smi", "-q"], log)
    qd = run(["nvidia-smi", "-q", "-d", "PERFORMANCE,CLOCK,POWER,ECC"], log)
    (out / "smi-q.txt").write_text(
        f"### nvidia-smi -q\n{q}\n### nvidia-smi -q -d PERFORMANCE,CLOCK,POWER,ECC\n{qd}"
    )
    return {"smi_fields": fields, "smi_unknown_fields": unknown}


def run(argv: list[str], log: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode:
        log.append(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()[:500]}")
    return done.stdout


def scrape(out: Path, fake: str | None, log: list[str]) -> str:
    """Start gpu-exporter (no kubelet here: its pod-resources socket is absent, which it
    reports), scrape /metrics once its GPU series are there, stop it."""
    port = 19400
    argv = [sys.executable, "-c", "from exporter.cli import main; raise SystemExit(main())"]
    argv += [f"--web.listen-address=127.0.0.1:{port}", "--collect-interval=1s"]
    argv += ["--simulate", fake] if fake else []
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    body = ""
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/metrics")
                body = conn.getresponse().read().decode()
                conn.close()
            except OSError:
                body = ""
            if "DCGM_FI_DEV_POWER_USAGE" in body:
                break
            time.sleep(0.5)  # waiting for the exporter's first GPU collection
    finally:
        proc.terminate()
        try:
            output = proc.communicate(timeout=10)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            output = proc.communicate()[0]
    log.append(f"gpu-exporter exit {proc.returncode}; its log:\n{output[-4000:]}")
    (out / "metrics.txt").write_text(body)
    return "scraped" if "DCGM_FI_DEV_POWER_USAGE" in body else "no GPU series"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--fake", default=None)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--pause", type=float, default=0.5)
    ap.add_argument("--load", type=float, default=0.0, help="seconds of GPU load (PyTorch)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    summary: dict[str, Any] = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "host": platform.node(),
        "fake": args.fake,
    }
    lib = library(args.fake)
    summary["nvidia_ml_py"] = getattr(lib, "__version__", None)
    summary["nvidia_ml_py_file"] = getattr(lib, "__file__", None)

    load = start_load(out, args.load, log) if args.load > 0 else None
    summary["load"] = load is not None
    # 1. the bare collection (no recorder): a whole cycle's time
    bare, exp = collect(lib, args.cycles, args.pause)
    exp.close()
    # 2. the same, recorded
    recorder = Recorder(lib)
    took, exp = collect(recorder, args.cycles, args.pause)
    recording = recorder.recording()
    exp.close()
    by_call: dict[str, list[int]] = {}
    for c in recording["calls"]:
        if c["call"] != "nvmlEventSetWait_v2":  # it waits for events: no call cost
            by_call.setdefault(c["call"], []).append(c["ns"])
    summary["cycle_ms_median"] = round(statistics.median(bare) * 1000, 3)
    summary["cycle_ms_all"] = [round(t * 1000, 3) for t in bare]
    summary["recorded_cycle_ms_median"] = round(statistics.median(took) * 1000, 3)
    summary["calls_per_cycle"] = round(len(recording["calls"]) / args.cycles, 1)
    summary["per_call_us"] = {
        name: {
            "median": round(statistics.median(ns) / 1000, 2),
            "p90": round(sorted(ns)[int(0.9 * (len(ns) - 1))] / 1000, 2),
            "n": len(ns),
        }
        for name, ns in sorted(by_call.items())
    }
    answers = {c["call"]: c.get("result") for c in recording["calls"] if "result" in c}
    summary["driver"] = answers.get("nvmlSystemGetDriverVersion")
    summary["gpu_name"] = answers.get("nvmlDeviceGetName")
    keys = ("when", "nvidia_ml_py", "host", "fake", "driver", "gpu_name")
    recording["meta"] = {k: summary.get(k) for k in keys}
    recording["meta"]["cycles"] = args.cycles
    recording["meta"]["pause_s"] = args.pause
    (out / "recording.json").write_text(json.dumps(recording))

    summary.update(smi(out, log))  # under the same load as the recording
    stop_load(load, log)
    try:
        summary["scrape"] = scrape(out, args.fake, log)
    except Exception as exc:
        summary["scrape"] = repr(exc)
    summary["env_pythonpath"] = os.environ.get("PYTHONPATH")
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    (out / "log.txt").write_text("\n".join(log))
    print(json.dumps({k: summary[k] for k in summary if k != "per_call_us"}, default=str)[:3000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
