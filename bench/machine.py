"""The machine a bench runs on, as its report names it (one home for every bench): the CPU's
model, a process's /proc status fields (RSS, peak RSS), and a fixed pure-Python loop's time —
the machines of different sessions differ and drift by 1.5x and more, so a report carries the
figure that tells how fast its machine was."""

from __future__ import annotations

import os
import statistics
import sys
import time
from decimal import Decimal


def cpu_model(fallback: str = "unknown") -> str:
    """The CPU's model name (/proc/cpuinfo), ``fallback`` where it names none."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return fallback


def status_kib(pid: int | str, field: str) -> int:
    """A /proc/<pid>/status field in KiB (``VmRSS``, ``VmHWM``: the peak of the process's own
    address space, new at exec); ``pid`` "self" for this process; 0 where it has none."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reference_seconds() -> float:
    """Seconds a fixed pure-Python loop (Decimal sums and dict stores, the service's kind of
    work) takes on one core, median of three (0.34 s on the AMD EPYC machine of 2026-11-27)."""
    runs = []
    for _ in range(3):
        t = time.perf_counter()
        store: dict[int, int] = {}
        total = Decimal(0)
        for i in range(2_000_000):
            store[i & 1023] = i
            total += Decimal(i & 255)
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def machine_line(reference: float | None = None) -> str:
    """The machine as the rollup benches' reports name it: CPU, cores, Python, the reference
    loop (``reference``: its seconds where the bench timed it already)."""
    seconds = reference_seconds() if reference is None else reference
    return (
        f"machine: {cpu_model()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
        f"reference loop {seconds:.2f} s (bench/machine.py)"
    )
