"""What our exporter publishes beside a fleet's gauges: their integrals (exporter/integrals.py,
docs/metrics.md "Integrals at collection resolution"), for a fleet of bench/fleet.py collected
at each scrape.

Per GPU ``gpu_device_seconds_total`` (up and down); per holding (each ``gpu_allocation_share``
series, same labels) the share-seconds, and the busy and measured share-seconds (share x the
held unit's utilisation: ``DCGM_FI_DEV_GPU_UTIL`` / 100 of the GPU,
``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` of a MIG instance); per container
``gpu_container_sm_seconds_total``. By the exporter's rule: a reading holds until the next
collection (here each scrape of the fleet), a container's SM use covers the interval just
ended, an ended series stays at its final total for ``KEEP`` seconds (then a staleness
marker). The fleet publishes no memory share, so neither are its integrals. Each counter's
values are its own (no chunk is shared with another series'): writing them costs a Python loop
per sample.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from bench.fleet import Grid, Spec, _const, _labels
from exporter.integrals import KEEP


class _Running:
    """A running total over grid indices ``first`` ... (``until`` - 1) of ``rate(k) x 60``,
    as the value at index ``k`` of the total after collection ``k`` (``behind``: the rate of
    collection ``k`` is added at ``k``; else at ``k`` + 1). Read in time order (as the block
    writer reads a series), each value costs one step; read back, it starts again."""

    def __init__(
        self, grid: Grid, first: int, until: int, rate: Callable[[int], float], behind: bool
    ) -> None:
        self.grid, self.first, self.until, self.rate = grid, first, until, rate
        self.shift = 1 if behind else 0
        self.k, self.total = first, 0.0

    def __call__(self, t: int) -> float:
        end = min(self.grid.index(t) + self.shift, self.until)
        if end < self.k:
            self.k, self.total = self.first, 0.0
        while self.k < end:
            self.total += self.rate(self.k) * self.grid.step_ms / 1000
            self.k += 1
        return self.total


def _own(running: _Running) -> Callable[[int], object]:
    """A chunk key no other series has (bench/tsdb_block.py shares chunks by key)."""
    return lambda c: ("integral", id(running), c)


def integrals(specs: list[Spec], grid: Grid) -> Iterator[Spec]:
    """The counters of the fleet ``specs`` (its gauges) over ``grid``."""
    n = grid.n
    keep = int(KEEP * 1000) // grid.step_ms  # scrapes an ended series stays published
    utilisation: dict[tuple[str, str], Spec] = {}  # (UUID, GPU_I_ID) -> its utilisation
    for s in specs:
        lab = dict(s.labels)
        if s.name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"):
            utilisation[(lab["UUID"], lab.get("GPU_I_ID", ""))] = s
    for s in specs:
        lab = dict(s.labels)
        lab.pop("__name__")
        if s.name == "gpu_device_up":
            up = _labels("gpu_device_seconds_total", {**lab, "state": "up"})
            yield Spec(up, 0, n - 1, lambda t: (t - grid.start_ms) / 1000, lambda c: ("up_s", c))
            yield _const(grid, "gpu_device_seconds_total", {**lab, "state": "down"}, 0.0)
        elif s.name == "gpu_allocation_share":
            share = s.value(grid.time(s.first))
            last = min(s.last + keep, n - 1)
            stale = last < n - 1
            until = s.last + 1

            def held(k: int, share: float = share) -> float:
                return share

            unit = utilisation.get((lab["UUID"], lab.get("GPU_I_ID", "")))
            percent = unit is not None and unit.name == "DCGM_FI_DEV_GPU_UTIL"

            def busy(
                k: int, unit: Spec | None = unit, share: float = share, percent: bool = percent
            ) -> float:
                if unit is None or not unit.first <= k <= unit.last:
                    return 0.0
                u = unit.value(grid.time(k))
                return share * min(u / 100 if percent else u, 1.0)

            def measured(k: int, unit: Spec | None = unit, share: float = share) -> float:
                return share if unit is not None and unit.first <= k <= unit.last else 0.0

            for name, rate in (
                ("gpu_allocation_share_seconds_total", held),
                ("gpu_allocation_busy_share_seconds_total", busy),
                ("gpu_allocation_measured_share_seconds_total", measured),
            ):
                running = _Running(grid, s.first, until, rate, behind=False)
                yield replace(
                    s,
                    labels=_labels(name, lab),
                    last=last,
                    value=running,
                    key=_own(running),
                    stale=stale,
                )
        elif s.name == "gpu_container_sm_utilization_ratio":
            gauge = s

            def used(k: int, gauge: Spec = gauge) -> float:
                return gauge.value(grid.time(k))

            running = _Running(grid, s.first, s.last + 1, used, behind=True)
            last = min(s.last + keep, n - 1)
            yield replace(
                s,
                labels=_labels("gpu_container_sm_seconds_total", lab),
                last=last,
                value=running,
                key=_own(running),
                stale=last < n - 1,
            )
