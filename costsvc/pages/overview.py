"""The overview (finance and admin): a month by team — to date, idle capacity, unallocated
pods, lost GPUs — a daily stacked chart with its table of numbers, cost per 1M inference
tokens by served model and by model and team, forecasts, budgets' state and the biggest
savings."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from costsvc.api.deps import Db, Now
from costsvc.kit.times import iso_z, same_span_before
from costsvc.months.billing import billing_months
from costsvc.pages.figures import (
    budget_lines,
    by_team,
    card_changes,
    daily_chart,
    day_table,
    month_range,
    overview_sums,
    picker_months,
    savings,
    served,
    team_forecasts,
)
from costsvc.pages.render import PREFIX, chosen_month, page
from costsvc.pages.session import FinanceIn

router = APIRouter(prefix=PREFIX, include_in_schema=False)


@router.get("/overview")
def overview(
    request: Request, v: FinanceIn, db: Db, now: Now, month: str | None = None
) -> Response:
    chosen = chosen_month(month, now)
    start, end, current = month_range(chosen, now)
    rows = by_team(db, start, end)
    chart, daily = daily_chart(db, f"Cost per day, {chosen}, by team", start, end, now, "team", {})
    teams = [r["group"]["team"] for r in rows]
    sums = overview_sums(rows)
    (lo, hi), _ = same_span_before(chosen, now)
    before = overview_sums(by_team(db, lo, hi))
    changes = {
        "all": card_changes(sums["all"], before["all"], "total_cost"),
        "idle": card_changes(sums["idle"], before["idle"], "total_cost"),
        "waste": card_changes(sums["all"], before["all"], "allocated_idle_cost"),
    }
    context = {
        "month": chosen,
        "months": picker_months(billing_months(db, now), chosen),
        "current": current,
        "start": iso_z(start),
        "end": iso_z(end),
        "rows": rows,
        "sums": sums,
        "changes": changes,
        "before": (iso_z(lo), iso_z(hi)),
        "chart": chart,
        "days": day_table(daily, start, end, now, "team"),
        "served": served(db, start, end, ["model"]),
        "served_teams": served(db, start, end, ["model", "team"]),
        "forecasts": team_forecasts(db, now, teams) if current else {},
        "budgets": budget_lines(db, now) if current else [],
        "savings": savings(db, limit=5) if current else [],  # today's advice: this month only
    }
    return page(request, "overview.html", context, viewer=v)
