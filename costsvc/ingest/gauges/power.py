"""Each GPU's measured energy in one hour, from its energy counter or, without one, its power.

dcgm-exporter's ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` is a counter of the GPU's total energy
in mJ (its etc/default-counters.csv: "counter, Total energy consumption since boot (in mJ)";
DCGM's field table, DcgmFields.cpp: INT64, device scope, DCGM_FIELD_UNIT_MILLIJOULES, read from
NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION), so it restarts when the driver reloads; it is a device
field, emitted once per physical GPU also in MIG mode. ``DCGM_FI_DEV_POWER_USAGE`` is the
power draw in W. What the numbers mean and how they are split: costsvc/rules/energy.py and
docs/cost-model.md.

Under the gauges' rule the counter is read for every GPU (as its edge values where they tell:
costsvc/ingest/gauges/counted.py); under the integrals' it is read as a counter difference
(costsvc/ingest/integrals.py). Either way power's raw samples are read only when a GPU of the
hour has no counter reading (an older GPU, an exporter without the field), and the lowest
power of each GPU (the idle estimate where the cost model gives no ``idle_watts``) as one
``min_over_time`` value per series.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal

from costsvc.ingest.gauges import counted
from costsvc.ingest.gauges.counted import Counter
from costsvc.ingest.gauges.sampled import Sample, covered, integral, interval, max_gap_for
from costsvc.ingest.hour import MAX_GAP, SCRAPE_GAP, HourReads, us
from costsvc.ingest.prom import Series
from costsvc.kit.money import round_micro
from costsvc.rules.attribution import HourFacts
from costsvc.rules.energy import (
    ENERGY,
    NOTHING,
    Measured,
    counter_energy,
    counter_measured,
    power_energy,
)

POWER = "DCGM_FI_DEV_POWER_USAGE"
LOWEST_POWER = f"min_over_time({POWER}[3600s])"  # at the hour's last instant
GpuKey = tuple[str, str]  # (cluster, GPU UUID)
ClusterOf = Callable[[dict[str, str]], str]


def _device(labels: dict[str, str]) -> bool:
    return not labels.get("GPU_I_ID")  # device fields are per GPU, never per MIG instance


def _by_gpu(series: Iterable[Series], cluster_of: ClusterOf) -> dict[GpuKey, Sequence[Sample]]:
    """Samples per GPU, the series of one GPU merged (a driver upgrade starts a new series)."""
    found: dict[GpuKey, list[Sequence[Sample]]] = {}
    for s in series:
        if _device(s.labels):
            key = (cluster_of(s.labels), s.labels.get("UUID", ""))
            found.setdefault(key, []).append(s.samples)
    return {
        key: parts[0] if len(parts) == 1 else sorted({t: v for p in parts for t, v in p}.items())
        for key, parts in found.items()
    }


def counter_readings(
    energy: Iterable[Series],
    t0: Decimal,
    t1: Decimal,
    cluster_of: ClusterOf,
    floor: Decimal,
    ceiling: Decimal,
) -> dict[GpuKey, Measured]:
    """Per GPU with a counter reading in [t0, t1): its energy. ``floor``/``ceiling`` bound the
    gap limit as for every series (costsvc/ingest/gauges/exporter.py)."""
    out = {}
    by_gpu = _by_gpu(energy, cluster_of)
    counted.load((c for c in by_gpu.values() if isinstance(c, Counter)), t0, t1, floor, ceiling)
    for key, samples in by_gpu.items():
        if isinstance(samples, Counter):  # read as its edge values where they tell
            m = counter_measured(samples.increase(t0, t1, floor, ceiling))
        else:
            m = counter_energy(samples, t0, t1, max_gap_for(samples, floor, ceiling))
        if m.seconds or m.energy_mj:
            out[key] = m
    return out


def power_readings(
    power: Iterable[Series],
    t0: Decimal,
    t1: Decimal,
    cluster_of: ClusterOf,
    floor: Decimal,
    ceiling: Decimal,
) -> dict[GpuKey, Measured]:
    """Per GPU with power samples in [t0, t1): ∫ power dt (gaps unmeasured)."""
    out = {}
    for key, p in _by_gpu(power, cluster_of).items():
        step = interval(p)
        gap = max_gap_for(p, floor, ceiling, step)
        seconds = covered(p, t0, t1, gap)
        if seconds:
            out[key] = power_energy(integral(p, t0, t1, gap, step), seconds)
    return out


def lowest_power(
    answer: Iterable[tuple[dict[str, str], Decimal]], cluster_of: ClusterOf
) -> dict[GpuKey, int]:
    """Per GPU, the lowest power it drew (mW), from ``min_over_time`` values per series."""
    out: dict[GpuKey, int] = {}
    for labels, watts in answer:
        if _device(labels):
            key = (cluster_of(labels), labels.get("UUID", ""))
            mw = round_micro(watts * 1000)
            out[key] = min(out.get(key, mw), mw)
    return out


def add_energy(
    w: HourReads, facts: HourFacts, energy: dict[GpuKey, Measured] | None = None
) -> None:
    """Each GPU's measured energy in the hour : dcgm-exporter's
    series names, so both sources read it the same way; ``energy``: the counters' readings
    where the caller has them (costsvc/ingest/integrals.py), else read here."""
    limits = (w.t0, w.t1, w.cluster_of, SCRAPE_GAP, MAX_GAP)
    if energy is None:
        energy = counter_readings(w.raw(ENERGY, MAX_GAP), *limits)
    if any(g.key not in energy for g in facts.gpus):  # a GPU without a counter reading
        energy = {**power_readings(w.raw(POWER, MAX_GAP), *limits), **energy}
    lowest = lowest_power(w.prom.instant(LOWEST_POWER, w.at), w.cluster_of)
    for i, g in enumerate(facts.gpus):
        m = energy.get(g.key)
        low = lowest.get(g.key)
        if m is not None or low is not None:
            m = m or NOTHING
            facts.gpus[i] = dataclasses.replace(
                g,
                energy_mj=m.energy_mj,
                gap_mj=m.gap_mj,
                energy_seconds=us(m.seconds),
                min_power_mw=low,
            )
