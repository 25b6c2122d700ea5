"""A day of history for the demo: three simulated GPU nodes scraped on a simulated clock.

Each node's exporter is built exactly as ``gpu-exporter --simulate`` builds it
(:func:`exporter.build.build`), on a clock the demo steps through the day; every collection's
exposition is kept with its timestamp (what Prometheus would have scraped), together with
kube-state-metrics' ``kube_pod_labels`` for the pods alive at that moment.
"""

from __future__ import annotations

import logging
import shutil
from datetime import datetime
from pathlib import Path
from typing import IO

from exporter.build import Built, build
from exporter.flags import parse_settings
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


def kube_pod_labels(built: Built, t: float) -> str:
    """kube-state-metrics' ``kube_pod_labels`` for the spec's pods alive at ``t`` (seconds)."""
    assert built.spec is not None
    ksm = ["# TYPE kube_pod_labels gauge"]
    for pod in built.spec.pods:
        if not pod.alive(t):
            continue
        labels = "".join(f',{sanitize_label(k)}="{v}"' for k, v in sorted(pod.labels.items()))
        ksm.append(f'kube_pod_labels{{namespace="{pod.namespace}",pod="{pod.name}"{labels}}} 1')
    return "\n".join(ksm)


def make_history(workdir: Path, day: datetime, step: int) -> tuple[Path, int]:
    """A day of scrapes of the simulated nodes (and kube_pod_labels), as OpenMetrics."""
    logging.getLogger("exporter").setLevel(logging.ERROR)  # simulated XIDs are not news here
    families = FamilyFiles(workdir)
    clock = Clock(day.timestamp())
    nodes = []
    for i, name in enumerate(NODES):
        built = simulated_node(ROOT / "examples" / name, clock)
        nodes.append((built, f'job="gpu-exporter",instance="node-{i}:9400"'))
    try:
        end = day.timestamp() + 86400
        while clock.t < end:
            stamp = int(clock.t)
            for built, extra in nodes:
                exporter = built.exporter
                exporter.collect_once()
                families.add(exporter.exposition.body("openmetrics").decode(), stamp, extra)
                ksm = kube_pod_labels(built, clock.t - day.timestamp())
                families.add(ksm, stamp, 'job="kube-state-metrics"')
            clock.t += step
    finally:
        for built, _ in nodes:
            built.exporter.close()
            built.stop()
    out = workdir / "history.om"
    families.write(out)
    return out, families.samples
