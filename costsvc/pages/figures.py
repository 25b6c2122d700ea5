"""What the pages show, gathered from the functions the API answers from (costsvc/costs/queries.py,
costsvc/budgets/repository.py, costsvc/advice/repository.py): the same rows, the same figures — a
page never reads a table itself. Money stays the API's decimal strings (exact); the totals the
pages add up are summed in micro-units."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from costsvc.advice.repository import quota_usage, recommendations
from costsvc.advice.rightsizing import ACTIONABLE
from costsvc.advice.routes import quota_row, recommendation_row, team_quotas
from costsvc.api.deps import Db
from costsvc.budgets.repository import budgets
from costsvc.budgets.state import budget_state
from costsvc.costs.queries import Forecast, costs, forecast
from costsvc.inference.queries import answer_rows, served_totals
from costsvc.kit.money import MICRO, kg, money, money_rounded, to_micro
from costsvc.kit.ratios import ratio
from costsvc.kit.times import (
    day_floor,
    iso_z,
    month_of,
    parse_month,
    same_span_before,
    step_starts,
)
from costsvc.months.billing import MonthState, billed, corrections
from costsvc.pages.charts import Chart, stacked_columns
from costsvc.queues.queries import DEFAULT_GROUP_BY as QUEUE_GROUPS
from costsvc.queues.queries import queue_totals
from costsvc.rules.chargeback import IDLE, UNALLOCATED
from costsvc.rules.energy import kwh

DAY = timedelta(days=1)


def month_range(month: str, now: datetime) -> tuple[datetime, datetime, bool]:
    """[start, end) of ``month`` and whether it is ``now``'s (forecasts and budgets apply)."""
    start, end = parse_month(month)
    return start, end, month == month_of(now)


@dataclass(slots=True)
class Sums:
    """Rows of /v1/costs added up, per currency, in micro-units."""

    by_currency: dict[str, dict[str, int]] = field(default_factory=dict)
    currencies: list[str] = field(default_factory=list)  # the month's: a card without rows

    def add(self, row: dict[str, Any], *names: str) -> None:
        mine = self.by_currency.setdefault(row["currency"], {})
        for name in names:
            mine[name] = mine.get(name, 0) + to_micro(row[name])

    def text(self, name: str) -> list[str]:
        """'USD 1,234.57' per currency of the month ('USD 0.00' where none of its rows are
        this card's; nothing when the month has no rows)."""
        found = sorted({*self.currencies, *self.by_currency})
        return [f"{c} {money_rounded(self.by_currency.get(c, {}).get(name, 0))}" for c in found]


MONEY = ("total_cost", "allocated_cost", "used_cost", "allocated_idle_cost", "unmeasured_cost")


