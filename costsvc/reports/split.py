"""FOCUS 1.3 split cost allocation, the pure rule (docs/focus.md, "FOCUS 1.3: split cost
allocation"): each chargeback line's parts as *allocated charges*, each with the method that
decided it, and their ratios of the *origin charge* they were split from, exact. No I/O.

- **The origin charge** is one node's GPUs of one model at one price in one hour (and billing
  month, class and currency): the chargeback rows sharing (hour, billing month, correction,
  cluster, node, GPU model, unit price, currency) — :func:`origin_key`. Its money is theirs
  summed; nothing else is charged for those GPUs in that hour.
- **Its allocated charges** are the parts of those rows (:func:`parts`): a holder's line is one
  part (its allocated, used and wasted cost and its GPU-hours), plus one more when the idle
  policy spread idle onto it (``weighted`` / ``even``); an ``__idle__`` line is one part for the
  free capacity and one for the time its GPUs were lost. Each part carries a :class:`Method`:
  the method id (:data:`METHODS`) and the usage unit and quantity that decided it.
- **Ratios** (:func:`ratios`) are each part's BilledCost over the origin's, in micro-units
  (six decimal places), by the largest-remainder rule so that they add up to exactly
  1.000000; an origin without money by its GPU-hours, without either in equal parts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal

from costsvc.kit.money import MICRO, split
from costsvc.reports.focus import ChargeRow
from costsvc.rules.chargeback import IDLE
from costsvc.rules.cost_model import Policies

WHOLE_GPU = "gpu-whole"
MIG_COMPUTE = "mig-compute-slices"
MIG_MEMORY = "mig-memory-slices"
TIME_SLICE_EQUAL = "time-slice-equal"
TIME_SLICE_USAGE = "time-slice-usage"
DRA_CLAIM = "dra-claim-share"
HAMI_COMPUTE = "hami-compute"
HAMI_MEMORY = "hami-memory"
HAMI_MAX = "hami-max"
IDLE_SEPARATE = "idle-separate"
IDLE_WEIGHTED = "idle-weighted"
IDLE_EVEN = "idle-even"
UNAVAILABLE = "gpu-unavailable"

# every method id, with what it splits by (docs/focus.md has a worked example of each)
METHODS: dict[str, str] = {
    WHOLE_GPU: "a whole GPU held by one container: its GPU-hours",
    MIG_COMPUTE: "a MIG instance, by its compute slices of the GPU's",
    MIG_MEMORY: "a MIG instance, by its memory slices of the GPU's",
    TIME_SLICE_EQUAL: "a time-slice replica, 1/replicas of the GPU each (shared_gpu_policy equal)",
    TIME_SLICE_USAGE: "held replicas' cost by measured SM time (shared_gpu_policy usage)",
    DRA_CLAIM: "a DRA claim's device, split equally over the containers holding it",
    HAMI_COMPUTE: "a HAMi / vGPU fraction by its cores (fractional_share_basis compute)",
    HAMI_MEMORY: "a HAMi / vGPU fraction by its memory (fractional_share_basis memory)",
    HAMI_MAX: "a HAMi / vGPU fraction by the larger of cores and memory (basis max)",
    IDLE_SEPARATE: "capacity nobody held, on the node's __idle__ line (idle_policy separate)",
    IDLE_WEIGHTED: "the cluster's free capacity spread by allocated cost (idle_policy weighted)",
    IDLE_EVEN: "the cluster's free capacity spread equally per team (idle_policy even)",
    UNAVAILABLE: "time the GPUs were lost (gpu_device_up 0): never charged to a holder",
}

GPU_HOURS_UNIT = "GPU-Hours"


@dataclass(frozen=True, slots=True)
class Held:
    """How a holder's line held its GPUs, from its ``usage_facts`` (summed over its devices):
    whether a MIG instance and its slices, the DRA claim, whether a replica, and the hours."""

    mig: bool = False
    compute_slices: int = 0
    memory_slices: int = 0
    claim: str = ""
    shared: bool = False
    # the memory share differs from the compute share somewhere: a HAMi / vGPU fraction (a
    # time-slice replica or a claim's device holds both alike)
    fraction: bool = False
    share_us: int = 0  # ∫ compute share dt, micro-GPU-seconds
    memory_share_us: int | None = None
    sm_us: int = 0


@dataclass(frozen=True, slots=True)
class Method:
    """An allocated charge's method id, and the usage unit and quantity that decided it."""

    id: str
    unit: str
    quantity: Decimal
    claim: str = ""  # a DRA claim's share: the claim, ``<namespace>/<name>``


@dataclass(frozen=True, slots=True)
class Part:
    """An allocated charge: a chargeback row's part (its money in ``row``) and its method."""

    row: ChargeRow
    method: Method


OriginKey = tuple[object, ...]


def origin_key(row: ChargeRow) -> OriginKey:
    """The origin charge a row was split from: its node's GPUs of its model at its price."""
    return (
        row.hour,
        row.billing_month,
        row.correction,
        row.cluster,
        row.node,
        row.gpu_model,
        row.unit_price,
        row.currency,
    )


