"""GPU rightsizing: the smallest GPU option a workload fits, and what it saves. Pure.

Input, per workload and GPU model, over a look-back window (:class:`Evidence`): the
device-hours it held (the confidence), the GPU-hours those devices were (its share of physical
GPUs), p95 and peak GPU memory used per device, p95 activity per device as a share of the whole
GPU, and the share of held time it was idle. Output (:class:`Advice`): one action —

- ``release``: idle at least ``release_idle_ratio`` of the time it held GPUs;
- ``mig``: the smallest MIG profile of the same GPU model (costsvc/rules/mig.py) whose memory
  holds the peak plus ``memory_headroom`` and whose compute share holds p95 activity plus
  ``activity_headroom``;
- ``timeslice``: a 1/k share of a time-sliced GPU of the same model (k in ``timeslice_ways``),
  where its 1/k of memory and of compute hold the same;
- ``model``: a whole GPU of a cheaper model present in the fleet and priced by the cost model,
  whose memory holds the peak, and only for p95 activity (plus headroom) at most
  ``cheaper_model_max_activity`` of a GPU (we cannot know how much slower it is);
- ``keep``: nothing smaller fits; ``insufficient``: too few hours or missing series —
  never a recommendation without the data for it.

The cheapest fitting option wins (ties: MIG, then time-slice, then model). Money: the cost of
a device-hour of each option at the cost model's price per GPU-hour (a MIG profile is its
compute or memory slices, as the cost model's ``mig_share_basis`` bills it; a 1/k time slice
1/k), so the monthly saving = (current - option) cost per device-hour x device-hours per
month, device-hours per month = device-hours in the window x 730 / window hours. Integer
micro-units, rounded half to even once at the end.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

from costsvc.kit.money import round_micro
from costsvc.rules.cost_model import HOURS_PER_MONTH
from costsvc.rules.mig import Geometry, billed_share, known_geometry
from kube.mig_profiles import MigProfile, mig_table

Action = Literal["release", "mig", "timeslice", "model", "replicas", "keep", "insufficient"]
ACTIONABLE = ("release", "mig", "timeslice", "model", "replicas")


@dataclass(frozen=True, slots=True)
class Evidence:
    """One workload on one GPU model over the window."""

    gpu_model: str
    device_hours: Decimal  # Σ devices held x time: the hours observed
    gpu_hours: Decimal  # Σ share of physical GPUs held x time
    memory_p95_bytes: int | None  # per device
    memory_peak_bytes: int | None
    activity_p95: Decimal | None  # per device, as a share of a whole GPU (0-1)
    activity_source: str  # "profiling" (DCGM_FI_PROF_GR_ENGINE_ACTIVE), "utilisation", ...
    idle_ratio: Decimal | None  # share of the held time with activity below the idle line


@dataclass(frozen=True, slots=True)
class Fleet:
    """What the options may be: price per GPU-hour (micro-units) and memory per GPU (bytes)
    of each GPU model present in the fleet, and the MIG geometry its exporters published
    (``gpu_compute_slices``/``gpu_memory_slices``) per GPU model."""

    prices: Mapping[str, int]
    memory_bytes: Mapping[str, int]
    mig_share_basis: Literal["compute", "memory"] = "compute"
    mig_geometry: Mapping[str, Geometry] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Rules:
    min_hours: Decimal = Decimal(24)
    memory_headroom: Decimal = Decimal("0.10")
    activity_headroom: Decimal = Decimal("0.15")
    release_idle_ratio: Decimal = Decimal("0.80")
    idle_activity: Decimal = Decimal("0.05")  # below this a sample counts as idle
    timeslice_ways: tuple[int, ...] = (2, 4)
    cheaper_model_max_activity: Decimal = Decimal("0.50")


@dataclass(frozen=True, slots=True)
class Advice:
    action: Action
    target: str  # a MIG profile, "1/4", a GPU model; "" for release, keep, insufficient
    reason: str
    current_share: Decimal  # share of a physical GPU per device held now
    target_share: Decimal  # ... with the option (of the target model for ``model``)
    current_monthly: int  # micro-units per month at the current use
    recommended_monthly: int
    saving_monthly: int


@dataclass(frozen=True, slots=True)
class _Money:
    """What the workload costs now: its ``share`` of a GPU, ``rate`` micro-units per unit of
    use, ``units`` units a month (device-hours; 1 where the rate is already monthly)."""

    share: Decimal
    rate: Decimal
    units: Decimal

    def advice(
        self, action: Action, target: str, new_share: Decimal, rate: Decimal, why: str
    ) -> Advice:
        """The option at ``rate``: current, recommended and saving a month, each rounded
        half to even once."""
        now, then, units = self.rate, rate, self.units
        return Advice(
            action,
            target,
            why,
            self.share,
            new_share,
            round_micro(now * units),
            round_micro(then * units),
            round_micro((now - then) * units),
        )

    def unchanged(self, action: Action, why: str) -> Advice:
        return self.advice(action, "", self.share, self.rate, why)


@dataclass(frozen=True, slots=True)
class _Need:
    """What an option must hold: the peak memory and p95 activity, each plus its headroom."""

    peak_bytes: int
    activity_p95: Decimal
    memory: Decimal
    activity: Decimal

    def fits(self, memory_bytes: Decimal | int, compute: Decimal) -> bool:
        return memory_bytes >= self.memory and compute >= self.activity

    @property
    def why(self) -> str:
        return f"peak {_gib(self.peak_bytes)} and p95 activity {self.activity_p95:.0%} fit"


Candidate = tuple[Decimal, int, Advice]  # (cost per device-hour, rank among ties, the advice)


def mig_profiles(gpu_model: str, fleet: Fleet) -> Iterator[tuple[MigProfile, Decimal, Decimal]]:
    """The MIG profiles of ``gpu_model`` (kube/mig_profiles.py), smallest first, each with its
    compute share of the GPU and the share it is billed for on the cost model's basis — both
    by the GPU's geometry (costsvc/rules/mig.py: the published one first)."""
    table = mig_table(gpu_model)
    if table is None:
        return
    gpu = known_geometry(gpu_model, fleet.mig_geometry.get(gpu_model))
    for p in table.profiles:
        compute = billed_share(p.compute_slices, p.memory_slices, gpu, "compute")
        billed = billed_share(p.compute_slices, p.memory_slices, gpu, fleet.mig_share_basis)
        yield p, compute, billed


