"""Each GPU's measured energy in one hour, from its energy counter or, without one, its power.

dcgm-exporter's ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` is the GPU's total energy since the
driver loaded, in mJ (NVML ``nvmlDeviceGetTotalEnergyConsumption``; DCGM field 156, "Total
energy consumption for the GPU in mJ since the driver was last reloaded"), emitted once per
physical GPU also in MIG mode; ``DCGM_FI_DEV_POWER_USAGE`` is its power draw in W. What the
numbers mean and how they are split: costsvc/energy.py and docs/cost-model.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from decimal import ROUND_HALF_EVEN, Decimal

from costsvc.energy import Measured, counter_energy, power_energy
from costsvc.ingest.integrate import Sample, covered, integral, interval, max_gap_for
from costsvc.ingest.prom import Series

ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
POWER = "DCGM_FI_DEV_POWER_USAGE"
GpuKey = tuple[str, str]  # (cluster, GPU UUID)


def _by_gpu(
    series: Iterable[Series], cluster_of: Callable[[dict[str, str]], str]
) -> dict[GpuKey, list[Sample]]:
    """Samples per GPU, the series of one GPU merged (a driver upgrade starts a new series)."""
    found: dict[GpuKey, dict[Decimal, Decimal]] = {}
    for s in series:
        if s.labels.get("GPU_I_ID"):  # device fields are per GPU, never per MIG instance
            continue
        found.setdefault((cluster_of(s.labels), s.labels.get("UUID", "")), {}).update(s.samples)
    return {key: sorted(by_time.items()) for key, by_time in found.items()}


def measured_energy(
    energy: Iterable[Series],
    power: Iterable[Series],
    t0: Decimal,
    t1: Decimal,
    cluster_of: Callable[[dict[str, str]], str],
    floor: Decimal,
    ceiling: Decimal,
) -> dict[GpuKey, tuple[Measured, int | None]]:
    """Per GPU: its energy over [t0, t1) and the lowest power it drew (mW; None: no power
    series). ``floor``/``ceiling`` bound the gap limit as for every series (hour.py)."""
    counters = _by_gpu(energy, cluster_of)
    watts = _by_gpu(power, cluster_of)
    out: dict[GpuKey, tuple[Measured, int | None]] = {}
    for key in sorted(set(counters) | set(watts)):
        samples = counters.get(key, [])
        p = watts.get(key, [])
        inside = [v for t, v in p if t0 <= t < t1]
        lowest = _mw(min(inside)) if inside else None
        gap = max_gap_for(samples, floor, ceiling)
        measured = counter_energy(samples, t0, t1, gap) if len(samples) > 1 else None
        unread = measured is None or (measured.seconds == 0 and measured.energy_mj == 0)
        if unread and p:  # no counter reading in the hour: ∫ power dt
            step = interval(p)
            p_gap = max_gap_for(p, floor, ceiling, step)
            measured = power_energy(integral(p, t0, t1, p_gap, step), covered(p, t0, t1, p_gap))
        if measured is not None:
            out[key] = (measured, lowest)
    return out


def _mw(watts: Decimal) -> int:
    return int((watts * 1000).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