def _hours(micro_units: int) -> Decimal:
    return Decimal(micro_units).scaleb(-6)


def _seconds_as_hours(us: int) -> Decimal:
    """micro-seconds (of a share) as hours, exact to the micro-hour (6 places)."""
    return (Decimal(us) / 3600).scaleb(-6).quantize(Decimal("1e-6"))


def holder_method(row: ChargeRow, held: Held, policies: Policies) -> Method:
    """The method that decided a holder line's share of its GPUs."""
    if held.mig or row.mig_profile:
        if policies.mig_share_basis == "memory":
            return Method(MIG_MEMORY, "MIG memory slices", Decimal(held.memory_slices))
        return Method(MIG_COMPUTE, "MIG compute slices", Decimal(held.compute_slices))
    gpu_hours = Method(WHOLE_GPU, GPU_HOURS_UNIT, _hours(row.gpu_hours))
    if held.claim:
        return replace(gpu_hours, id=DRA_CLAIM, claim=held.claim)
    if held.fraction:
        basis = policies.fractional_share_basis
        if basis == "memory":
            memory = _seconds_as_hours(held.memory_share_us or 0)
            return Method(HAMI_MEMORY, "GPU memory share-Hours", memory)
        if basis == "max":
            return replace(gpu_hours, id=HAMI_MAX)
        return Method(HAMI_COMPUTE, "GPU compute share-Hours", _seconds_as_hours(held.share_us))
    if held.shared:
        if policies.shared_gpu_policy == "usage":
            return Method(TIME_SLICE_USAGE, "SM-Hours", _seconds_as_hours(held.sm_us))
        return replace(gpu_hours, id=TIME_SLICE_EQUAL)
    return gpu_hours


def _spread_method(row: ChargeRow, policies: Policies) -> Method:
    """The method of idle spread onto a line (or kept on a cluster's line: nothing held)."""
    even = policies.idle_policy == "even"
    if row.team == IDLE:  # a cluster's free capacity nobody held at all: it stays idle
        return Method(IDLE_EVEN if even else IDLE_WEIGHTED, GPU_HOURS_UNIT, _hours(row.gpu_hours))
    unit = f"{row.currency} allocated"
    return Method(IDLE_EVEN if even else IDLE_WEIGHTED, unit, _hours(row.allocated))


def _holding_only(row: ChargeRow) -> ChargeRow:
    return replace(row, idle=0, idle_energy_mj=0, idle_co2e_mg=0)


def _idle_only(row: ChargeRow) -> ChargeRow:
    return replace(row, allocated=0, used=0, waste=0, gpu_hours=0, energy_mj=0, co2e_mg=0)


def parts(row: ChargeRow, held: Held | None, policies: Policies) -> list[Part]:
    """A chargeback row's allocated charges; their money, GPU-hours, energy and carbon add
    up to the row's exactly."""
    if row.team != IDLE:
        holder = holder_method(row, held or Held(), policies)
        if not (row.idle or row.idle_energy_mj or row.idle_co2e_mg):
            return [Part(row, holder)]
        spread = Part(_idle_only(row), _spread_method(row, policies))
        return [Part(_holding_only(row), holder), spread]
    if not row.node:  # a cluster's __idle__ line (weighted / even, nothing held)
        return [Part(row, _spread_method(row, policies))]
    out = []
    free_hours = row.gpu_hours - row.unavailable_gpu_hours
    free = replace(
        row,
        idle=row.idle - row.unavailable,
        gpu_hours=free_hours,
        unavailable=0,
        unavailable_gpu_hours=0,
    )
    if free.idle or free_hours or row.idle_energy_mj or row.idle_co2e_mg or not row.unavailable:
        out.append(Part(free, Method(IDLE_SEPARATE, GPU_HOURS_UNIT, _hours(free_hours))))
    if row.unavailable or row.unavailable_gpu_hours:
        lost = replace(
            row,
            idle=row.unavailable,
            gpu_hours=row.unavailable_gpu_hours,
            idle_energy_mj=0,
            idle_co2e_mg=0,
        )
        lost_hours = _hours(row.unavailable_gpu_hours)
        out.append(Part(lost, Method(UNAVAILABLE, GPU_HOURS_UNIT, lost_hours)))
    return out


def ratios(weights: list[int], fallback: list[int]) -> list[int]:
    """Each weight's ratio of their sum in micro-units (1_000_000 = 1), adding up to exactly
    1_000_000 by the largest-remainder rule (ties to the earlier). Weights may be negative (a
    correction moving money between lines): each ratio is then the floor of its exact share
    plus one unit for the largest remainders. A zero sum: by ``fallback``, else equal."""
    if not weights:
        return []
    for ws in (weights, fallback, [1] * len(weights)):
        total = sum(ws)
        if total:
            break
    return split(MICRO, [-w for w in ws] if total < 0 else ws, signed=True)
