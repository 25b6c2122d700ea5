"""The chargeback vocabulary, in one place: what a chargeback line is keyed by and carries,
the two owner names that are not teams, the month a correction is billed in, and ``group_by``:
the dimensions the API names and how a question names them (:func:`parse_group_by`). Pure:
no I/O, no database.

A line is keyed by :data:`LINE_KEY`: :data:`KEY` (who held the GPU, and where), and the
holding's container and its pod's controller (:data:`WORKLOAD`, as at that hour: OpenCost's
container, controller and controllerKind), the pod's Kueue queue (:data:`QUEUE`) and which
labels decided its owner (:data:`OWNER_FROM`), each a function of the pod and hour; it
carries the :data:`MONEY` columns in integer micro-units (``gpu_hours`` in micro GPU-hours).
``__idle__`` is capacity nobody held; ``__unallocated__`` is a pod whose labels name no team
(docs/cost-model.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from costsvc.kit.lists import comma_list
from costsvc.kit.quoting import shown
from costsvc.kit.times import next_month

IDLE = "__idle__"
UNALLOCATED = "__unallocated__"

OWNER = ("team", "project", "stage")
# a chargeback line's key, in the order of the tables and the CSV's columns
KEY = ("cluster", *OWNER, "namespace", "pod", "node", "gpu_model", "mig_profile")
# the container and the pod's controller (kind as the Kubernetes API names it, and name): ""
# where unknown; columns after KEY in the tables, at the end of the CSV
WORKLOAD = ("container", "controller_kind", "controller")
# the pod's Kueue queue at that hour (docs/queues.md, "The queue of a pod"): its LocalQueue,
# that LocalQueue's ClusterQueue and cohort, the ResourceFlavor of the line's GPUs; "" unknown
QUEUE = ("queue", "cluster_queue", "cohort", "flavor")
# which label decided the owner (costsvc/rules/owners.py ``decided``): not a dimension
OWNER_FROM = "owner_from"
LINE_KEY = (*KEY, *WORKLOAD, *QUEUE, OWNER_FROM)
MONEY = ("allocated", "used", "waste", "idle", "gpu_hours", "unavailable", "unavailable_gpu_hours")
# energy (mJ) and carbon (mg CO2e) of a line, kept like allocated and idle (costsvc/rules/energy.py)
ENERGY = ("energy_mj", "idle_energy_mj", "co2e_mg", "idle_co2e_mg")
AMOUNTS = (*MONEY, *ENERGY)  # every summed column of a line
# what ``group_by`` and the filters may name, in the order the API documents them
# (``workload``: ``<Kind>/<name>`` of the controller, "" none)
DIMENSIONS = (
    *OWNER,
    "namespace",
    "pod",
    "cluster",
    "node",
    "gpu_model",
    "mig_profile",
    *WORKLOAD,
    "workload",
    *QUEUE,
)
OWNER_DIMENSIONS = frozenset({*OWNER, "cluster"})  # what the per-owner rollup keeps


class Spent:
    """What summed lines were charged: ``allocated`` = ``used`` + ``waste`` + unmeasured."""

    __slots__ = ()
    allocated: int
    used: int
    waste: int

    @property
    def unmeasured(self) -> int:
        """Allocated cost of holdings with no utilisation series: neither used nor waste."""
        return self.allocated - self.used - self.waste


assert set(DIMENSIONS) == {*LINE_KEY, "workload"} - {OWNER_FROM}


def billing_month_for(month: str, closed: set[str]) -> str:
    """Where rows of an hour in ``month`` are billed: there, or the first open month after."""
    while month in closed:
        month = next_month(month)
    return month


def parse_group_by(
    values: str | Iterable[str] | None,
    dimensions: Sequence[str] = DIMENSIONS,
    default: Sequence[str] = (),
) -> list[str]:
    """``group_by`` as given (repeated and/or comma-separated: costsvc/kit/lists.py) -> the
    dimensions, in order (none given: ``default``). ``dimensions``: what may be named (the
    chargeback's :data:`DIMENSIONS`; ``/v1/inference`` names its own). Raises ValueError
    naming an unknown or repeated dimension."""
    groups = comma_list(values) or list(default)
    for g in groups:
        if g not in dimensions:
            raise ValueError(f"group_by {shown(g)}: use any of {', '.join(dimensions)}")
    if len(set(groups)) != len(groups):
        raise ValueError("group_by names a dimension twice")
    return groups
