"""Who pays for each GPU-hour. Pure: usage facts + owners + cost model -> chargeback lines.

Per physical GPU and hour (docs/cost-model.md):

- its **cost** is the price in force for its model and node pool x the time it existed;
- a container's **allocated** cost is the price x ∫ share dt (share of the physical GPU: whole
  GPU 1, MIG instance compute slices / the GPU's — or memory slices / the GPU's on request, the
  GPU's MIG geometry by costsvc/rules/mig.py's one rule — time-slice replica 1 / replicas);
- a DRA claim or a fractional holding (HAMi, memory-profile vGPU) is a share like any other: by
  ``gpu_allocation_share`` (compute) by default, ``gpu_allocation_memory_share`` or the larger
  of the two on request (``fractional_share_basis``); holdings adding up to more than the GPU
  (over-subscription) are scaled down to it (at each instant, by the ingest);
- on a shared GPU under policy ``usage`` the allocated cost of the held replicas is re-split in
  proportion to the holders' measured SM time (equally if nobody used it); unheld replicas stay
  idle either way, so a policy switch moves money between teams only;
- **used** = allocated x the utilisation of what the holder held
  (costsvc/ingest/gauges/holding_hour.py measures it at sample resolution: ``busy_share_seconds`` /
  ``share_seconds``); **waste** = allocated - used; a holding with no
  utilisation series at all (an A100 MIG instance: no device utilisation in MIG mode, no GPM
  before Hopper) is neither used nor waste: its efficiency is unknown, never 0 % or 100 %, and
  its allocated cost stays *unmeasured* (allocated - used - waste);
- **lost** GPU time (``lost_seconds``: the ingest already cut it out of the holders' shares)
  is idle, counted as ``unavailable`` on the ``__idle__`` line of its node and model whatever
  the idle policy;
- **GPU-hours** follow the MIG basis in force, split per GPU so they add up; ``__idle__``
  lines carry the GPU-hours nobody held;
- **idle** = the GPU's cost - allocated: its own ``__idle__`` line (``separate``), or spread over
  the hour's lines by allocated cost (``weighted``) or equally over teams (``even``).

All money is integer micro-units; every split is a largest-remainder split, so for every hour
Σ allocated + Σ idle = fleet cost exactly, and :func:`attribute_hour` checks it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal

from costsvc.kit.money import MICRO, round_micro, split
from costsvc.rules.chargeback import UNALLOCATED
from costsvc.rules.cost_model import CostModel, Price
from costsvc.rules.energy import (
    MJ_PER_KWH,
    Draw,
    Measured,
    carbon_mg,
    idle_baseline,
    split_by_energy,
    split_carbon,
    split_energy,
)
from costsvc.rules.lines import HourResult, Idle, IdleKey, Line, add_idle, check, one_price
from costsvc.rules.mig import Geometry, billed_share, known_geometry

HOUR = Decimal(3600)
# how a GPU's hour was read (docs/cost-model.md, "Two rules, one per source"): from our
# exporter's integrals (its counters of seconds), or from the gauges (our exporter's before
# its counters, dcgm-exporter + kube-state-metrics)
INTEGRALS = "integrals"
GAUGES = "gauges"
PodKey = tuple[str, str, str]  # cluster, namespace, pod
GpuKey = tuple[str, str]  # cluster, GPU UUID: a GPU, in every key, query and map


# (GpuHour, Holding, Owner: not frozen — a frozen dataclass's __init__ sets each field through
# object.__setattr__: 5.4 µs for a Holding against 0.9, and an hour builds one per holding.
# Hashable all the same (unsafe_hash); nothing changes them once built.)
@dataclass(slots=True, unsafe_hash=True)
class GpuHour:
    """A physical GPU during one hour."""

    cluster: str
    node: str
    gpu_uuid: str
    model: str
    node_pool: str | None
    # how long it existed (was reported) in the hour: up to 3600 s, more for an hour read from
    # its exporter's integrals after a scrape gap (what the exporter saw through the gap is
    # billed in the hour of the first scrape after it: docs/cost-model.md)
    present_seconds: Decimal
    # its energy (costsvc/rules/energy.py): drawn in the hour, of it during gaps, the time measured
    energy_mj: int = 0
    gap_mj: int = 0
    energy_seconds: Decimal = Decimal(0)
    min_power_mw: int | None = None  # the lowest power it drew in the hour (idle estimate)
    lost_seconds: Decimal = Decimal(0)  # of present_seconds, reported lost (gpu_device_up 0)
    # a GPU with MIG instances: its slices (costsvc/rules/mig.py), None where unknown
    mig_geometry: Geometry | None = None
    # the rule its hour was read by (costsvc/ingest/collect.py): INTEGRALS, GAUGES, or ""
    # where unknown (an hour stored before the rule was kept)
    reads: str = ""

    @property
    def key(self) -> GpuKey:
        return (self.cluster, self.gpu_uuid)


@dataclass(slots=True, unsafe_hash=True)
class Holding:
    """A container's hold on one device unit of a GPU during one hour. The GPU is
    (``cluster``, ``gpu_uuid``): the same UUID in two clusters is two GPUs."""

    gpu_uuid: str
    namespace: str
    pod: str
    container: str
    share_seconds: Decimal  # ∫ gpu_allocation_share dt (compute basis for MIG, as published)
    busy_share_seconds: Decimal | None = Decimal(0)  # ∫ share x utilisation dt; None: unknown
    sm_seconds: Decimal = Decimal(0)  # ∫ container SM utilisation dt (shared GPUs)
    shared: bool = False  # a time-slice / MPS replica
    compute_slices: int | None = None  # MIG instance
    memory_slices: int | None = None
    gi_id: int | None = None  # the MIG GPU instance; None for a whole GPU or a replica
    mig_profile: str = ""  # e.g. "1g.10gb" for a MIG instance
    # ∫ gpu_allocation_memory_share dt; None where the exporter publishes none (dcgm-exporter,
    # older exporters): the memory basis then falls back to the compute share
    memory_share_seconds: Decimal | None = None
    claim: str = ""  # the DRA claim it is through, ``<namespace>/<name>``; "" none
    cluster: str = field(kw_only=True)  # the GPU's cluster

    @property
    def gpu(self) -> GpuKey:
        return (self.cluster, self.gpu_uuid)


@dataclass(slots=True, unsafe_hash=True)
class Owner:
    team: str
    project: str
    stage: str


Controller = tuple[str, str]  # a pod's controller: (kind as the API names it, name)
NO: Controller = ("", "")
# a line's queue and owner provenance: LocalQueue, ClusterQueue, cohort, flavor, owner_from
Tags = tuple[str, str, str, str, str]
TagsOf = Callable[[str, str, str, str, str], Tags]  # (cluster, namespace, pod, model, MIG)
NO_TAGS: Tags = ("", "", "", "", "")


@dataclass
class HourFacts:
    """One hour of one Prometheus: the GPUs present, their holdings, the pods' labels and
    controllers."""

    start: datetime
    gpus: list[GpuHour] = field(default_factory=list)
    holdings: list[Holding] = field(default_factory=list)
    pod_labels: dict[PodKey, dict[str, str]] = field(default_factory=dict)
    namespace_labels: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    node_of: dict[GpuKey, str] = field(default_factory=dict)  # (cluster, GPU UUID) -> node
    controllers: dict[PodKey, Controller] = field(default_factory=dict)  # pods' controllers
    # a repriced hour's lines' tags as charged: (cluster, namespace, pod, model, MIG) -> tags
    tags: dict[tuple[str, str, str, str, str], Tags] = field(default_factory=dict)

    def controller_of(self, cluster: str, namespace: str, pod: str) -> Controller | None:
        return self.controllers.get((cluster, namespace, pod))

    def tags_of(self, cluster: str, namespace: str, pod: str, model: str, mig: str) -> Tags:
        return self.tags.get((cluster, namespace, pod, model, mig), NO_TAGS)


def with_geometry(facts: HourFacts, geometry: dict[GpuKey, Geometry]) -> None:
    """The GPUs of ``facts`` that have MIG instances, with their geometry."""
    facts.gpus = [
        replace(g, mig_geometry=geometry[g.key]) if g.key in geometry else g for g in facts.gpus
    ]


def is_shared(mig_instance: bool, top_share: Decimal) -> bool:
    """A time-slice / MPS replica: a hold on a whole GPU (not a MIG instance) that never
    reached all of it."""
    return not mig_instance and top_share < 1


def busy_seconds(
    share_seconds: Decimal,
    shared: bool,
    sm_seconds: Decimal | None,
    utilisation: Decimal | None,
) -> Decimal | None:
    """∫ share x utilisation dt of a holding. On a shared GPU: the holder's own SM time (at
    most its share); otherwise its share x the device's (GPU or MIG instance) mean
    utilisation over the hour, capped at 1. None (unknown) where there is no series to tell:
    ``sm_seconds`` None means no per-container data for the GPU, ``utilisation`` None no
    utilisation series for the device."""
    if shared and sm_seconds is not None:
        return min(share_seconds, sm_seconds)
    if utilisation is None:
        return None
    if shared:  # the GPU's activity is known, nobody's share of it: not this holder's
        return None
    return share_seconds * min(utilisation, Decimal(1))


def attribute_hour(
    hour: datetime,
    gpus: Iterable[GpuHour],
    holdings: Iterable[Holding],
    owner_of: Callable[[str, str, str], Owner | None],
    model: CostModel,
    controller_of: Callable[[str, str, str], Controller | None] | None = None,
    tags_of: TagsOf | None = None,
) -> HourResult:
    """Chargeback lines of one hour. ``owner_of(cluster, namespace, pod)`` gives a pod's
    owner (None: nobody, ``__unallocated__``), ``controller_of`` its controller (None: none
    known), ``tags_of`` a line's queue and which labels decided its owner (None: "").
    Holdings of GPUs not in ``gpus`` are ignored: the caller makes every held GPU present
    (costsvc.ingest.gauges.exporter and costsvc.ingest.integrals do)."""
    gpus = list(gpus)
    by_gpu: dict[GpuKey, list[Holding]] = {}
    for h in sorted(holdings, key=_order):  # a canonical order: ties split the same way
        by_gpu.setdefault(h.gpu, []).append(h)
    charging = _Charging(hour, gpus, model, owner_of, controller_of)
    charging.tags_of = tags_of
    for g in gpus:
        charging.gpu(g, by_gpu.get(g.key, []))
    result = charging.result
    result.lines = charging.team_lines()
    add_idle(result, charging.idle_by_gpu, model.policies.idle_policy)
    check(result)
    return result


class _Charging:
    """One hour being charged, GPU by GPU: the prices and policies in force, and what is built
    so far (the result's per-GPU figures, the holders' lines, the idle per node and model)."""

    def __init__(
        self,
        hour: datetime,
        gpus: list[GpuHour],
        model: CostModel,
        owner_of: Callable[[str, str, str], Owner | None],
        controller_of: Callable[[str, str, str], Controller | None] | None,
    ) -> None:
        self.hour = hour
        self.model = model
        self.owner_of = owner_of
        self.controller_of = controller_of
        self.tags_of: TagsOf | None = None
        # raises MissingPrices naming every unpriced model
        self.prices = model.prices_for(
            hour, sorted({(g.model, g.node_pool) for g in gpus}, key=str)
        )
        self.entries = {pair: model.price_at(hour, *pair) for pair in self.prices}
        self.basis = model.policies.mig_share_basis
        self.fractional_basis = model.policies.fractional_share_basis
        self.usage_policy = model.policies.shared_gpu_policy == "usage"
        self.result = HourResult(hour)
        self.lines: dict[tuple[str, ...], Line] = {}
        # the lines whose GPUs were charged more than one price: those prices
        self.mixed: dict[tuple[str, ...], set[int | None]] = {}
        self.idle_by_gpu: dict[IdleKey, Idle] = {}  # (cluster, node, model) -> idle
        self.carbons: dict[tuple[str, str | None], int] = {}  # (cluster, pool) -> µg CO2e per kWh

    def gpu(self, g: GpuHour, held: list[Holding]) -> None:
        """Charge one GPU's hour (``held``: its holdings, in order): its cost, energy and carbon
        to its holders' lines, the rest to the idle of its node and model."""
        price, entry, capital, energy_money = self._cost(g)
        weights = [_weight(h, self.basis, self.fractional_basis, g) for h in held]
        priced = _by_usage(held, weights) if self.usage_policy else weights
        # over-subscription (HAMi can hand out more than a GPU) is scaled at each instant by
        # the ingest (costsvc.ingest.gauges.exporter); as a last guard, holdings worth more than the
        # GPU's cost share exactly its cost, each in proportion to its weight
        allocated_total = min(round_micro(sum(priced, Decimal(0)) * price / HOUR), capital)
        parts = split(allocated_total, priced) if held else []
        # lost time (the ingest cut it out of the holders' shares) is idle, and unavailable
        present = g.present_seconds
        lost = min(g.lost_seconds, present)
        unavailable = min(round_micro(price * lost / HOUR), capital - allocated_total)
        energy, co2e, idle_energy, idle_co2e = self._energy(g, held, weights, entry.idle_watts)
        if energy_money:
            *drawn, _ = split_by_energy(energy_money, [*energy, idle_energy])
            parts = [p + m for p, m in zip(parts, drawn, strict=True)]
            allocated_total += sum(drawn)
        idle = self.idle_by_gpu.setdefault((g.cluster, g.node, g.model), Idle())
        idle.prices.add(price)
        idle.unavailable += unavailable
        idle.cost += capital + energy_money - allocated_total - unavailable
        idle.energy_mj += idle_energy
        idle.co2e_mg += idle_co2e
        # GPU-hours on the basis in force, split so that they add up to the GPU's held total;
        # the unheld ones: present - held, of which lost_hours were lost
        lost_hours = round_micro(lost * MICRO / HOUR)
        present_hours = round_micro(present * MICRO / HOUR)
        held_hours = min(round_micro(sum(weights, Decimal(0)) * MICRO / HOUR), present_hours)
        idle.unavailable_hours += lost_hours
        idle.gpu_hours += max(present_hours - held_hours - lost_hours, 0)
        if held:
            self._hold(g, held, price, parts, split(held_hours, weights), energy, co2e)

    def _cost(self, g: GpuHour) -> tuple[int, Price, int, int]:
        """A GPU's price per GPU-hour, its price entry, the cost of its time (a gap's seconds
        beyond the hour are priced too) and of its measured energy; its cost on the result."""
        price = self.prices[(g.model, g.node_pool)]
        entry = self.entries[(g.model, g.node_pool)]
        assert entry is not None
        kwh_price = entry.micro_per_kwh()  # amortised with measured power, else 0
        capital = round_micro(price * g.present_seconds / HOUR)
        # measured power: the energy drawn x its price, charged as the energy is split
        energy_money = round_micro(Decimal(g.energy_mj) * kwh_price / MJ_PER_KWH)
        cost = capital + energy_money
        result = self.result
        result.gpu_cost[g.key] = cost
        result.gpu_price[g.key] = price
        result.gpu_kwh_price[g.key] = kwh_price
        result.fleet_cost += cost
        return price, entry, capital, energy_money

    def _energy(
        self, g: GpuHour, held: list[Holding], weights: list[Decimal], idle_watts: Decimal | None
    ) -> tuple[list[int], list[int], int, int]:
        """A GPU's energy and carbon split over its holdings and idle (:func:`_energy`) at the
        carbon intensity of its cluster and node pool; its energy and carbon on the result."""
        place = (g.cluster, g.node_pool)  # (every GPU of a cluster and pool: one intensity)
        carbon = self.carbons.get(place)
        if carbon is None:
            carbon = self.carbons[place] = self.model.carbon_at(self.hour, *place)
        energy, co2e, idle_energy, idle_co2e = _energy(g, held, weights, idle_watts, carbon)
        result = self.result
        result.gpu_carbon[g.key] = carbon
        result.fleet_energy += g.energy_mj
        result.gpu_co2e[g.key] = sum(co2e) + idle_co2e
        result.fleet_co2e += sum(co2e) + idle_co2e
        return energy, co2e, idle_energy, idle_co2e

    def _hold(
        self,
        g: GpuHour,
        held: list[Holding],
        price: int,
        parts: list[int],
        held_parts: list[int],
        energy: list[int],
        co2e: list[int],
    ) -> None:
        """Add a GPU's holdings to their lines, each with its allocated cost (``parts``),
        GPU-hours, energy and carbon, and the part of its cost used where it is measured."""
        lines = self.lines
        owner_of = self.owner_of
        controller_of = self.controller_of
        tags_of = self.tags_of
        for h, allocated, gpu_hours, mj, mg in zip(
            held, parts, held_parts, energy, co2e, strict=True
        ):
            busy = h.busy_share_seconds
            if busy is None:  # unknown: neither used nor waste (unmeasured)
                used = waste = 0
            else:
                util = busy / h.share_seconds if h.share_seconds else Decimal(0)
                used = min(allocated, round_micro(allocated * min(util, Decimal(1))))
                waste = allocated - used
            who = owner_of(g.cluster, h.namespace, h.pod) or Owner(
                UNALLOCATED, UNALLOCATED, UNALLOCATED
            )
            kind, name = (controller_of and controller_of(g.cluster, h.namespace, h.pod)) or NO
            tags = (
                tags_of(g.cluster, h.namespace, h.pod, g.model, h.mig_profile)
                if tags_of
                else NO_TAGS
            )
            key = (
                g.cluster,
                who.team,
                who.project,
                who.stage,
                h.namespace,
                h.pod,
                g.node,
                g.model,
                h.mig_profile,
                h.container,
                kind,
                name,
                *tags,
            )
            line = lines.get(key)
            if line is None:
                line = lines[key] = Line(*key)
                line.unit_price = price
            elif line.unit_price != price:
                self.mixed.setdefault(key, {line.unit_price}).add(price)
            line.allocated += allocated
            line.used += used
            line.waste += waste
            line.gpu_hours += gpu_hours
            line.energy_mj += mj
            line.co2e_mg += mg

    def team_lines(self) -> list[Line]:
        """The holders' lines in order of their key, each with the price its GPUs were charged
        (None where they were charged several)."""
        lines = self.lines
        for line_key, charged in self.mixed.items():
            lines[line_key].unit_price = one_price(charged)
        return [lines[k] for k in sorted(lines)]  # (in order of Line.key: the same tuple)


