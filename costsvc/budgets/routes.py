"""Budgets: ``/v1/budgets`` (finance and admin manage them; a team token sees its own)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi import Path as PathParam
from pydantic import BaseModel

from costsvc.api.cache import Answers, json_response
from costsvc.api.deps import Db, Now
from costsvc.api.errors import ERRORS
from costsvc.auth.principal import Caller, Finance, check_team
from costsvc.auth.tokens import Principal
from costsvc.budgets import repository as store
from costsvc.budgets import service
from costsvc.budgets.repository import BudgetRow
from costsvc.budgets.service import BudgetIn, BudgetRefused, budget_out
from costsvc.budgets.state import budget_state, currency_mismatch
from costsvc.costs.queries import currencies, forecast
from costsvc.kit.money import money
from costsvc.kit.ratios import ratio
from costsvc.kit.times import month_of, parse_month
from costsvc.rules.energy import kwh

router = APIRouter(tags=["budgets"], responses=ERRORS)
BudgetId = Annotated[int, PathParam(ge=1, le=2_147_483_647)]
T = TypeVar("T")


def _answered(call: Callable[[], T]) -> T:
    """``call``'s result; a :class:`BudgetRefused` as the HTTP error it names."""
    try:
        return call()
    except BudgetRefused as exc:
        raise HTTPException(exc.status, str(exc)) from None


class BudgetOut(BaseModel):
    id: int
    team: str
    project: str
    amount: str
    currency: str
    thresholds: list[float]
    energy_kwh: str | None = None


class EnergyStatus(BaseModel):
    month_to_date_kwh: str
    used_ratio: str
    forecast_kwh: str
    forecast_ratio: str


class BudgetStatus(BudgetOut):
    month: str
    month_to_date: str
    used_ratio: str
    burn_rate_per_hour: str
    forecast: str
    forecast_ratio: str
    crossed: list[float]
    method: str
    energy: EnergyStatus | None = None  # when the budget has an energy amount


def _budget(db: Any, budget_id: int, who: Principal) -> BudgetRow:
    return _answered(lambda: service.visible_budget(db, budget_id, who))


@router.get(
    "/budgets", response_model=list[BudgetOut], summary="Budgets (a team token sees its own)"
)
async def list_budgets(who: Caller, db: Db, answers: Answers) -> Response:
    team = check_team(who)  # every change is audited: a new data version

    def compute() -> Response:
        return json_response([budget_out(b) for b in store.budgets(db, team)])

    answer: Response = await answers.aget(db, ("budgets", team), compute)
    return answer


@router.post(
    "/budgets",
    response_model=BudgetOut,
    status_code=201,
    summary="Create a monthly budget (finance/admin)",
    responses={
        409: {
            "description": "that team/project has a budget, or the currency is not the cost model's"
        }
    },
)
def create_budget(
    body: BudgetIn, who: Finance, db: Db, now: Now, request: Request
) -> dict[str, Any]:
    settings = request.app.state.settings
    return budget_out(_answered(lambda: service.create(db, body, who, now, settings)))


@router.get("/budgets/{budget_id}", response_model=BudgetOut)
def get_budget(budget_id: BudgetId, who: Caller, db: Db) -> dict[str, Any]:
    return budget_out(_budget(db, budget_id, who))


@router.put(
    "/budgets/{budget_id}", response_model=BudgetOut, summary="Replace a budget (finance/admin)"
)
def put_budget(
    budget_id: BudgetId, body: BudgetIn, who: Finance, db: Db, now: Now, request: Request
) -> dict[str, Any]:
    settings = request.app.state.settings
    return budget_out(_answered(lambda: service.replace(db, budget_id, body, who, now, settings)))


@router.delete("/budgets/{budget_id}", status_code=204, summary="Delete a budget (finance/admin)")
def delete_budget(budget_id: BudgetId, who: Finance, db: Db, request: Request) -> Response:
    old = _budget(db, budget_id, who)
    store.delete_budget(db, old, who.name, budget_out(old))
    return Response(status_code=204)


@router.get(
    "/budgets/{budget_id}/status",
    response_model=BudgetStatus,
    summary="Month to date, burn rate and month-end forecast against the budget",
)
def budget_status(budget_id: BudgetId, who: Caller, db: Db, now: Now) -> dict[str, Any]:
    b = _budget(db, budget_id, who)
    with db.connect() as conn:
        f = forecast(conn, now, b.team, b.project or None)
        month = parse_month(month_of(now))
        mismatch = currency_mismatch(b.currency, currencies(conn, *month))
    if mismatch is not None:  # a budget kept in another currency: no ratio of the two
        raise HTTPException(409, mismatch)
    state = budget_state(f.month_to_date, f.forecast, b.amount, b.thresholds)
    return {
        **budget_out(b),
        "month": f.month,
        "month_to_date": money(f.month_to_date),
        "used_ratio": state.used_ratio,
        "burn_rate_per_hour": money(f.burn_rate),
        "forecast": money(f.forecast),
        "forecast_ratio": state.forecast_ratio,
        "crossed": state.crossed,
        "method": "month to date + mean hourly cost of the last 7 days x hours left",
        "energy": None
        if b.energy_mj is None
        else {
            "month_to_date_kwh": kwh(f.energy_month_to_date),
            "used_ratio": ratio(f.energy_month_to_date, b.energy_mj),
            "forecast_kwh": kwh(f.energy_forecast),
            "forecast_ratio": ratio(f.energy_forecast, b.energy_mj),
        },
    }
