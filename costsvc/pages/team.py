"""A team's page (a team session: its own team only, as the API's ``check_team``; finance
and admin: any): projects and stages, the daily trend, efficiency and idle waste, budgets
with burn and forecast, quota against use, rightsizing savings, energy and CO2e, cost per 1M
inference tokens by served model, its Kueue ClusterQueues' quota against use (docs/queues.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request, Response
from fastapi import Path as PathParam

from costsvc.api.deps import Db, Now
from costsvc.auth.principal import check_team
from costsvc.costs.queries import costs, team_known, top_wasters
from costsvc.kit.quoting import shown
from costsvc.kit.times import iso_z, same_span_before
from costsvc.months.billing import billing_months
from costsvc.pages.figures import (
    budget_lines,
    card_changes,
    daily_chart,
    day_table,
    month_range,
    picker_months,
    queue_lines,
    quotas,
    savings,
    served,
    sums_of,
    team_forecasts,
)
from costsvc.pages.render import PREFIX, PageError, chosen_month, page
from costsvc.pages.session import SignedIn

router = APIRouter(prefix=PREFIX, include_in_schema=False)
TeamPath = Annotated[str, PathParam(min_length=1, max_length=253)]


@router.get("/teams/{team}")
def team_page(
    request: Request, team: TeamPath, v: SignedIn, db: Db, now: Now, month: str | None = None
) -> Response:
    check_team(v.principal, team)  # the API's rule: another team is a 404
    chosen = chosen_month(month, now)
    start, end, current = month_range(chosen, now)
    mine = {"team": [team]}
    with db.connect() as conn:
        if not team_known(conn, team):
            raise PageError(404, f"no team {shown(team)}: no costs, budget or token name it")
        total = costs(conn, start, end, [], None, mine)
        by_project = costs(conn, start, end, ["project", "stage"], None, mine)
        wasters = top_wasters(conn, start, end, team)
        (lo, hi), _ = same_span_before(chosen, now)
        before = sums_of(costs(conn, lo, hi, [], None, mine), "total_cost", "allocated_idle_cost")
    now_sums = sums_of(total, "total_cost", "allocated_idle_cost")
    changes = {
        "total": card_changes(now_sums, before, "total_cost"),
        "waste": card_changes(now_sums, before, "allocated_idle_cost"),
    }
    title = f"Cost per day, {chosen}, {team} by project"
    chart, daily = daily_chart(db, title, start, end, now, "project", mine)
    per_namespace, per_resource = quotas(db, team) if current else ([], [])
    context = {
        "team": team,
        "month": chosen,
        "start": iso_z(start),
        "end": iso_z(end),
        "months": picker_months(billing_months(db, now), chosen),
        "current": current,
        "total": total[0] if total else None,
        "changes": changes,
        "before": (iso_z(lo), iso_z(hi)),
        "projects": by_project,
        "chart": chart,
        "days": day_table(daily, start, end, now, "project"),
        "served": served(db, start, end, ["model"], team),
        "wasters": wasters,
        "forecast": team_forecasts(db, now, [team])[team] if current else None,
        "budgets": budget_lines(db, now, team) if current else [],
        "quotas": per_namespace,
        "quota_teams": per_resource,
        "savings": savings(db, team) if current else [],  # today's advice: this month only
        "queues": queue_lines(db, start, end, team),
    }
    return page(request, "team.html", context, viewer=v)