def activity(h: Holding) -> Decimal | None:
    """A holding's measured activity, GPU-seconds: a replica's own SM time, else ∫ share x
    utilisation dt (None: unknown)."""
    if h.shared:
        return None if h.busy_share_seconds is None else h.sm_seconds
    return h.busy_share_seconds


def _energy(
    g: GpuHour,
    held: list[Holding],
    weights: list[Decimal],
    idle_watts: Decimal | None,
    carbon: int,
) -> tuple[list[int], list[int], int, int]:
    """A GPU's energy and carbon split over its holdings (in order, with their ``weights``:
    :func:`_weight`) and idle; ``carbon``: the intensity it is charged (µg CO2e per kWh)."""
    if idle_watts is None and g.min_power_mw is not None:
        idle_watts = Decimal(g.min_power_mw) / 1000  # the lowest power it drew this hour
    measured = Measured(g.energy_mj, g.gap_mj, g.energy_seconds)
    idle_mj = idle_baseline(measured, idle_watts)
    draws = [Draw(w, activity(h)) for h, w in zip(held, weights, strict=True)]
    energy = split_energy(measured, idle_mj, draws)
    *co2e, idle_co2e = split_carbon(carbon_mg(g.energy_mj, carbon), [*energy.parts, energy.idle])
    return energy.parts, co2e, energy.idle, idle_co2e


