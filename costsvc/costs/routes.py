"""Cost queries: ``/v1/costs`` and ``/v1/teams/{team}/summary``."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response
from fastapi import Path as PathParam
from pydantic import BaseModel

from costsvc.api.cache import Answers, json_response
from costsvc.api.deps import Db, Given, GroupBy, Now, filter_params, scope_key, team_filters
from costsvc.api.errors import ERRORS
from costsvc.auth.principal import Caller, check_team
from costsvc.budgets.repository import budget_for
from costsvc.budgets.state import budget_state
from costsvc.costs.queries import costs, forecast, top_wasters
from costsvc.kit import windows
from costsvc.kit.money import kg, money
from costsvc.kit.times import hour_floor, iso_z, month_of, parse_month
from costsvc.rules.chargeback import DIMENSIONS
from costsvc.rules.energy import kwh

router = APIRouter(tags=["costs"], responses=ERRORS)


class Step(StrEnum):
    hour = "hour"
    day = "day"
    week = "week"
    month = "month"


class IdleShare(StrEnum):
    separate = "separate"
    weighted = "weighted"
    even = "even"


class GroupedRow(BaseModel):
    """A row of a grouped answer: its step's start (with ``step``), its group, its currency."""

    start: str | None = None
    group: dict[str, str]
    currency: str


class CostRow(GroupedRow):
    total_cost: str
    allocated_cost: str
    used_cost: str
    allocated_idle_cost: str
    unmeasured_cost: str  # allocated cost with no utilisation series: neither used nor waste
    idle_cost: str
    gpu_hours: str
    unavailable_cost: str  # of idle_cost: GPU time lost to broken hardware (gpu_device_up 0)
    unavailable_gpu_hours: str
    efficiency: str | None  # used / (used + allocated_idle); null when nothing was measured
    energy_kwh: str  # energy drawn, idle energy spread onto the row included (9 places)
    idle_energy_kwh: str  # of it: idle (an __idle__ row's own, or spread onto the row)
    co2e_kg: str  # CO2e of that energy: x PUE x the grid intensity in force (6 places)


class CostsAnswer(BaseModel):
    start: str
    end: str
    group_by: list[str]
    step: str | None
    idle: str
    rows: list[CostRow]


def hours_asked(
    now: datetime, start: datetime | None, end: datetime | None, window: str | None
) -> tuple[datetime, datetime]:
    """[start, end) in whole UTC hours from the parameters (costsvc/kit/windows.py), or 400."""
    try:
        span = windows.time_range(now, start, end, window)
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None
    return span.start, span.end


# the filters: every dimension but the controller's two (``workload`` names the pair), in order
CONTROLLER = ("controller_kind", "controller")
FILTERS = tuple(d for d in DIMENSIONS if d not in CONTROLLER)
CostFilters = Annotated[Given, filter_params(*FILTERS)]


@router.get("/costs", response_model=CostsAnswer, summary="Costs by group over a time range")
async def get_costs(
    who: Caller,
    db: Db,
    now: Now,
    given: CostFilters,  # before group_by: the description lists the filters first
    groups: GroupBy,
    answers: Answers,
    start: Annotated[
        datetime | None, Query(description="first hour, ISO 8601 with a zone, a whole UTC hour")
    ] = None,
    end: Annotated[
        datetime | None,
        Query(description="end, exclusive, a whole UTC hour (default: the end of this hour)"),
    ] = None,
    window: Annotated[
        str | None,
        Query(
            description="today, yesterday, week, month, lastmonth, Nh or Nd — instead of start/end",
            max_length=16,
        ),
    ] = None,
    step: Annotated[
        Step | None, Query(description="a row per hour, day, week (from Monday) or month")
    ] = None,
    idle: Annotated[
        IdleShare,
        Query(
            description="separate: __idle__ as stored; weighted / even: shared onto the rows "
            "of its cluster by allocated cost / equally (docs/api.md)"
        ),
    ] = IdleShare.separate,
) -> Response:
    lo, hi = hours_asked(now, start, end, window)
    filters = team_filters(who, given)
    step_name = step.value if step else None

    def compute() -> Response:
        with db.connect() as conn:
            rows = costs(conn, lo, hi, groups, step_name, filters, idle.value)
        return json_response(
            {
                "start": iso_z(lo),
                "end": iso_z(hi),
                "group_by": groups,
                "step": step_name,
                "idle": idle.value,
                "rows": rows,
            }
        )

    key = ("costs", lo, hi, tuple(groups), step_name, idle.value, scope_key(filters))
    answer: Response = await answers.aget(db, key, compute)
    return answer


# a team as pod labels name it (control characters never get this far: costsvc/api/limits.py)
TeamPath = Annotated[str, PathParam(min_length=1, max_length=253)]


class BudgetState(BaseModel):
    id: int
    amount: str
    currency: str
    used_ratio: str
    forecast_ratio: str
    thresholds: list[float]
    crossed: list[float]


class EnergySummary(BaseModel):
    month_to_date_kwh: str
    forecast_kwh: str
    month_to_date_co2e_kg: str
    forecast_co2e_kg: str


class TeamSummary(BaseModel):
    team: str
    month: str
    currency: str | None
    month_to_date: str
    burn_rate_per_hour: str
    forecast: str
    hours_left: int
    budget: BudgetState | None
    top_pods_by_waste: list[dict[str, Any]]
    energy: EnergySummary


@router.get(
    "/teams/{team}/summary",
    response_model=TeamSummary,
    summary="A team's month to date, forecast, budget and top pods by waste",
)
async def team_summary(team: TeamPath, who: Caller, db: Db, now: Now, answers: Answers) -> Response:
    check_team(who, team)
    hour = hour_floor(now)  # the forecast counts whole hours
    return await answers.aget(
        db, ("summary", team, hour), lambda: json_response(_summary(db, team, now))
    )


def _summary(db: Any, team: str, now: datetime) -> dict[str, Any]:
    start, end = parse_month(month_of(now))
    with db.connect() as conn:
        f = forecast(conn, now, team)
        b = budget_for(conn, team)
        wasters = top_wasters(conn, start, end, team)
    budget = None
    if b is not None:
        state = budget_state(f.month_to_date, f.forecast, b.amount, b.thresholds)
        budget = {
            "id": b.id,
            "amount": money(b.amount),
            "currency": b.currency,
            "used_ratio": state.used_ratio,
            "forecast_ratio": state.forecast_ratio,
            "thresholds": b.thresholds,
            "crossed": state.crossed,
        }
    currency = wasters[0]["currency"] if wasters else (b.currency if b else None)
    return {
        "team": team,
        "month": f.month,
        "currency": currency,
        "month_to_date": money(f.month_to_date),
        "burn_rate_per_hour": money(f.burn_rate),
        "forecast": money(f.forecast),
        "hours_left": f.hours_left,
        "budget": budget,
        "top_pods_by_waste": wasters,
        "energy": {
            "month_to_date_kwh": kwh(f.energy_month_to_date),
            "forecast_kwh": kwh(f.energy_forecast),
            "month_to_date_co2e_kg": kg(f.co2e_month_to_date),
            "forecast_co2e_kg": kg(f.co2e_forecast),
        },
    }
