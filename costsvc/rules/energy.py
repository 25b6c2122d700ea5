"""Energy and carbon of a GPU-hour, split as exactly as its cost. Pure: no I/O.

Units are integers: energy in **millijoules** (mJ, the unit of dcgm-exporter's
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` counter; 1 kWh = 3.6e9 mJ), carbon in **milligrams of
CO2e** (mg). docs/cost-model.md ("Energy and carbon") has the model and a worked example:

- **The GPU's energy E** in an hour is the increase of its energy counter over the hour
  (:func:`counter_energy`). A pair of consecutive samples whose counter went down is a reset
  (a driver reload, a GPU reset): the pair counts the counter's new value, as Prometheus'
  ``increase()`` does. Energy between samples further apart than the series' gap limit is
  still measured (the counter kept counting), but nobody's holding is known then: it is
  **gap energy**, idle. Without a counter (a GPU that does not report total energy) E is
  ∫ power dt over the samples of ``DCGM_FI_DEV_POWER_USAGE`` (:func:`power_energy`), gaps
  unmeasured.
- **The idle part** is the GPU's idle power x the measured time (capped at E): the idle
  power of the cost model's price entry (``idle_watts``), else the lowest power the GPU drew
  that hour. It is shared by allocation, like cost: a holder gets idle x its ∫ share dt / the
  measured time; what nobody held is idle energy.
- **The active part** (E - idle part - gap energy) is shared by measured activity: a MIG
  instance's or a whole GPU's holder by ∫ share x utilisation dt, a time-slice / MPS replica by
  its container's SM time. When some holder's activity is unknown, or nobody was active, the
  active part is shared like the idle part (by allocation).
- **Carbon** of the GPU-hour = E x PUE x the grid intensity in force (gCO2e/kWh), rounded to the
  milligram once per GPU, then split in proportion to the energy parts.

Every split is largest-remainder (:func:`costsvc.kit.money.split`), so per GPU and hour
Σ attributed + idle = E and Σ attributed + idle carbon = the GPU's carbon, exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from sqlalchemy import Numeric, String, cast, func

from costsvc.ingest.gauges.sampled import Increase, increase
from costsvc.kit.money import round_micro, split

# the GPU's energy counter (mJ; dcgm-exporter's name, our exporter's too): both rules read it
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"

MJ_PER_KWH = 3_600_000_000
MJ_PER_WATT_SECOND = 1000
UG_PER_MG = 1000
KWH_PLACES = Decimal("1e-9")

Sample = tuple[Decimal, Decimal]  # (unix seconds, value)


@dataclass(frozen=True, slots=True)
class Measured:
    """A GPU's energy in one hour, as measured."""

    energy_mj: int  # E: everything the GPU drew in the hour (gap energy included)
    gap_mj: int  # the part drawn during scrape gaps: nobody's holding is known then
    seconds: Decimal  # the time the reading covers outside gaps


NOTHING = Measured(0, 0, Decimal(0))


def counter_energy(
    samples: Sequence[Sample], start: Decimal, end: Decimal, max_gap: Decimal
) -> Measured:
    """The increase of an energy counter (mJ) over [start, end), by the counter rule of
    :func:`costsvc.ingest.gauges.sampled.increase` (resets and scrape gaps), rounded to the mJ."""
    return counter_measured(increase(samples, start, end, max_gap))


def counter_measured(found: Increase) -> Measured:
    """An energy counter's increase (mJ) as measured energy, rounded to the mJ."""
    total = round_micro(found.total)
    return Measured(total, min(total, round_micro(found.gap)), found.seconds)


def power_energy(power_integral_ws: Decimal, seconds: Decimal) -> Measured:
    """Energy from ∫ power dt (watt-seconds) where there is no counter; gaps unmeasured."""
    return Measured(round_micro(power_integral_ws * MJ_PER_WATT_SECOND), 0, seconds)


