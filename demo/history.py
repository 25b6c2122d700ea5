"""History for the demo: the simulated GPU nodes scraped on a simulated clock, from the start
of the simulated hours until the moment Prometheus starts scraping the live exporters.

Each node's exporter is built exactly as ``gpu-exporter --simulate`` builds it
(:func:`exporter.build.build`), on a clock the demo steps through the history; every
collection's exposition is kept with its timestamp and the labels Prometheus gives the
target (``job``, ``instance``: the live exporter's address, so history and live are one
series), plus ``up`` 1, as Prometheus would have written them. kube-state-metrics' series
(demo/cluster.py) are kept the same way. Each node's history is made in a process of its
own (forked before any thread starts) and turned into TSDB blocks by its own ``promtool tsdb
create-blocks-from openmetrics``, so the nodes go in parallel.

The specs are copies of the examples given the history's start as their epoch
(:func:`spec_with_epoch`), so the live exporters go on where the history stops, and the
demo's incidents (:data:`INCIDENTS`: an XID, a lost GPU, clock throttling) are placed in them
relative to the moment the demo starts.
"""

from __future__ import annotations

import logging
import multiprocessing
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, Any

import yaml

from exporter.build import Built, build
from exporter.flags import parse_settings

ROOT = Path(__file__).resolve().parents[1]
NODES = (
    "fleet-h100x8.yaml",
    "fleet-shared.yaml",
    "fleet-mixed.yaml",
    "fleet-dra.yaml",  # GPUs handed out through DRA claims (one shared by three pods)
    "fleet-hami.yaml",  # HAMi fractions (cores % and MiB) and memory-profile vGPUs
)  # the DRA node's serving pods also count their tokens (demo/vllm.py: the inference deployment)
# promtool cuts blocks of this length at most (2 h by default, and it reads its whole input
# once per block): one block for the few simulated hours
MAX_BLOCK = "24h"


@dataclass(frozen=True, slots=True)
class Incident:
    """Something that goes wrong on a node, ``after`` the demo starts (negative: before)."""

    node: str
    model: str  # the spec entry it happens to (the first with this GPU model)
    after: timedelta
    what: str  # as the demo prints it
    change: Callable[[dict[str, Any], float], None]  # (spec entry, t at the demo's start)


def _add(
    key: str, item: Callable[[float], dict[str, Any]]
) -> Callable[[dict[str, Any], float], None]:
    return lambda entry, t: entry.setdefault(key, []).append(item(t))


LOST_AFTER = timedelta(seconds=20)  # once the live exporters know the GPU (NVML can't say
# which GPU a lost one was to an exporter that starts after the loss): they start in seconds
INCIDENTS = (
    Incident(
        "fleet-mixed.yaml",
        "NVIDIA L4",
        timedelta(hours=-2),
        "power cap (sw_power_cap) on both L4s of gpu-node-mixed-01, still on",
        _add(
            "clock_events",
            lambda t: {"from": t - 7200, "to": t + 30 * 86400, "reasons": ["sw_power_cap"]},
        ),
    ),
    Incident(
        "fleet-h100x8.yaml",
        "NVIDIA H100 80GB HBM3",
        timedelta(minutes=-50),
        "thermal slowdown of the H100s of gpu-node-h100-01 for 10 minutes",
        _add(
            "clock_events",
            lambda t: {
                "from": t - 3000,
                "to": t - 2400,
                "reasons": ["sw_thermal_slowdown", "hw_thermal_slowdown"],
            },
        ),
    ),
    Incident(
        "fleet-shared.yaml",
        "NVIDIA H100 80GB HBM3",
        timedelta(minutes=-30),
        "XID 31 (GPU memory page fault) on GPU 0 of gpu-node-shared-01",
        _add("xid", lambda t: {"t": t - 1800, "xid": 31}),
    ),
    Incident(
        "fleet-mixed.yaml",
        "Tesla T4",
        LOST_AFTER,
        "the T4 of gpu-node-mixed-01 falls off the bus (XID 79): unavailable, never charged",
        lambda entry, t: entry.update(lost_at=t + LOST_AFTER.total_seconds()),
    ),
)


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class FamilyFiles:
    """OpenMetrics wants each family's samples together: one temporary file per family,
    joined at the end, so the history never has to fit in memory."""

    def __init__(self, folder: Path) -> None:
        self.dir = folder
        self.dir.mkdir(parents=True)
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
        shutil.rmtree(self.dir)


