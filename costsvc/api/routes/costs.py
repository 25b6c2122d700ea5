"""Cost queries: ``/v1/costs`` and ``/v1/teams/{team}/summary``."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response
from pydantic import BaseModel

from costsvc.api.auth import Caller, check_team
from costsvc.api.cache import AnswerCache, json_response
from costsvc.api.deps import Db, GroupBy, Now
from costsvc.api.errors import ERRORS
from costsvc.chargeback import budget_state, month_of, parse_month
from costsvc.db.budgets import budget_for
from costsvc.money import money
from costsvc.queries import costs, forecast, top_wasters
from costsvc.utc import iso_z

router = APIRouter(tags=["costs"], responses=ERRORS)
ANSWERS = AnswerCache()
WINDOW = re.compile(r"^(today|yesterday|week|month|lastmonth|(\d{1,4})([hd]))$")
MAX_SPAN = timedelta(days=800)


class Step(StrEnum):
    hour = "hour"
    day = "day"
    month = "month"


class CostRow(BaseModel):
    start: str | None = None
    group: dict[str, str]
    currency: str
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


class CostsAnswer(BaseModel):
    start: str
    end: str
    group_by: list[str]
    step: str | None
    rows: list[CostRow]


def window_bounds(window: str, now: datetime) -> tuple[datetime, datetime]:
    m = WINDOW.match(window)
    if not m:
        raise HTTPException(
            400,
            f"window {window!r}: use today, yesterday, week, month, "
            "lastmonth or a span like 24h / 7d",
        )
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if window == "today":
        return day, now
    if window == "yesterday":
        return day - timedelta(days=1), day
    if window == "week":
        return day - timedelta(days=day.weekday()), now
    if window == "month":
        return parse_month(month_of(now))[0], now
    if window == "lastmonth":
        start, _ = parse_month(month_of(now))
        return parse_month(month_of(start - timedelta(hours=1)))[0], start
    n, unit = int(m[2]), m[3]
    span = timedelta(hours=n) if unit == "h" else timedelta(days=n)
    if n == 0 or span > MAX_SPAN:
        raise HTTPException(400, f"window {window!r}: between 1h and {MAX_SPAN.days}d")
    return now - span, now


def _utc(value: datetime, name: str) -> datetime:
    if value.tzinfo is None:
        raise HTTPException(400, f"{name}: give a time zone, e.g. 2026-11-01T00:00:00Z")
    return value.astimezone(UTC)


def _split(values: list[str] | None) -> list[str]:
    return [v for item in values or [] for v in item.split(",") if v]


Filter = Annotated[list[str] | None, Query(max_length=64)]


@router.get("/costs", response_model=CostsAnswer, summary="Costs by group over a time range")
def get_costs(
    who: Caller,
    db: Db,
    now: Now,
    groups: GroupBy,
    start: Annotated[datetime | None, Query(description="first instant, ISO 8601 + zone")] = None,
    end: Annotated[datetime | None, Query(description="end, exclusive (default: now)")] = None,
    window: Annotated[
        str | None,
        Query(
            description="today, yesterday, week, month, lastmonth, Nh or Nd — instead of start/end",
            max_length=16,
        ),
    ] = None,
    step: Step | None = None,
    team: Filter = None,
    project: Filter = None,
    stage: Filter = None,
    namespace: Filter = None,
    pod: Filter = None,
    cluster: Filter = None,
    node: Filter = None,
    gpu_model: Filter = None,
    mig_profile: Filter = None,
) -> Response:
    if window and (start or end):
        raise HTTPException(400, "give either window or start/end, not both")
    if window:
        lo, hi = window_bounds(window, now)
    elif start:
        lo, hi = _utc(start, "start"), _utc(end, "end") if end else now
    else:
        lo, hi = window_bounds("month", now)
    if hi <= lo:
        raise HTTPException(400, "end must be after start")
    if hi - lo > MAX_SPAN:
        raise HTTPException(400, f"the range is longer than {MAX_SPAN.days} days")
    given = {
        "team": team,
        "project": project,
        "stage": stage,
        "namespace": namespace,
        "pod": pod,
        "cluster": cluster,
        "node": node,
        "gpu_model": gpu_model,
        "mig_profile": mig_profile,
    }
    filters = {k: _split(v) for k, v in given.items() if _split(v)}
    if not who.sees_all:
        assert who.team is not None
        if any(t != who.team for t in filters.get("team", [])):
            raise HTTPException(403, "a team token can only ask about its own team")
        filters["team"] = [who.team]
    step_name = step.value if step else None

    def compute() -> Response:
        with db.connect() as conn:
            rows = costs(conn, lo, hi, groups, step_name, filters)
        return json_response(
            {
                "start": iso_z(lo),
                "end": iso_z(hi),
                "group_by": groups,
                "step": step_name,
                "rows": rows,
            }
        )

    key = (
        "costs",
        lo,
        hi,
        tuple(groups),
        step_name,
        tuple(sorted((k, tuple(v)) for k, v in filters.items())),
    )
    answer: Response = ANSWERS.get(db, key, compute)
    return answer


class BudgetState(BaseModel):
    id: int
    amount: str
    currency: str
    used_ratio: str
    forecast_ratio: str
    thresholds: list[float]
    crossed: list[float]


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


@router.get(
    "/teams/{team}/summary",
    response_model=TeamSummary,
    summary="A team's month to date, forecast, budget and top pods by waste",
)
def team_summary(team: str, who: Caller, db: Db, now: Now) -> Response:
    check_team(who, team)
    return ANSWERS.get(
        db, ("summary", team, month_of(now)), lambda: json_response(_summary(db, team, now))
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
    }
