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
import importlib.metadata
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
from exporter.nvml.results import Failure
from exporter.simulate.recorded import Recorder, compact

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


def metadata_version() -> str | None:
    try:
        return importlib.metadata.version("nvidia-ml-py")
    except importlib.metadata.PackageNotFoundError:
        return None


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
    known = set(re.findall(r'"([a-z0-9_.\[\]]+)"', help_text))  # each name and its aliases
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


def first_cycles(recording: dict[str, Any], cycles: int) -> dict[str, Any]:
    """The recording's first ``cycles`` collections (each begins with nvmlDeviceGetCount; the
    first also with discovery's), arrays compacted: what a fixture keeps."""
    calls, counts = [], 0
    for entry in recording["calls"]:
        if entry["call"] == "nvmlDeviceGetCount":
            counts += 1
            if counts == cycles + 2:
                break
        calls.append(compact(entry))
    meta = {**recording["meta"], "cycles": cycles}
    return {**recording, "meta": meta, "calls": calls}


def trim(argv: list[str]) -> int:
    """``--trim IN OUT CYCLES [KEY=VALUE ...]``: a fixture from a device recording."""
    source, target, cycles, *notes = argv
    kept = first_cycles(json.loads(Path(source).read_text()), int(cycles))
    kept["meta"].update(note.split("=", 1) for note in notes)
    Path(target).write_text(json.dumps(kept, indent=1) + "\n")
    return 0


def mig_probe(out: Path, fake: str | None) -> int:
    """``--mig OUT``: what NVML says of the GPUs' MIG profiles (read only: MIG mode is left as
    it is), through the exporter's own calls, and ``nvidia-smi mig -lgip``/``-lgipp``."""
    recorder = Recorder(library(fake))
    nvml = Nvml(recorder)
    nvml.init()
    count = nvml.device_count()
    found: dict[str, Any] = {}
    for index in range(count if isinstance(count, int) else 0):
        dev = nvml.device(index)
        if isinstance(dev, Failure):
            continue
        geometry = nvml.mig_geometry(dev)
        found[str(index)] = {"enabled": repr(nvml.mig_enabled(dev)), "geometry": repr(geometry)}
        total = nvml.memory(dev)
        if not isinstance(total, Failure):
            found[str(index)]["instances"] = repr(nvml.mig_instances(dev, total[0], None))
        ids = {
            int(c["result"]["fields"]["id"])
            for c in recorder.calls
            if c["call"] == "nvmlDeviceGetGpuInstanceProfileInfo" and "result" in c
        }
        for profile_id in sorted(ids):
            nvml._profile_name(dev, profile_id)  # nvmlDeviceGetGpuInstanceProfileInfoById
    nvml.shutdown()
    recording = recorder.recording(what="MIG profiles", exporter_view=found)
    (out / "mig.json").write_text(json.dumps(recording, indent=1))
    log: list[str] = []
    text = ""
    if shutil.which("nvidia-smi"):
        for argv in (["nvidia-smi", "mig", "-lgip"], ["nvidia-smi", "mig", "-lgipp"]):
            text += f"### {' '.join(argv)}\n{run(argv, log)}\n"
    (out / "smi-mig.txt").write_text(text + "\n".join(log))
    print(json.dumps(found)[:3000])
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--trim"]:
        return trim(sys.argv[2:])
    if sys.argv[1:2] == ["--mig"]:
        Path(sys.argv[2]).mkdir(parents=True, exist_ok=True)
        return mig_probe(Path(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--fake", default=None)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--pause", type=float, default=0.5)
    ap.add_argument("--idle-cycles", type=int, default=5)
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
    summary["nvidia_ml_py"] = getattr(lib, "__version__", None) or metadata_version()
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
    keys = ("when", "nvidia_ml_py", "host", "fake", "driver", "gpu_name", "load")
    recording["meta"] = {k: summary.get(k) for k in keys}
    recording["meta"]["cycles"] = args.cycles
    recording["meta"]["pause_s"] = args.pause
    (out / "recording.json").write_text(json.dumps(recording))

    summary.update(smi(out, log))  # under the same load as the recording
    stop_load(load, log)
    if load is not None:  # and the GPU idle again: no process, no utilisation samples
        recorder = Recorder(lib)
        took, exp = collect(recorder, args.idle_cycles, args.pause)
        idle = recorder.recording()
        exp.close()
        idle["meta"] = {**recording["meta"], "cycles": args.idle_cycles, "load": False}
        summary["idle_recorded_cycle_ms_median"] = round(statistics.median(took) * 1000, 3)
        (out / "recording-idle.json").write_text(json.dumps(idle))
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