def target_labels(job: str, port: int) -> str:
    """The labels Prometheus gives what it scrapes from ``127.0.0.1:port`` in ``job``."""
    return f'job="{job}",instance="127.0.0.1:{port}"'


def stamps(start: datetime, end: datetime, step: int) -> list[int]:
    """Scrape times every ``step`` s up to just before ``end`` (where live scraping takes
    over: the last is 1 s before it), back to the first at or before ``start``."""
    last = int(end.timestamp()) - 1
    first = int(start.timestamp())
    n = (last - first + step - 1) // step
    return [last - k * step for k in range(n, -1, -1)]


def simulated_node(spec_path: Path, clock: Clock, collect: int = 60) -> Built:
    """The exporter of one simulated node on ``clock``: ``gpu-exporter --simulate FILE
    --collect-interval 60s --pod-resources-timeout 5s`` (``collect`` s: its collection
    interval), built but not started."""
    argv = ["--simulate", str(spec_path), "--collect-interval", f"{collect}s"]
    settings = parse_settings([*argv, "--pod-resources-timeout", "5s"], {})
    return build(settings, clock=clock, monotonic=clock)


def spec_with_epoch(
    name: str, epoch: datetime, workdir: Path, started: datetime | None, prefix: str = "live"
) -> tuple[Path, list[tuple[datetime, str]]]:
    """A copy of the example spec ``name`` (``workdir``/``prefix``-``name``) whose curves and
    pods start at ``epoch``, with the :data:`INCIDENTS` of that node placed around ``started``
    (None: none); and those incidents (when, what)."""
    raw = yaml.safe_load((ROOT / "examples" / name).read_text())
    raw["epoch"] = epoch.isoformat()
    happened = []
    for incident in INCIDENTS if started is not None else ():
        if incident.node == name:
            assert started is not None
            entry = next(g for g in raw["gpus"] if g["model"] == incident.model)
            incident.change(entry, (started - epoch).total_seconds())
            happened.append((started + incident.after, incident.what))
    out = workdir / f"{prefix}-{name}"
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out, happened