def _order(h: Holding) -> tuple[str, str, int, str, str, str]:
    gi = -1 if h.gi_id is None else h.gi_id
    return (h.cluster, h.gpu_uuid, gi, h.namespace, h.pod, h.container)


def _weight(h: Holding, basis: str, fractional_basis: str, g: GpuHour) -> Decimal:
    """∫ share dt, in GPU-seconds of the physical GPU: a MIG instance on the chosen MIG basis
    (its share is published on the compute basis: slices / the GPU's; on the memory basis it
    is rescaled by the GPU's geometry by the one rule, costsvc/rules/mig.py, which raises
    :class:`~costsvc.rules.mig.UnknownMigGeometry` where it is unknown),
    anything else (whole GPU, replica, DRA claim, HAMi or vGPU fraction) on the fractional
    basis — compute, memory, or the larger of the two hour integrals."""
    if h.compute_slices and h.memory_slices is not None:
        if basis == "memory":
            gpu = known_geometry(g.model, g.mig_geometry, f" ({g.gpu_uuid})")
            slices = (h.compute_slices, h.memory_slices, gpu)
            return (
                h.share_seconds * billed_share(*slices, "memory") / billed_share(*slices, "compute")
            )
        return h.share_seconds
    memory = h.memory_share_seconds
    if memory is None or fractional_basis == "compute":
        return h.share_seconds
    return memory if fractional_basis == "memory" else max(memory, h.share_seconds)


def _by_usage(held: list[Holding], weights: list[Decimal]) -> list[Decimal]:
    """Re-split the shared holdings' weight in proportion to their SM time."""
    shared = [i for i, h in enumerate(held) if h.shared]
    if not shared:
        return weights
    pool = sum((weights[i] for i in shared), Decimal(0))
    sm = [held[i].sm_seconds for i in shared]
    total_sm = sum(sm, Decimal(0))
    out = list(weights)
    for i, s in zip(shared, sm, strict=True):
        out[i] = pool * s / total_sm if total_sm else pool / len(shared)
    return out
