"""The chargeback vocabulary, in one place: what a chargeback line is keyed by and carries,
the two owner names that are not teams, billing months, ``group_by`` names and budget state.
Pure: no I/O, no database.

A line is keyed by :data:`LINE_KEY`: :data:`KEY` (who held the GPU, and where), and the
holding's container and its pod's controller (:data:`WORKLOAD`, as at that hour: OpenCost's
container, controller and controllerKind); it carries the :data:`MONEY` columns in integer
micro-units (``gpu_hours`` in micro GPU-hours). ``__idle__`` is capacity
nobody held; ``__unallocated__`` is a pod whose labels name no team (docs/cost-model.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_FLOOR, Decimal

IDLE = "__idle__"
UNALLOCATED = "__unallocated__"

OWNER = ("team", "project", "stage")
# a chargeback line's key, in the order of the tables and the CSV's columns
KEY = ("cluster", *OWNER, "namespace", "pod", "node", "gpu_model", "mig_profile")
# the container and the pod's controller (kind as the Kubernetes API names it, and name): ""
# where unknown; columns after KEY in the tables, at the end of the CSV
WORKLOAD = ("container", "controller_kind", "controller")
LINE_KEY = (*KEY, *WORKLOAD)
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
)
OWNER_DIMENSIONS = frozenset({*OWNER, "cluster"})  # what the per-owner rollup keeps
assert set(DIMENSIONS) == {*LINE_KEY, "workload"}

MONTH = re.compile(r"^(19[7-9]\d|2\d{3})-(0[1-9]|1[0-2])$")  # 1970-01 .. 2999-12


def month_of(hour: datetime) -> str:
    """The billing month (``YYYY-MM``, UTC) an hour belongs to."""
    return f"{hour.astimezone(UTC):%Y-%m}"


def parse_month(text: str) -> tuple[datetime, datetime]:
    """``YYYY-MM`` -> [first instant, first instant of the next month), UTC."""
    m = MONTH.match(text)
    if not m:
        raise ValueError(f"month {text!r}: expected YYYY-MM, e.g. 2026-11")
    year, month = int(m[1]), int(m[2])
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return start, end


def next_month(month: str) -> str:
    return month_of(parse_month(month)[1])


def billing_month_for(month: str, closed: set[str]) -> str:
    """Where rows of an hour in ``month`` are billed: there, or the first open month after."""
    while month in closed:
        month = next_month(month)
    return month


def parse_group_by(values: Iterable[str] | None) -> list[str]:
    """``group_by`` as given (repeated and/or comma-separated) -> the dimensions, in order.
    Raises ValueError naming an unknown or repeated dimension."""
    groups = [v for item in values or () for v in item.split(",") if v]
    for g in groups:
        if g not in DIMENSIONS:
            raise ValueError(f"group_by {g[:64]!r}: use any of {', '.join(DIMENSIONS)}")
    if len(set(groups)) != len(groups):
        raise ValueError("group_by names a dimension twice")
    return groups


SHOWN = Decimal("0.000001")  # a ratio as shown: six places, 0.0001 %


def shown(value: Decimal) -> str:
    """A ratio as every answer shows it: rounded *down* to six places, so a ratio below an
    alert threshold never reads as the threshold (0.59999979 is "0.599999", not "0.600000",
    while the "< 60 %" alert fires); the alert rules and dashboards floor the same way
    (alerts/README.md)."""
    return str(value.quantize(SHOWN, rounding=ROUND_FLOOR))


def ratio(part: int, whole: int) -> str:
    """``part / whole`` as a decimal string with six places, :func:`shown` ("0.000000" when
    whole is 0)."""
    return shown(Decimal(part) / Decimal(whole)) if whole else "0.000000"


def currency_mismatch(budget: str, costs: str | Iterable[str]) -> str | None:
    """Why a budget in ``budget``'s currency cannot be compared with costs in ``costs`` (the
    cost model's currency, or the currencies of the month's costs), or None when it can: a
    budget is compared only with money in its own currency, never 1:1 with another."""
    found = sorted({costs} if isinstance(costs, str) else set(costs))
    if not found or found == [budget]:
        return None
    return f"the budget is in {budget}; costs are in {', '.join(found)}"


@dataclass(frozen=True, slots=True)
class BudgetState:
    used_ratio: str  # month to date / amount
    forecast_ratio: str  # month-end forecast / amount
    crossed: list[float]  # the thresholds month to date has reached


def budget_state(
    month_to_date: int, forecast: int, amount: int, thresholds: Sequence[float]
) -> BudgetState:
    """A budget of ``amount`` (micro-units) against the money spent and forecast."""
    used = Decimal(month_to_date) / amount
    return BudgetState(
        used_ratio=ratio(month_to_date, amount),
        forecast_ratio=ratio(forecast, amount),
        crossed=[t for t in thresholds if used >= Decimal(str(t))],
    )