def blocks(history: Path, out: Path, max_block: str = MAX_BLOCK) -> None:
    """``history`` (OpenMetrics) as TSDB blocks of ``max_block`` at most in ``out``; the
    input is removed."""
    subprocess.run(
        [
            "promtool",
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            f"--max-block-duration={max_block}",
            str(history),
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    history.unlink()


def record(
    folder: Path,
    times: list[int],
    labels: str,
    scrape: Callable[[int], str],
    max_block: str = MAX_BLOCK,
) -> tuple[Path, int]:
    """``scrape(t)`` at each of ``times`` (and ``up`` 1) with the target's ``labels``, as
    TSDB blocks (of ``max_block`` at most) in ``folder``/blocks; the number of samples."""
    return record_targets(folder, times, lambda stamp: [(scrape(stamp), labels)], max_block)


def record_targets(
    folder: Path,
    times: list[int],
    scrape: Callable[[int], list[tuple[str, str]]],
    max_block: str = MAX_BLOCK,
) -> tuple[Path, int]:
    """Several targets at once: ``scrape(t)`` gives (exposition, target labels) of each
    target that answers at ``t``; each with its ``up`` 1, as TSDB blocks in
    ``folder``/blocks; the number of samples."""
    families = FamilyFiles(folder / "families")
    for stamp in times:
        for body, labels in scrape(stamp):
            families.add(body, stamp, labels)
            families.add("# TYPE up gauge\nup 1", stamp, labels)
    history = folder / "history.om"
    families.write(history)
    blocks(history, folder / "blocks", max_block)
    return folder / "blocks", families.samples


def _node_worker(
    conn: Connection,
    spec: Path,
    folder: Path,
    labels: str,
    first: datetime,
    step: int,
    collect: int,
    max_block: str,
) -> None:
    """In a process of its own: build the node, wait for the end, record its scrapes."""
    logging.getLogger("exporter").setLevel(logging.ERROR)  # simulated XIDs are not news here
    try:
        clock = Clock(first.timestamp() - step)  # no later than the first scrape
        built = simulated_node(spec, clock, collect)
        exporter = built.exporter

        def scrape(stamp: int) -> str:
            clock.t = float(stamp)
            exporter.collect_once()
            return exporter.exposition.body("openmetrics").decode()

        try:
            end = conn.recv()
            conn.send(record(folder, stamps(first, end, step), labels, scrape, max_block))
        finally:
            exporter.close()
            built.stop()
    except BaseException as exc:  # the parent says what failed
        conn.send(exc)
    finally:
        conn.close()


class NodeHistories:
    """One forked process per node, started before the demo starts any thread; each builds
    its node at once, and records it from ``first`` once :meth:`record` says until when: a
    scrape every ``step`` s, its exporter collecting every ``collect`` s (default 60), into
    blocks of ``max_block`` at most."""

    def __init__(
        self,
        specs: list[Path],
        labels: list[str],
        workdir: Path,
        first: datetime,
        step: int,
        collect: int = 60,
        max_block: str = MAX_BLOCK,
    ) -> None:
        ctx = multiprocessing.get_context("fork")
        self.conns: list[Connection] = []
        self.procs = []
        for i, (spec, lab) in enumerate(zip(specs, labels, strict=True)):
            parent, child = ctx.Pipe()
            folder = workdir / f"node-{i}"
            folder.mkdir()
            proc = ctx.Process(
                target=_node_worker,
                args=(child, spec, folder, lab, first, step, collect, max_block),
                daemon=True,
            )
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)

    def record(self, end: datetime) -> None:
        for conn in self.conns:
            conn.send(end)

    def results(self) -> list[tuple[Path, int]]:
        out = []
        for conn, proc in zip(self.conns, self.procs, strict=True):
            answer = conn.recv()
            proc.join()
            if isinstance(answer, BaseException):
                raise RuntimeError(f"history of {proc.name}: {answer!r}") from answer
            out.append(answer)
        return out

    def stop(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
                proc.join()


def history_blocks(
    workdir: Path, first: datetime, end: datetime, step: int
) -> tuple[list[Path], int]:
    """The demo's nodes and kube-state-metrics scraped every ``step`` s from ``first`` until
    ``end``, as folders of TSDB blocks, and the number of samples (for the benches: the demo
    itself makes its history while its live parts start)."""
    from demo import cluster  # the nodes' history needs none of it
    from exporter.simulate.spec import load

    workdir.mkdir(parents=True, exist_ok=True)
    specs = [spec_with_epoch(name, first, workdir, end)[0] for name in NODES]
    ports = range(9400, 9400 + len(NODES))
    labels = [target_labels("gpu-exporter", p) for p in ports]
    histories = NodeHistories(specs, labels, workdir, first, step)
    try:
        histories.record(end)
        made = histories.results()
    finally:
        histories.stop()
    fleets = [load(p) for p in specs]
    t0 = first.timestamp()
    made.append(
        record(
            workdir / "kube-state-metrics",
            stamps(first, end, step),
            target_labels("kube-state-metrics", 9408),
            lambda stamp: cluster.scrape(fleets, stamp - t0),
        )
    )
    return [folder for folder, _ in made], sum(n for _, n in made)
