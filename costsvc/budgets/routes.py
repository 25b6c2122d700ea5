"""Budgets: ``/v1/budgets`` (finance and admin manage them; a team token sees its own)."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi import Path as PathParam
from pydantic import BaseModel, Field, field_validator

from costsvc.api.cache import Answers, json_response
from costsvc.api.deps import Db, Now
from costsvc.api.errors import ERRORS
from costsvc.auth.principal import Caller, Finance, check_team
from costsvc.auth.tokens import Principal
from costsvc.budgets import repository as store
from costsvc.budgets.repository import BudgetExists, BudgetRow, BudgetValues
from costsvc.budgets.state import budget_state, currency_mismatch
from costsvc.costs.queries import currencies, forecast
from costsvc.kit.money import money
from costsvc.kit.ratios import ratio
from costsvc.kit.times import month_of, parse_month
from costsvc.rules.cost_model import CostModelError
from costsvc.rules.cost_model_source import in_force
from costsvc.rules.energy import MJ_PER_KWH, kwh
from kube.label_names import LABEL_VALUE, LABEL_VALUE_MAX

router = APIRouter(tags=["budgets"], responses=ERRORS)
# teams and projects are Kubernetes label values (kube/label_names.py), as the pod labels they
# come from; the empty project is the team's own budget
Name = Annotated[str, Field(min_length=1, max_length=LABEL_VALUE_MAX, pattern=f"^{LABEL_VALUE}$")]
Project = Annotated[str, Field(max_length=LABEL_VALUE_MAX, pattern=f"^{LABEL_VALUE}$")]
BudgetId = Annotated[int, PathParam(ge=1, le=2_147_483_647)]


class BudgetIn(BaseModel):
    team: Name
    project: Project = ""
    amount: Annotated[Decimal, Field(gt=0, le=Decimal("1e12"), decimal_places=6)]
    # the cost model's currency when left out; any other is refused (409), never compared 1:1
    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")] | None = None
    thresholds: Annotated[list[float], Field(min_length=1, max_length=10)] = [0.8, 1.0]
    # optional: the team's energy per month, kWh (costsvc_budget_energy_used_ratio)
    energy_kwh: Annotated[Decimal, Field(gt=0, le=Decimal("1e9"), decimal_places=6)] | None = None

    @field_validator("thresholds")
    @classmethod
    def _ratios(cls, v: list[float]) -> list[float]:
        if any(not (0 < t <= 10) for t in v):
            raise ValueError("thresholds are ratios of the budget, e.g. 0.8 and 1.0")
        return sorted(set(v))

    def values(self, currency: str) -> BudgetValues:
        micro = int(self.amount.scaleb(6))
        mj = None if self.energy_kwh is None else int(self.energy_kwh * MJ_PER_KWH)
        return BudgetValues(self.team, self.project, micro, currency, self.thresholds, mj)


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


def _budget_out(b: BudgetRow) -> dict[str, Any]:
    return {
        "id": b.id,
        "team": b.team,
        "project": b.project,
        "amount": money(b.amount),
        "currency": b.currency,
        "thresholds": list(b.thresholds),
        "energy_kwh": None if b.energy_mj is None else kwh(b.energy_mj),
    }


def _budget(db: Any, budget_id: int, who: Principal) -> BudgetRow:
    b = store.budget(db, budget_id)
    if b is None:
        raise HTTPException(404, f"no budget {budget_id}")
    check_team(who, b.team, missing=f"no budget {budget_id}")  # another team's: none
    return b


def _currency(body: BudgetIn, db: Any, request: Request) -> str:
    """The budget's currency: the cost model's (costs are priced in it); another is refused
    with 409 naming both."""
    try:
        model = in_force(request.app.state.settings.cost_model, db).model.currency
    except CostModelError:  # no cost model yet: the costs' currency is not known
        model = None
    currency = body.currency or model or "USD"
    if model is not None and (why := currency_mismatch(currency, model)) is not None:
        raise HTTPException(409, f"{why}: a budget must be in the cost model's currency")
    return currency


@router.get(
    "/budgets", response_model=list[BudgetOut], summary="Budgets (a team token sees its own)"
)
async def list_budgets(who: Caller, db: Db, answers: Answers) -> Response:
    team = check_team(who)  # every change is audited: a new data version

    def compute() -> Response:
        return json_response([_budget_out(b) for b in store.budgets(db, team)])

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
    values = body.values(_currency(body, db, request))
    try:
        new_id = store.create_budget(db, values, now, who.name, body.model_dump(mode="json"))
    except BudgetExists as exc:
        raise HTTPException(409, str(exc)) from None
    return _budget_out(_budget(db, new_id, who))


@router.get("/budgets/{budget_id}", response_model=BudgetOut)
def get_budget(budget_id: BudgetId, who: Caller, db: Db) -> dict[str, Any]:
    return _budget_out(_budget(db, budget_id, who))


@router.put(
    "/budgets/{budget_id}", response_model=BudgetOut, summary="Replace a budget (finance/admin)"
)
def put_budget(
    budget_id: BudgetId, body: BudgetIn, who: Finance, db: Db, now: Now, request: Request
) -> dict[str, Any]:
    values = body.values(_currency(body, db, request))
    old = _budget(db, budget_id, who)
    detail = {"id": budget_id, "before": _budget_out(old), "after": body.model_dump(mode="json")}
    try:
        store.update_budget(db, budget_id, values, now, who.name, detail)
    except BudgetExists as exc:
        raise HTTPException(409, str(exc)) from None
    return _budget_out(_budget(db, budget_id, who))


@router.delete("/budgets/{budget_id}", status_code=204, summary="Delete a budget (finance/admin)")
def delete_budget(budget_id: BudgetId, who: Finance, db: Db, request: Request) -> Response:
    old = _budget(db, budget_id, who)
    store.delete_budget(db, old, who.name, _budget_out(old))
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
        **_budget_out(b),
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
