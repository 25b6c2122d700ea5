"""History for the demo: three simulated GPU nodes scraped on a simulated clock, from the
start of yesterday until the moment the demo starts.

Each node's exporter is built exactly as ``gpu-exporter --simulate`` builds it
(:func:`exporter.build.build`), on a clock the demo steps through the history; every
collection's exposition is kept with its timestamp (what Prometheus would have scraped),
together with kube-state-metrics' ``kube_pod_labels`` for the pods alive at that moment. The
specs are given the history's start as their epoch (:func:`spec_with_epoch`), so the live
exporters the demo then starts go on where the history stops, and :class:`PodLabels` serves
``kube_pod_labels`` live, as kube-state-metrics would.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO

import yaml

from demo.vllm import scrapes as served_scrapes
from exporter.build import Built, build
from exporter.flags import parse_settings
from exporter.simulate.spec import FleetSpec, load
from kube.labels import sanitize_label

ROOT = Path(__file__).resolve().parents[1]
NODES = (
    "fleet-h100x8.yaml",
    "fleet-shared.yaml",
    "fleet-mixed.yaml",
    "fleet-dra.yaml",  # GPUs handed out through DRA claims (one shared by three pods)
    "fleet-hami.yaml",  # HAMi fractions (cores % and MiB) and memory-profile vGPUs
)


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


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


def simulated_node(spec_path: Path, clock: Clock) -> Built:
    """The exporter of one simulated node on ``clock``: ``gpu-exporter --simulate FILE
    --collect-interval 60s --pod-resources-timeout 5s``, built but not started."""
    argv = ["--simulate", str(spec_path), "--collect-interval", "60s"]
    settings = parse_settings([*argv, "--pod-resources-timeout", "5s"], {})
    return build(settings, clock=clock, monotonic=clock)


def kube_pod_labels(spec: FleetSpec, t: float) -> str:
    """kube-state-metrics' ``kube_pod_labels`` for the spec's pods alive at ``t`` (seconds)."""
    ksm = ["# TYPE kube_pod_labels gauge"]
    for pod in spec.pods:
        if not pod.alive(t):
            continue
        labels = "".join(f',{sanitize_label(k)}="{v}"' for k, v in sorted(pod.labels.items()))
        ksm.append(f'kube_pod_labels{{namespace="{pod.namespace}",pod="{pod.name}"{labels}}} 1')
    return "\n".join(ksm)


def spec_with_epoch(name: str, epoch: datetime, workdir: Path) -> Path:
    """A copy of the example spec ``name`` whose curves and pods start at ``epoch``."""
    raw = yaml.safe_load((ROOT / "examples" / name).read_text())
    raw["epoch"] = epoch.isoformat()
    out = workdir / f"live-{name}"
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def make_history(workdir: Path, day: datetime, step: int, end: datetime) -> tuple[Path, int]:
    """Scrapes of the simulated nodes (and kube_pod_labels) from ``day`` until ``end``, as
    OpenMetrics."""
    logging.getLogger("exporter").setLevel(logging.ERROR)  # simulated XIDs are not news here
    families = FamilyFiles(workdir)
    clock = Clock(day.timestamp())
    nodes = []
    for i, name in enumerate(NODES):
        built = simulated_node(spec_with_epoch(name, day, workdir), clock)
        nodes.append((built, f'job="gpu-exporter",instance="node-{i}:9400"'))
    fleets = [built.spec for built, _ in nodes if built.spec is not None]
    try:
        stop = end.timestamp()
        while clock.t < stop:
            stamp = int(clock.t)
            for body, extra in served_scrapes(fleets, clock.t - day.timestamp()):
                families.add(body, stamp, extra)  # the inference deployment (demo/vllm.py)
            for built, extra in nodes:
                assert built.spec is not None
                exporter = built.exporter
                exporter.collect_once()
                families.add(exporter.exposition.body("openmetrics").decode(), stamp, extra)
                ksm = kube_pod_labels(built.spec, clock.t - day.timestamp())
                families.add(ksm, stamp, 'job="kube-state-metrics"')
            clock.t += step
    finally:
        for built, _ in nodes:
            built.exporter.close()
            built.stop()
    out = workdir / "history.om"
    families.write(out)
    return out, families.samples


class PodLabels:
    """A stand-in for kube-state-metrics while the demo runs: ``/metrics`` answers
    ``kube_pod_labels`` for the pods of the live specs alive now (t since ``epoch``)."""

    def __init__(self, specs: list[Path], epoch: datetime, port: int) -> None:
        fleets = [load(p) for p in specs]
        start = epoch.timestamp()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                t = time.time() - start
                body = ("\n".join(kube_pod_labels(f, t) for f in fleets) + "\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