def by_team(db: Db, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """``/v1/costs?group_by=team`` over [start, end), as the API answers it."""
    with db.connect() as conn:
        return costs(conn, start, end, ["team"], None, {})


def overview_sums(rows: list[dict[str, Any]]) -> dict[str, Sums]:
    """The overview's cards: everything, idle capacity, unallocated pods, lost GPUs."""
    out = {k: Sums() for k in ("all", "idle", "unallocated", "unavailable")}
    for r in rows:
        out["all"].add(r, *MONEY, "idle_cost")
        out["unavailable"].add(r, "unavailable_cost")
        if r["group"]["team"] == IDLE:
            out["idle"].add(r, "total_cost")
        elif r["group"]["team"] == UNALLOCATED:
            out["unallocated"].add(r, "total_cost")
    for sums in out.values():
        sums.currencies = sorted({r["currency"] for r in rows})
    return out


def team_forecasts(db: Db, now: datetime, teams: list[str]) -> dict[str, dict[str, str]]:
    """Month to date, burn rate and month-end forecast per team (``now``'s month)."""
    out = {}
    with db.connect() as conn:
        for team in teams:
            f = forecast(conn, now, team)
            out[team] = {
                "month_to_date": money(f.month_to_date),
                "burn_rate_per_hour": money(f.burn_rate),
                "forecast": money(f.forecast),
                "energy_kwh": kwh(f.energy_forecast),
                "co2e_kg": kg(f.co2e_forecast),
            }
    return out


def daily_chart(
    db: Db,
    title: str,
    start: datetime,
    end: datetime,
    now: datetime,
    dimension: str,
    filters: dict[str, list[str]],
) -> tuple[Chart, list[dict[str, Any]]]:
    """Cost per day of [start, end) (up to today), stacked by ``dimension``; and the rows."""
    with db.connect() as conn:
        rows = costs(conn, start, end, [dimension], "day", filters)
    return day_columns(title, rows, start, end, now, dimension), rows


def _per_day(
    rows: list[dict[str, Any]],
    start: datetime,
    end: datetime,
    now: datetime,
    dimension: str,
) -> tuple[list[str], dict[str, list[int]]]:
    """The days of [start, end) up to today (their first instant, ISO) and, per value of
    ``dimension``, its cost on each of them in micro-units (its rows' ``total_cost``)."""
    days = [iso_z(day) for day in step_starts(start, min(end, day_floor(now) + DAY), "day")]
    index = {d: i for i, d in enumerate(days)}
    per: dict[str, list[int]] = {}
    for r in rows:
        values = per.setdefault(r["group"][dimension] or "(none)", [0] * len(days))
        if r["start"] in index:
            values[index[r["start"]]] += to_micro(r["total_cost"])
    return days, per


@dataclass(frozen=True, slots=True)
class DayTable:
    """The numbers a daily chart draws: a column per name (sorted), a row per day — the
    day (``YYYY-MM-DD``), each name's cost that day and the day's total (exact decimal
    strings, as the API writes money)."""

    names: list[str]
    days: list[tuple[str, list[str], str]]
    currency: str


def day_table(
    rows: list[dict[str, Any]],
    start: datetime,
    end: datetime,
    now: datetime,
    dimension: str,
) -> DayTable:
    """Daily ``/v1/costs`` rows as the table of :func:`day_columns`' chart: the same days and
    the same sums (a negative cost, a correction, stays as it is here). Pure."""
    days, per = _per_day(rows, start, end, now, dimension)
    names = sorted(per)
    lines = []
    for i, day in enumerate(days):
        values = [per[n][i] for n in names]
        lines.append((day[:10], [money(v) for v in values], money(sum(values))))
    return DayTable(names, lines, " / ".join(sorted({r["currency"] for r in rows})))


def day_columns(
    title: str,
    rows: list[dict[str, Any]],
    start: datetime,
    end: datetime,
    now: datetime,
    dimension: str,
) -> Chart:
    """Daily ``/v1/costs`` rows as stacked columns, one a day of [start, end) up to today,
    the value axis in the rows' currency. Pure."""
    days, per = _per_day(rows, start, end, now, dimension)
    labels = [d[8:10] for d in days]
    chart = stacked_columns(title, labels, sorted(per.items()), money_rounded, MICRO)
    chart.axis = " / ".join(sorted({r["currency"] for r in rows}))
    return chart


def served(
    db: Db, start: datetime, end: datetime, group_by: list[str], team: str | None = None
) -> list[dict[str, Any]]:
    """``/v1/inference?group_by=…`` over [start, end) (of ``team``, or all), as the API answers
    it: the same query function, the same rows."""
    filters = {} if team is None else {"team": [team]}
    with db.connect() as conn:
        return answer_rows(served_totals(conn, start, end, group_by, None, filters))


def queue_lines(db: Db, start: datetime, end: datetime, team: str) -> list[dict[str, Any]]:
    """``/v1/queues?team=…`` over [start, end) per ClusterQueue, flavor and resource, as the
    API answers it: the same query function, the same rows."""
    with db.connect() as conn:
        groups = list(QUEUE_GROUPS)
        return queue_totals(conn, start, end, groups, {"team": [team]})


def picker_months(months: list[str], chosen: str) -> list[str]:
    """The month picker's months, newest first, with the month shown among them (one before
    the history began too, so that the picker names the month the page shows). Pure."""
    return sorted({*months, chosen}, reverse=True)


def budget_lines(db: Db, now: datetime, team: str | None = None) -> list[dict[str, Any]]:
    """Each budget (of ``team``, or all) against this month: as ``/v1/budgets/{id}/status``."""
    out = []
    with db.connect() as conn:
        for b in budgets(db, team):
            f = forecast(conn, now, b.team, b.project or None)
            state = budget_state(f.month_to_date, f.forecast, b.amount, b.thresholds)
            out.append(
                {
                    "id": b.id,
                    "team": b.team,
                    "project": b.project,
                    "currency": b.currency,
                    "amount": money(b.amount),
                    "month_to_date": money(f.month_to_date),
                    "burn_rate_per_hour": money(f.burn_rate),
                    "forecast": money(f.forecast),
                    "used_ratio": state.used_ratio,
                    "forecast_ratio": state.forecast_ratio,
                    "crossed": state.crossed,
                    "over": f.forecast > b.amount,
                    "thresholds": list(b.thresholds),
                    "energy": None if b.energy_mj is None else _energy(f, b.energy_mj),
                }
            )
    return out


def _energy(f: Forecast, budget_mj: int) -> dict[str, str]:
    """A budget's energy against this month, as ``/v1/budgets/{id}/status``'s ``energy``."""
    return {
        "budget_kwh": kwh(budget_mj),
        "month_to_date_kwh": kwh(f.energy_month_to_date),
        "used_ratio": ratio(f.energy_month_to_date, budget_mj),
        "forecast_kwh": kwh(f.energy_forecast),
        "forecast_ratio": ratio(f.energy_forecast, budget_mj),
    }


def savings(db: Db, team: str | None = None, limit: int = 10) -> list[dict[str, Any]]:
    """The biggest monthly savings of the latest rightsizing run (``/v1/recommendations``)."""
    filters = {} if team is None else {"team": [team]}
    rows = recommendations(db, filters, ACTIONABLE, limit=limit)
    return [recommendation_row(r) for r in rows]


def quotas(db: Db, team: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A team's quota against use: per namespace, and per resource (``/v1/quotas``)."""
    found = quota_usage(db, {"team": [team]})
    return [quota_row(q) for q in found], team_quotas(found)


def change(now: dict[str, int], before: dict[str, int]) -> list[dict[str, Any]]:
    """Per currency of either: the change from ``before`` to ``now`` (micro-units), as text
    ('+1,234.57', '-0.50'), and as a ratio of ``before`` (None where ``before`` is 0). Pure."""
    out = []
    for currency in sorted({*now, *before}):
        was = before.get(currency, 0)
        delta = now.get(currency, 0) - was
        text = money_rounded(delta)
        out.append(
            {
                "currency": currency,
                "amount": delta,
                "text": text if text.startswith("-") else f"+{text}",
                "ratio": ratio(delta, was) if was else None,
            }
        )
    return out


def card_changes(now: Sums, before: Sums, name: str) -> list[dict[str, Any]]:
    """A headline card's change from the previous month's same span (:func:`change`)."""
    mine = {c: v.get(name, 0) for c, v in now.by_currency.items()}
    was = {c: v.get(name, 0) for c, v in before.by_currency.items()}
    return change(mine, was)


def sums_of(rows: list[dict[str, Any]], *names: str) -> Sums:
    """``/v1/costs`` rows added up per currency (``names``: the money fields)."""
    out = Sums(currencies=sorted({r["currency"] for r in rows}))
    for r in rows:
        out.add(r, *names)
    return out


def month_trends(db: Db, months: list[MonthState], now: datetime) -> list[dict[str, Any]]:
    """Every month of ``months`` (their states, newest first): its state, what it bills per
    currency (micro-units), the corrections billed in it, and its change from the previous
    month — the previous month's bill over the same span (costsvc/kit/times.py
    ``same_span_before``: the whole month once this one has ended)."""
    totals = billed(db)
    fixed: dict[str, dict[str, int]] = {}
    for c in corrections(db):
        mine = fixed.setdefault(c["billing_month"], {})
        mine[c["currency"]] = mine.get(c["currency"], 0) + c["total"]
    out = []
    for state in months:
        (lo, hi), _ = same_span_before(state.month, now)
        before = month_of(lo)
        if hi < parse_month(before)[1]:  # not ended: the previous month's same span
            was = billed(db, before, hi).get(before, {})
        else:
            was = totals.get(before, {})
        mine = totals.get(state.month, {})
        out.append(
            {
                "state": state,
                "totals": [(c, money_rounded(v)) for c, v in sorted(mine.items())],
                "corrections": [
                    (c, money_rounded(v)) for c, v in sorted(fixed.get(state.month, {}).items())
                ],
                "change": change(mine, was),
            }
        )
    return out
