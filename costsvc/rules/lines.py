"""An hour's chargeback lines and its idle: the :class:`Line`, the :class:`HourResult`, the
``__idle__`` lines of each node and model, the idle policy spreading the free capacity onto
the teams' lines, and the check that the hour adds up. Pure: no I/O, no database.

costsvc/rules/attribution.py charges each GPU to its holders' lines and gathers the rest into
an :class:`Idle` per node and model; :func:`add_idle` then places it (docs/cost-model.md):
lost GPU time always on the ``__idle__`` line of its node and model, the free capacity there
too under ``separate``, or spread over the cluster's lines by allocated cost (``weighted``) or
equally over teams (``even``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter

from costsvc.kit.money import split
from costsvc.rules.chargeback import IDLE, LINE_KEY

_KEY_OF = attrgetter(*LINE_KEY)
IdleKey = tuple[str, str, str]  # cluster, node, GPU model: where an idle GPU is
IDLE_FIELDS = ("idle", "idle_energy_mj", "idle_co2e_mg")


@dataclass(slots=True)
class Line:
    """One chargeback line of one hour."""

    cluster: str
    team: str
    project: str
    stage: str
    namespace: str
    pod: str
    node: str = ""
    gpu_model: str = ""
    mig_profile: str = ""
    container: str = ""  # the holding's container
    controller_kind: str = ""  # the pod's controller at that hour ("" none)
    controller: str = ""
    queue: str = ""  # the pod's LocalQueue, its ClusterQueue and cohort, the GPUs' flavor
    cluster_queue: str = ""
    cohort: str = ""
    flavor: str = ""
    owner_from: str = ""  # which labels decided the owner (costsvc/rules/owners.py)
    allocated: int = 0
    used: int = 0
    waste: int = 0  # allocated - used where measured; allocated - used - waste is unmeasured
    idle: int = 0  # idle cost spread onto this line (weighted / even), or an __idle__ line's
    gpu_hours: int = 0  # micro GPU-hours held (on the basis in force), or an __idle__ line's unheld
    unavailable: int = 0  # of an __idle__ line's idle: the cost of time its GPUs were lost
    unavailable_gpu_hours: int = 0  # micro GPU-hours its GPUs were lost
    # energy (mJ) and carbon (mg CO2e) like allocated / idle: attributed, and idle spread
    # onto the line (weighted / even) or an __idle__ line's own
    energy_mj: int = 0
    idle_energy_mj: int = 0
    co2e_mg: int = 0
    idle_co2e_mg: int = 0
    # the price per GPU-hour its GPUs were charged (micro-units); None where they were charged
    # different prices (a cluster's idle line over several models), or unknown
    unit_price: int | None = None

    @property
    def key(self) -> tuple[str, ...]:
        """The line's chargeback key (:data:`costsvc.rules.chargeback.LINE_KEY`)."""
        found: tuple[str, ...] = _KEY_OF(self)
        return found


@dataclass(slots=True)
class HourResult:
    hour: datetime
    lines: list[Line] = field(default_factory=list)
    fleet_cost: int = 0
    # per GPU, (cluster, GPU UUID): its cost, its price per GPU-hour, per measured kWh (or 0),
    # its carbon intensity as charged (µg CO2e per kWh), its carbon (mg CO2e)
    gpu_cost: dict[tuple[str, str], int] = field(default_factory=dict)
    gpu_price: dict[tuple[str, str], int] = field(default_factory=dict)
    gpu_kwh_price: dict[tuple[str, str], int] = field(default_factory=dict)
    gpu_carbon: dict[tuple[str, str], int] = field(default_factory=dict)
    gpu_co2e: dict[tuple[str, str], int] = field(default_factory=dict)
    fleet_energy: int = 0  # mJ
    fleet_co2e: int = 0  # mg

    def total(self) -> int:
        return sum(line.allocated + line.idle for line in self.lines)


@dataclass(slots=True)
class Idle:
    """The idle part of the GPUs of one node and model (or one cluster) in an hour."""

    cost: int = 0  # unheld, available capacity (and the idle energy's money)
    gpu_hours: int = 0  # micro GPU-hours of it
    unavailable: int = 0  # lost GPU time (gpu_device_up 0)
    unavailable_hours: int = 0
    energy_mj: int = 0
    co2e_mg: int = 0
    prices: set[int] = field(default_factory=set)  # the prices its GPUs were charged

    def amounts(self) -> tuple[int, int, int]:
        """What the idle policy spreads: available idle cost, energy, carbon."""
        return (self.cost, self.energy_mj, self.co2e_mg)


class InvariantBroken(AssertionError):
    pass


def one_price(prices: set[int] | set[int | None]) -> int | None:
    """The price a line's GPUs were charged, when they were all charged the same."""
    return next(iter(prices)) if len(prices) == 1 else None