def idle_baseline(measured: Measured, idle_watts: Decimal | None) -> int:
    """The idle part of a GPU's energy: idle power x measured time, at most what it drew
    outside gaps."""
    if idle_watts is None or idle_watts <= 0:
        return 0
    known = measured.energy_mj - measured.gap_mj
    return max(0, min(known, round_micro(idle_watts * MJ_PER_WATT_SECOND * measured.seconds)))


@dataclass(slots=True, unsafe_hash=True)  # (not frozen: built per holding and hour, as Holding)
class Draw:
    """A holder's claim on one GPU's energy in one hour."""

    allocation: Decimal  # ∫ share dt, GPU-seconds of the physical GPU
    activity: Decimal | None  # measured activity (GPU-seconds busy); None: unknown


@dataclass(frozen=True, slots=True)
class EnergySplit:
    parts: list[int]  # mJ per draw, in order
    idle: int  # mJ nobody is charged for: unheld idle part, gap energy


def split_energy(measured: Measured, idle_mj: int, draws: Sequence[Draw]) -> EnergySplit:
    """The GPU's energy E split over its holders' draws and idle; Σ parts + idle = E."""
    known = measured.energy_mj - measured.gap_mj
    idle_mj = max(0, min(idle_mj, known))
    active = known - idle_mj
    alloc = [d.allocation for d in draws]
    unheld = max(Decimal(0), measured.seconds - sum(alloc, Decimal(0)))
    # the idle part by allocation: a holder's ∫ share dt, and the unheld time
    *by_alloc, idle_left = split(idle_mj, [*alloc, unheld]) if draws or idle_mj else [0]
    activity = [d.activity for d in draws]
    if draws and all(a is not None for a in activity) and sum(a or 0 for a in activity) > 0:
        by_activity, active_left = split(active, [a or Decimal(0) for a in activity]), 0
    elif draws:  # unknown or no activity: the active part is shared like the idle part
        *by_activity, active_left = split(active, [*alloc, unheld])
    else:
        by_activity, active_left = [], active
    parts = [a + b for a, b in zip(by_alloc, by_activity, strict=True)]
    result = EnergySplit(parts, idle_left + active_left + measured.gap_mj)
    assert sum(parts) + result.idle == measured.energy_mj
    return result


def carbon_mg(energy_mj: int, ug_per_kwh: int) -> int:
    """CO2e (mg) of ``energy_mj`` at ``ug_per_kwh`` (grid intensity x PUE, micro-grams per
    kWh: costsvc.rules.cost_model.Carbon), rounded half to even, once per GPU-hour."""
    return round_micro(Decimal(energy_mj) * ug_per_kwh / (UG_PER_MG * MJ_PER_KWH))


def split_by_energy(total: int, energy_parts: Sequence[int]) -> list[int]:
    """An amount (a GPU's carbon, or the price of its measured energy) split in proportion
    to its energy parts (attributed ..., idle)."""
    if total == 0:
        return [0] * len(energy_parts)
    return split(total, energy_parts)


def split_carbon(total_mg: int, energy_parts: Sequence[int]) -> list[int]:
    """A GPU's carbon split in proportion to its energy parts (attributed ..., idle)."""
    if total_mg == 0:
        return [0] * len(energy_parts)
    return split(total_mg, energy_parts)


def kwh(energy_mj: int) -> str:
    """Millijoules as kWh text with 9 places, ties away from zero — byte for byte what
    :func:`kwh_sql` gives in PostgreSQL (the CSV's COPY path): 1_440_000_000 -> '0.400000000'."""
    value = (Decimal(energy_mj) / MJ_PER_KWH).quantize(KWH_PLACES, ROUND_HALF_UP)
    return f"{abs(value) if value.is_zero() else value:f}"


def kwh_sql(column: Any) -> Any:
    """:func:`kwh` as a SQL expression over an integer mJ column (PostgreSQL)."""
    return cast(func.round(cast(column, Numeric(38, 0)) / MJ_PER_KWH, 9), String)
