"""Cost queries over the chargeback table, aggregated in SQL (the API, /metrics, the CLI).

Costs by time (``costs``) count every row of an hour — the original and any correction billed
later — so they show the current best figure for when the GPUs were used. Reports by billing
month (costsvc.reports) show what each month billed, and never change once it is closed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from sqlalchemy import ColumnElement, Connection, func, select

from costsvc.attribution import IDLE
from costsvc.db.models import Budget, Chargeback, CostHour
from costsvc.months import month_of, parse_month
from costsvc.utc import as_utc

OWNER_DIMENSIONS = {"team", "project", "stage", "cluster"}  # what cost_hours keeps
DIMENSIONS = ("team", "project", "stage", "namespace", "pod", "cluster", "node", "gpu_model",
              "mig_profile")  # fmt: skip
FORECAST_WINDOW = timedelta(days=7)
ONE = Decimal("0.000001")


def money(micro: int) -> str:
    """Micro-units as a plain decimal string with 6 places: 2500000 -> '2.500000' (integer
    arithmetic: this runs for every cell of a month's CSV)."""
    units, frac = divmod(abs(micro), 1_000_000)
    return f"{'-' if micro < 0 else ''}{units}.{frac:06d}"


def bucket(conn: Connection, step: str, h: Any = Chargeback.hour) -> ColumnElement[Any]:
    """The hour column ``h`` truncated to ``step``, as ISO text (UTC)."""
    if conn.dialect.name == "postgresql":
        fmt = {"hour": "YYYY-MM-DD\"T\"HH24:00:00\"Z\"", "day": "YYYY-MM-DD\"T\"00:00:00\"Z\"",
               "month": "YYYY-MM-01\"T\"00:00:00\"Z\""}[step]  # fmt: skip
        return func.to_char(func.timezone("UTC", h), fmt)
    fmt = {"hour": "%Y-%m-%dT%H:00:00Z", "day": "%Y-%m-%dT00:00:00Z",
           "month": "%Y-%m-01T00:00:00Z"}[step]  # fmt: skip
    return func.strftime(fmt, h)


def source(dimensions: set[str]) -> Any:
    """The table to aggregate: the per-owner hourly rollup when it has every dimension asked
    for (same sums, a few thousand rows a month instead of millions), else the chargeback."""
    return CostHour if dimensions <= OWNER_DIMENSIONS else Chargeback


@dataclass
class Totals:
    allocated: int = 0
    used: int = 0
    waste: int = 0
    idle: int = 0
    gpu_hours: int = 0

    @property
    def total(self) -> int:
        return self.allocated + self.idle

    def json(self) -> dict[str, Any]:
        eff = Decimal(self.used) / Decimal(self.allocated) if self.allocated else None
        return {"total_cost": money(self.total), "allocated_cost": money(self.allocated),
                "used_cost": money(self.used), "allocated_idle_cost": money(self.waste),
                "idle_cost": money(self.idle), "gpu_hours": money(self.gpu_hours),
                "efficiency": None if eff is None else str(eff.quantize(ONE))}  # fmt: skip


def sums(t: Any) -> tuple[Any, ...]:
    return (func.sum(t.allocated), func.sum(t.used), func.sum(t.waste), func.sum(t.idle),
            func.sum(t.gpu_hours))  # fmt: skip


SUMS = sums(Chargeback)


def costs(conn: Connection, start: datetime, end: datetime, group_by: list[str],
          step: str | None, filters: dict[str, list[str]]) -> list[dict[str, Any]]:  # fmt: skip
    """Totals per group (and per ``step`` bucket) of the hours in [start, end)."""
    t = source(set(group_by) | set(filters))
    cols: list[Any] = [getattr(t, d) for d in group_by]
    cols.append(t.currency)
    if step:
        cols.insert(0, bucket(conn, step, t.hour).label("start"))
    q = select(*cols, *sums(t)).where(t.hour >= start, t.hour < end)
    for name, values in filters.items():
        q = q.where(getattr(t, name).in_(values))
    q = q.group_by(*cols).order_by(*cols)
    out = []
    for r in conn.execute(q):
        n = len(cols)
        t = Totals(*(int(v or 0) for v in r[n:]))
        row: dict[str, Any] = {}
        if step:
            row["start"] = r[0]
        row["group"] = {d: r[i + (1 if step else 0)] for i, d in enumerate(group_by)}
        row["currency"] = r[n - 1]
        row.update(t.json())
        out.append(row)
    return out


def team_total(conn: Connection, start: datetime, end: datetime, team: str,
               project: str | None = None) -> Totals:  # fmt: skip
    t = CostHour
    q = select(*sums(t)).where(t.hour >= start, t.hour < end, t.team == team)
    if project:
        q = q.where(t.project == project)
    r = conn.execute(q).one()
    return Totals(*(int(v or 0) for v in r))


def last_hour(conn: Connection) -> datetime | None:
    found = conn.execute(select(func.max(CostHour.hour))).scalar()
    if found is None:
        return None
    return as_utc(found)


@dataclass
class Forecast:
    """Month to date, burn rate and month-end forecast for one team (or project).

    Method: the burn rate is the mean hourly cost over the last 7 days of ingested hours (hours
    with no cost count as 0; fewer hours when the data is younger); the forecast is month to
    date + burn rate x the hours left in the month after the last ingested hour."""

    month: str
    month_to_date: int
    burn_rate: int  # micro-units per hour
    forecast: int
    hours_left: int


def forecast(conn: Connection, now: datetime, team: str, project: str | None = None) -> Forecast:
    month = month_of(now)
    start, end = parse_month(month)
    mtd = team_total(conn, start, end, team, project).total
    last = last_hour(conn)
    if last is None or last < start - FORECAST_WINDOW:
        return Forecast(month, mtd, 0, mtd, int((end - start).total_seconds() // 3600))
    upto = min(last + timedelta(hours=1), end)
    since = upto - FORECAST_WINDOW
    first = conn.execute(select(func.min(CostHour.hour))).scalar()
    if first is not None:
        since = max(since, as_utc(first))
    hours = max(1, int((upto - since).total_seconds() // 3600))
    spent = team_total(conn, since, upto, team, project).total
    rate = int((Decimal(spent) / hours).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
    left = max(0, int((end - upto).total_seconds() // 3600))
    return Forecast(month, mtd, rate, mtd + rate * left, left)


def budget_for(conn: Connection, team: str, project: str = "") -> Any:
    """The budget row (id, team, project, amount, currency, thresholds, ...) or None."""
    return conn.execute(select(Budget).where(Budget.team == team, Budget.project == project)
                        ).first()  # fmt: skip


def top_wasters(conn: Connection, start: datetime, end: datetime, team: str,
                limit: int = 10) -> list[dict[str, Any]]:  # fmt: skip
    c = Chargeback
    q = (select(c.cluster, c.namespace, c.pod, c.project, c.currency, *SUMS)
         .where(c.hour >= start, c.hour < end, c.team == team, c.team != IDLE, c.pod != "")
         .group_by(c.cluster, c.namespace, c.pod, c.project, c.currency)
         .order_by(func.sum(c.waste).desc(), c.cluster, c.namespace, c.pod)
         .limit(limit))  # fmt: skip
    out = []
    for r in conn.execute(q):
        t = Totals(*(int(v or 0) for v in r[5:]))
        out.append({"cluster": r.cluster, "namespace": r.namespace, "pod": r.pod,
                    "project": r.project, "currency": r.currency, **t.json()})  # fmt: skip
    return out
