"""A budget's state against the costs: how much of it is used and forecast, which thresholds
month to date has reached (:func:`budget_state`), and whether a budget and the costs are in
one currency at all (:func:`currency_mismatch`). Pure: no I/O, no database."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from costsvc.kit.ratios import ratio


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
