"""What our exporter publishes beside a fleet's gauges: their integrals (exporter/integrals.py,
docs/metrics.md "Integrals at collection resolution"), for a fleet of bench/fleet.py collected
at each scrape.

Per GPU ``gpu_device_seconds_total`` (up and down); per holding (each ``gpu_allocation_share``
series, same labels) the share-seconds (with the ``share`` they integrate), the busy share-seconds
(share x the held unit's utilisation: ``DCGM_FI_DEV_GPU_UTIL`` / 100 of the GPU,
``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` of a MIG instance) and, from the first collection that read no
utilisation of the held unit on (none for a holding always measured), the unmeasured
share-seconds; per container ``gpu_container_sm_seconds_total``. By the exporter's rule: a
reading holds until the next collection (here each scrape of the fleet), a container's SM use
covers the interval just ended, an ended series stays at its final total for ``KEEP`` seconds (then
a staleness marker), and every series tells when its total started at 0 (its ``started`` label).
The fleet publishes no memory share, so neither are its integrals. Each counter's values are its
own (no chunk is shared with another series'): they are computed (``Spec.array``) and encoded
(bench/tsdb_block.py ``xor_chunks``) with numpy, many series at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import numpy as np

from bench.series import Grid, Spec, _const, _labels
from exporter.integrals import KEEP, SHARE_LABEL, STARTED
from exporter.render.exposition import format_value


class _Running:
    """A running total over grid indices ``first`` ... (``until`` - 1) of ``rates(lo, hi)`` x
    the step, as the value at index ``k`` of the total after collection ``k`` (``behind``: the
    rate of collection ``k`` is added at ``k``; else at ``k`` + 1), summed in time order as the
    exporter sums it. ``array(lo, hi)``: the values at indices ``lo..hi``, at once."""

    def __init__(
        self,
        grid: Grid,
        first: int,
        until: int,
        rates: Callable[[int, int], np.ndarray],
        behind: bool,
    ) -> None:
        self.grid, self.first, self.until, self.rates = grid, first, until, rates
        self.shift = 1 if behind else 0

    def array(self, lo: int, hi: int) -> np.ndarray:
        end = min(hi + self.shift, self.until)
        step = self.rates(self.first, end - 1) * self.grid.step_ms / 1000
        totals = np.concatenate(([0.0], np.cumsum(step)))
        at = np.minimum(np.arange(lo, hi + 1) + self.shift, self.until) - self.first
        found: np.ndarray = totals[np.maximum(at, 0)]
        return found

    def __call__(self, t: int) -> float:
        k = self.grid.index(t)
        return float(self.array(k, k)[0])


def _own(c: int) -> None:
    """No chunk key: no other series has these values (bench/tsdb_block.py encodes them with
    ``Spec.array``)."""
    return None


def _within(unit: Spec | None, lo: int, hi: int) -> np.ndarray:
    """Whether ``unit`` (a utilisation series) has a sample at each index ``lo..hi``."""
    k = np.arange(lo, hi + 1)
    if unit is None:
        return np.zeros(len(k), dtype=bool)
    found: np.ndarray = (k >= unit.first) & (k <= unit.last)
    return found


def integrals(specs: list[Spec], grid: Grid) -> Iterator[Spec]:
    """The counters of the fleet ``specs`` (its gauges) over ``grid``."""
    n = grid.n
    keep = int(KEEP * 1000) // grid.step_ms  # scrapes an ended series stays published

    def since(k: int) -> dict[str, str]:
        """The label of a series whose total started at 0 at index ``k``."""
        return {STARTED: f"{grid.time(k) / 1000:.3f}"}

    utilisation: dict[tuple[str, str], Spec] = {}  # (UUID, GPU_I_ID) -> its utilisation
    for s in specs:
        lab = dict(s.labels)
        if s.name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"):
            utilisation[(lab["UUID"], lab.get("GPU_I_ID", ""))] = s
    for s in specs:
        lab = dict(s.labels)
        lab.pop("__name__")
        if s.name == "gpu_device_up":
            up = _labels("gpu_device_seconds_total", {**lab, "state": "up", **since(0)})
            yield Spec(up, 0, n - 1, lambda t: (t - grid.start_ms) / 1000, lambda c: ("up_s", c))
            down = {**lab, "state": "down", **since(0)}
            yield _const(grid, "gpu_device_seconds_total", down, 0.0)
        elif s.name == "gpu_allocation_share":
            share = s.value(grid.time(s.first))
            last = min(s.last + keep, n - 1)
            stale = last < n - 1
            until = s.last + 1

            def held(lo: int, hi: int, share: float = share) -> np.ndarray:
                return np.full(hi - lo + 1, share)

            unit = utilisation.get((lab["UUID"], lab.get("GPU_I_ID", "")))
            percent = unit is not None and unit.name == "DCGM_FI_DEV_GPU_UTIL"

            def busy(
                lo: int, hi: int, unit: Spec | None = unit, share: float = share, p: bool = percent
            ) -> np.ndarray:
                inside = _within(unit, lo, hi)
                if unit is None or unit.array is None or not inside.any():
                    return np.zeros(len(inside))
                a, b = max(lo, unit.first), min(hi, unit.last)
                u = np.zeros(len(inside))
                u[a - lo : b - lo + 1] = unit.array(a, b)
                return np.where(inside, share * np.minimum(u / 100 if p else u, 1.0), 0.0)

            def unmeasured(
                lo: int, hi: int, unit: Spec | None = unit, share: float = share
            ) -> np.ndarray:
                return np.where(_within(unit, lo, hi), 0.0, share)

            # the unmeasured share-seconds: from the first collection that read no utilisation
            # (none: no series)
            unread = np.flatnonzero(~_within(unit, s.first, until - 1))
            families = [
                (
                    "gpu_allocation_share_seconds_total",
                    held,
                    s.first,
                    {SHARE_LABEL: format_value(share)},
                ),
                ("gpu_allocation_busy_share_seconds_total", busy, s.first, {}),
            ]
            if len(unread):
                first = s.first + int(unread[0])
                families.append(
                    ("gpu_allocation_unmeasured_share_seconds_total", unmeasured, first, {})
                )
            for name, rate, first, extra in families:
                running = _Running(grid, first, until, rate, behind=False)
                yield replace(
                    s,
                    first=first,
                    labels=_labels(name, {**lab, **extra, **since(first)}),
                    last=last,
                    value=running,
                    key=_own,
                    stale=stale,
                    array=running.array,
                )
        elif s.name == "gpu_container_sm_utilization_ratio":
            if s.array is None:
                raise ValueError(f"{s.labels}: an SM series without its values at once")
            running = _Running(grid, s.first, s.last + 1, s.array, behind=True)
            last = min(s.last + keep, n - 1)
            yield replace(
                s,
                labels=_labels("gpu_container_sm_seconds_total", {**lab, **since(s.first)}),
                last=last,
                value=running,
                key=_own,
                stale=last < n - 1,
                array=running.array,
            )