def advise(ev: Evidence, fleet: Fleet, rules: Rules, window_hours: Decimal) -> Advice:
    """The cheapest option ``ev`` fits (module docstring), or why there is none."""
    price = fleet.prices.get(ev.gpu_model)
    share = ev.gpu_hours / ev.device_hours if ev.device_hours > 0 else Decimal(0)
    monthly_hours = (
        ev.device_hours * HOURS_PER_MONTH / window_hours if window_hours > 0 else Decimal(0)
    )
    money = _Money(share, share * (price or 0), monthly_hours)  # micro-units per device-hour
    lacking = _lacking(ev, rules, price)
    if lacking:
        return money.unchanged("insufficient", lacking)
    assert price is not None
    assert ev.memory_peak_bytes is not None
    assert ev.activity_p95 is not None
    assert ev.idle_ratio is not None
    if ev.idle_ratio >= rules.release_idle_ratio:
        why = f"idle {ev.idle_ratio:.0%} of the time held"
        return money.advice("release", "", Decimal(0), Decimal(0), why)
    need = _Need(
        ev.memory_peak_bytes,
        ev.activity_p95,
        Decimal(ev.memory_peak_bytes) * (1 + rules.memory_headroom),
        ev.activity_p95 * (1 + rules.activity_headroom),
    )
    candidates = [
        *_mig_options(ev.gpu_model, fleet, price, need, money),
        *_timeslice_options(ev.gpu_model, fleet, rules, price, need, money),
        *_model_options(ev.gpu_model, fleet, rules, need, money),
    ]
    if not candidates:
        why = f"peak {_gib(need.peak_bytes)}, p95 activity {need.activity_p95:.0%}: "
        return money.unchanged("keep", why + "no smaller option fits")
    return min(candidates, key=lambda c: (c[0], c[1]))[2]


def _lacking(ev: Evidence, rules: Rules, price: int | None) -> str:
    """Why the evidence cannot carry a recommendation ("" when it can)."""
    if ev.device_hours < rules.min_hours:
        return f"{ev.device_hours:.1f} h of data, {rules.min_hours} h needed"
    if price is None:
        return f"the cost model has no price for {ev.gpu_model}"
    missing = [
        name
        for name, value in (
            ("GPU memory", ev.memory_peak_bytes),
            ("activity", ev.activity_p95),
            ("idle time", ev.idle_ratio),
        )
        if value is None
    ]
    return "no series for " + ", ".join(missing) if missing else ""


def _mig_options(
    gpu_model: str, fleet: Fleet, price: int, need: _Need, money: _Money
) -> list[Candidate]:
    """Every MIG profile of the same model that holds the need and is billed less."""
    out: list[Candidate] = []
    for p, compute, billed in mig_profiles(gpu_model, fleet):
        if need.fits(p.memory_bytes, compute) and billed < money.share:
            rate = billed * price
            out.append((rate, 0, money.advice("mig", p.name, billed, rate, f"{need.why} {p.name}")))
    return out


def _timeslice_options(
    gpu_model: str, fleet: Fleet, rules: Rules, price: int, need: _Need, money: _Money
) -> list[Candidate]:
    """The thinnest time slice of a GPU of the same model that holds the need."""
    capacity = fleet.memory_bytes.get(gpu_model)
    if not capacity:
        return []
    for k in sorted(rules.timeslice_ways, reverse=True):
        part = Decimal(1) / k
        if need.fits(Decimal(capacity) * part, part) and part < money.share:
            why = f"{need.why} 1/{k} of a GPU"
            return [(part * price, 1, money.advice("timeslice", f"1/{k}", part, part * price, why))]
    return []