def add_idle(result: HourResult, idle_by_gpu: dict[IdleKey, Idle], policy: str) -> None:
    """Place the hour's idle (``idle_by_gpu``: per cluster, node and GPU model) by the idle
    ``policy``: an ``__idle__`` line per node and model, and under ``weighted`` and ``even``
    the free capacity of each cluster spread onto its lines."""
    separate = policy == "separate"
    _add_node_idle_lines(result, idle_by_gpu, separate)
    if not separate:
        for cluster, idle in sorted(_by_cluster(idle_by_gpu).items()):
            _place_idle(
                result, cluster, idle.amounts(), policy, idle.gpu_hours, one_price(idle.prices)
            )


def _add_node_idle_lines(
    result: HourResult, idle_by_gpu: dict[IdleKey, Idle], separate: bool
) -> None:
    """An __idle__ line per node and GPU model: where the idle GPUs are. Under ``weighted`` and
    ``even`` the free capacity's cost, energy and carbon move onto the teams' lines; lost GPU
    time stays here, whatever the policy: broken hardware is nobody's usage."""
    for (cluster, node, gpu_model), idle in sorted(idle_by_gpu.items()):
        money = idle.cost + idle.unavailable if separate else idle.unavailable
        hours = idle.gpu_hours + idle.unavailable_hours if separate else idle.unavailable_hours
        mj, mg = (idle.energy_mj, idle.co2e_mg) if separate else (0, 0)
        if money or hours or mj or mg:
            line = _idle_line(cluster, (money, mj, mg), hours, one_price(idle.prices))
            line.node = node
            line.gpu_model = gpu_model
            line.unavailable = idle.unavailable
            line.unavailable_gpu_hours = idle.unavailable_hours
            result.lines.append(line)


def _idle_line(
    cluster: str, amounts: tuple[int, int, int], gpu_hours: int, price: int | None
) -> Line:
    """An ``__idle__`` line of ``cluster`` carrying idle cost, energy and carbon (``amounts``)."""
    idle, mj, mg = amounts
    line = Line(cluster, IDLE, IDLE, IDLE, "", "", idle=idle, idle_energy_mj=mj, idle_co2e_mg=mg)
    line.gpu_hours = gpu_hours
    line.unit_price = price
    return line


def _by_cluster(idle_by_gpu: dict[IdleKey, Idle]) -> dict[str, Idle]:
    """The available idle of each cluster: its nodes' and models' summed."""
    by_cluster: dict[str, Idle] = {}
    for (cluster, _, _), idle in idle_by_gpu.items():
        mine = by_cluster.setdefault(cluster, Idle())
        mine.cost += idle.cost
        mine.gpu_hours += idle.gpu_hours
        mine.energy_mj += idle.energy_mj
        mine.co2e_mg += idle.co2e_mg
        mine.prices |= idle.prices
    return by_cluster


def _place_idle(
    result: HourResult,
    cluster: str,
    amounts: tuple[int, int, int],
    policy: str,
    hours: int = 0,
    price: int | None = None,
) -> None:
    """Spread a cluster's idle cost, energy and carbon onto its lines with allocated cost
    (``hours``: its idle GPU-hours, kept on the __idle__ line when nothing was allocated)."""
    lines = [line for line in result.lines if line.cluster == cluster and line.allocated > 0]
    if not any(amounts):
        return
    if not lines:  # nothing allocated in the cluster this hour: it can only stay idle
        result.lines.append(_idle_line(cluster, amounts, hours, price))
        return
    for name, amount in zip(IDLE_FIELDS, amounts, strict=True):
        if policy == "weighted":
            weights = [line.allocated for line in lines]
            for line, part in zip(lines, split(amount, weights), strict=True):
                setattr(line, name, getattr(line, name) + part)
            continue
        teams = sorted({line.team for line in lines})  # even: equal per team, then by cost
        for team, part in zip(teams, split(amount, [1] * len(teams)), strict=True):
            mine = [line for line in lines if line.team == team]
            for line, p in zip(mine, split(part, [line.allocated for line in mine]), strict=True):
                setattr(line, name, getattr(line, name) + p)


def check(result: HourResult) -> None:
    """Σ attributed + idle = the fleet's, for money, energy and carbon alike; raises
    :class:`InvariantBroken` where not."""
    lines = result.lines
    for what, fleet, got in (
        ("cost", result.fleet_cost, result.total()),
        ("energy", result.fleet_energy, sum(ln.energy_mj + ln.idle_energy_mj for ln in lines)),
        ("CO2e", result.fleet_co2e, sum(ln.co2e_mg + ln.idle_co2e_mg for ln in lines)),
    ):
        if got != fleet:
            raise InvariantBroken(
                f"{result.hour:%Y-%m-%d %H:00}: attributed + idle {what} = {got} != fleet {fleet}"
            )