def _model_options(
    gpu_model: str, fleet: Fleet, rules: Rules, need: _Need, money: _Money
) -> list[Candidate]:
    """Whole GPUs of cheaper models whose memory holds the need (light activity only)."""
    if need.activity > rules.cheaper_model_max_activity:
        return []
    out: list[Candidate] = []
    for other, other_price in sorted(fleet.prices.items()):
        other_memory = fleet.memory_bytes.get(other)
        rate = Decimal(other_price)
        if other == gpu_model or not other_memory or rate >= money.rate:
            continue
        if Decimal(other_memory) >= need.memory:
            why = f"peak {_gib(need.peak_bytes)} fits a whole {other}"
            out.append((rate, 2, money.advice("model", other, Decimal(1), rate, why)))
    return out


def _gib(n: int) -> str:
    return f"{Decimal(n) / (1 << 30):.1f} GiB"


# -- served models (docs/inference.md) -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Serving:
    """One served model of a namespace on one GPU model over the window, from the hours its
    pods served it (inference_hours with the pods' chargeback)."""

    model_name: str  # the served model (vLLM/SGLang model_name)
    gpu_model: str
    hours: Decimal  # hours in which it was served
    pod_hours: Decimal  # Σ serving pods per hour: replicas = pod_hours / hours
    gpu_hours: Decimal  # Σ GPU-hours its pods held
    busy_gpu_hours: Decimal | None  # Σ GPU-hours x used / allocated; None: not measured
    tokens: int  # input + output tokens served
    peak_tokens: int  # the busiest hour's tokens
    memory_peak_bytes: int | None  # the most GPU memory a pod of it used (None: unknown)


def advise_serving(ev: Serving, fleet: Fleet, rules: Rules, window_hours: Decimal) -> Advice:
    """Fewer replicas, or a smaller MIG profile, for a served model whose tokens would fit.

    Its throughput is what its GPUs served while busy: ``tokens / busy_gpu_hours`` tokens per
    fully busy GPU-hour. At its busiest hour, plus ``activity_headroom``, it needs
    ``peak_tokens x (1 + headroom) / throughput`` GPUs' worth. Each replica holds
    ``gpu_hours / pod_hours`` of a GPU. ``replicas``: the fewest replicas of that size that
    hold the need (at least one); ``mig``: as many replicas as that, each on the smallest
    MIG profile of the GPU model whose compute share holds its part of the need and whose
    memory holds the pods' peak plus ``memory_headroom`` (none without the memory figure).
    A model that served no token at all held its GPUs for nothing: ``release``. The
    cheapest option wins; money as :func:`advise` counts it (monthly = the window's
    GPU-hours x 730 / window hours)."""
    price = fleet.prices.get(ev.gpu_model)
    replicas = ev.pod_hours / ev.hours if ev.hours > 0 else Decimal(0)
    share = ev.gpu_hours / ev.pod_hours if ev.pod_hours > 0 else Decimal(0)
    per_month = HOURS_PER_MONTH / window_hours if window_hours > 0 else Decimal(0)
    money = _Money(share, ev.gpu_hours * (price or 0) * per_month, Decimal(1))  # a month
    if ev.hours < rules.min_hours:
        return money.unchanged(
            "insufficient", f"{ev.hours:.1f} h of data, {rules.min_hours} h needed"
        )
    if price is None:
        return money.unchanged("insufficient", f"the cost model has no price for {ev.gpu_model}")
    if ev.tokens == 0:
        return money.advice("release", "", Decimal(0), Decimal(0), "served no token in the window")
    if not ev.busy_gpu_hours:
        return money.unchanged("insufficient", "no utilisation series: its throughput is unknown")
    throughput = ev.tokens / ev.busy_gpu_hours  # tokens per fully busy GPU-hour
    need = ev.peak_tokens * (1 + rules.activity_headroom) / throughput  # GPUs at the peak
    hours_served = ev.hours * per_month  # serving hours a month
    now = math.ceil(replicas)
    fewer = max(1, math.ceil(need / share)) if share > 0 else now
    rate = f"{throughput:.0f} tokens per busy GPU-hour, peak {ev.peak_tokens} tokens/h"
    candidates: list[Candidate] = []
    if fewer < now:
        monthly = fewer * share * price * hours_served
        why = f"{rate}: {fewer} of {now} replicas hold it"
        candidates.append(
            (monthly, 0, money.advice("replicas", f"{fewer} replicas", share, monthly, why))
        )
    k = min(fewer, now)
    if ev.memory_peak_bytes is not None and k > 0:
        need_memory = Decimal(ev.memory_peak_bytes) * (1 + rules.memory_headroom)
        for p, compute, billed in mig_profiles(ev.gpu_model, fleet):
            if compute * k >= need and p.memory_bytes >= need_memory and billed < share:
                monthly = k * billed * price * hours_served
                why = f"{rate}: {k} x {p.name} hold it (peak {_gib(ev.memory_peak_bytes)})"
                target = f"{p.name} x {k}"
                candidates.append((monthly, 1, money.advice("mig", target, billed, monthly, why)))
                break
    if not candidates:
        return money.unchanged("keep", f"{rate}: no smaller option holds it")
    return min(candidates, key=lambda c: (c[0], c[1]))[2]
