"""Cost queries over the chargeback tables, aggregated in SQL (the API, /metrics, the CLI).

Costs by time (``costs``) count every row of an hour — the original and any correction billed
later — so they show the current best figure for when the GPUs were used. Reports by billing
month (costsvc.reports.monthly) show what each month billed, and never change once it is closed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    Connection,
    DateTime,
    and_,
    func,
    literal_column,
    select,
    true,
    type_coerce,
)

from costsvc.db.models import (
    ApiToken,
    Budget,
    Chargeback,
    CostHour,
    GpuPresence,
    NamespaceLabels,
    PodLabels,
    UsageFact,
)
from costsvc.db.rollup import owner_rows, pod_rows
from costsvc.kit.money import kg, money, round_micro
from costsvc.kit.ratios import ratio_text
from costsvc.kit.sql_times import bucket, step_index
from costsvc.kit.times import as_utc, month_of, parse_month, whole_hours
from costsvc.labels.history import in_force_during
from costsvc.opencost.podlabels import Labelled
from costsvc.opencost.shape import Row
from costsvc.rules.chargeback import IDLE, OWNER_DIMENSIONS, Spent
from costsvc.rules.energy import kwh

FORECAST_WINDOW = timedelta(days=7)
POD_DIMENSIONS = OWNER_DIMENSIONS | {"namespace", "pod"}  # what cost_pod_days keeps


def source(dimensions: set[str]) -> Any:
    """The table to aggregate: the per-owner rollups when they have every dimension asked
    for (same sums; a month by team reads ~30 days x owners from ``cost_days``, the
    partial-day edges from ``cost_hours``: costsvc/db/rollup.py), else the chargeback."""
    return CostHour if dimensions <= OWNER_DIMENSIONS else Chargeback


@dataclass
class Totals(Spent):
    allocated: int = 0
    used: int = 0
    waste: int = 0
    idle: int = 0
    gpu_hours: int = 0
    unavailable: int = 0  # of idle: lost GPU time (docs/cost-model.md)
    unavailable_gpu_hours: int = 0
    energy_mj: int = 0  # attributed energy
    idle_energy_mj: int = 0  # idle energy spread onto the line, or an __idle__ line's own
    co2e_mg: int = 0
    idle_co2e_mg: int = 0

    @property
    def total(self) -> int:
        return self.allocated + self.idle

    @property
    def energy(self) -> int:
        return self.energy_mj + self.idle_energy_mj

    @property
    def co2e(self) -> int:
        return self.co2e_mg + self.idle_co2e_mg

    def json(self) -> dict[str, Any]:
        eff = efficiency(self.used, self.waste)
        return {
            "total_cost": money(self.total),
            "allocated_cost": money(self.allocated),
            "used_cost": money(self.used),
            "allocated_idle_cost": money(self.waste),
            "unmeasured_cost": money(self.unmeasured),
            "idle_cost": money(self.idle),
            "gpu_hours": money(self.gpu_hours),
            "unavailable_cost": money(self.unavailable),
            "unavailable_gpu_hours": money(self.unavailable_gpu_hours),
            "efficiency": None if eff is None else ratio_text(eff),
            "energy_kwh": kwh(self.energy),
            "idle_energy_kwh": kwh(self.idle_energy_mj),
            "co2e_kg": kg(self.co2e),
        }


def efficiency(used: int, waste: int) -> Decimal | None:
    """Used / the allocated cost whose utilisation was measured (used + waste); None when
    none was (no utilisation series), never 0 % or 100 %."""
    measured = used + waste
    return Decimal(used) / Decimal(measured) if measured else None


def sums(t: Any) -> tuple[Any, ...]:
    return (
        func.sum(t.allocated),
        func.sum(t.used),
        func.sum(t.waste),
        func.sum(t.idle),
        func.sum(t.gpu_hours),
        func.sum(t.unavailable),
        func.sum(t.unavailable_gpu_hours),
        func.sum(t.energy_mj),
        func.sum(t.idle_energy_mj),
        func.sum(t.co2e_mg),
        func.sum(t.idle_co2e_mg),
    )


SUMS = sums(Chargeback)


def costs(
    conn: Connection,
    start: datetime,
    end: datetime,
    group_by: list[str],
    step: str | None,
    filters: dict[str, list[str]],
) -> list[dict[str, Any]]:
    """Totals per group (and per ``step`` bucket) of the hours in [start, end)."""
    dims = set(group_by) | set(filters)
    if source(dims) is CostHour:  # whole days from cost_days
        t: Any = owner_rows(start, end, grain=step or "month").c
        where: tuple[Any, ...] = ()
    elif dims <= POD_DIMENSIONS and step != "hour":  # whole days from cost_pod_days
        t = pod_rows(start, end).c
        where = ()
    else:
        t = Chargeback
        where = (t.hour >= start, t.hour < end)
    cols: list[Any] = [getattr(t, d) for d in group_by]
    cols.append(t.currency)
    if step:
        cols.insert(0, bucket(conn, step, t.hour).label("start"))
    q = select(*cols, *sums(t)).where(*where)
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


def team_total(
    conn: Connection, start: datetime, end: datetime, team: str, project: str | None = None
) -> Totals:
    t = owner_rows(start, end).c
    q = select(*sums(t)).where(t.team == team)
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
    # the same for energy (mJ) and CO2e (mg), by the same method
    energy_month_to_date: int = 0
    energy_forecast: int = 0
    co2e_month_to_date: int = 0
    co2e_forecast: int = 0


def forecast(conn: Connection, now: datetime, team: str, project: str | None = None) -> Forecast:
    month = month_of(now)
    start, end = parse_month(month)
    mtd = team_total(conn, start, end, team, project)
    last = last_hour(conn)
    if last is None or last < start - FORECAST_WINDOW:
        hours = whole_hours(end - start)
        return Forecast(
            month, mtd.total, 0, mtd.total, hours, *(2 * [mtd.energy]), *(2 * [mtd.co2e])
        )
    upto = min(last + timedelta(hours=1), end)
    since = upto - FORECAST_WINDOW
    first = conn.execute(select(func.min(CostHour.hour))).scalar()
    if first is not None:
        since = max(since, as_utc(first))
    hours = max(1, whole_hours(upto - since))
    spent = team_total(conn, since, upto, team, project)
    left = max(0, whole_hours(end - upto))

    def ahead(so_far: int, recent: int) -> tuple[int, int]:
        rate = round_micro(Decimal(recent) / hours)
        return rate, so_far + rate * left

    rate, money_forecast = ahead(mtd.total, spent.total)
    return Forecast(
        month,
        mtd.total,
        rate,
        money_forecast,
        left,
        mtd.energy,
        ahead(mtd.energy, spent.energy)[1],
        mtd.co2e,
        ahead(mtd.co2e, spent.co2e)[1],
    )


def top_wasters(
    conn: Connection, start: datetime, end: datetime, team: str, limit: int = 10
) -> list[dict[str, Any]]:
    c = pod_rows(start, end).c  # whole days from cost_pod_days
    q = (
        select(c.cluster, c.namespace, c.pod, c.project, c.currency, *sums(c))
        .where(c.team == team, c.team != IDLE, c.pod != "")
        .group_by(c.cluster, c.namespace, c.pod, c.project, c.currency)
        .order_by(func.sum(c.waste).desc(), c.cluster, c.namespace, c.pod)
        .limit(limit)
    )
    out = []
    for r in conn.execute(q):
        t = Totals(*(int(v or 0) for v in r[5:]))
        out.append(
            {
                "cluster": r.cluster,
                "namespace": r.namespace,
                "pod": r.pod,
                "project": r.project,
                "currency": r.currency,
                **t.json(),
            }
        )
    return out


# --- what the cost service's own /metrics shows (costsvc/metrics/series.py) ----------------------


@dataclass(frozen=True, slots=True)
class OwnerMoney:
    team: str
    project: str
    stage: str
    currency: str
    allocated: int
    used: int
    waste: int
    idle: int
    energy_mj: int = 0  # attributed + idle spread onto the owner (or __idle__'s own)
    idle_energy_mj: int = 0
    co2e_mg: int = 0  # attributed + idle spread


def owner_money(conn: Connection, start: datetime, end: datetime | None) -> list[OwnerMoney]:
    """Money (and energy, CO2e) per owner and currency over the hours in [start, end), or of
    the hour ``start`` when ``end`` is None."""
    o: Any = CostHour if end is None else owner_rows(start, end).c
    owners = (o.team, o.project, o.stage, o.currency)
    money_sums = (
        func.sum(o.allocated),
        func.sum(o.used),
        func.sum(o.waste),
        func.sum(o.idle),
        func.sum(o.energy_mj + o.idle_energy_mj),
        func.sum(o.idle_energy_mj),
        func.sum(o.co2e_mg + o.idle_co2e_mg),
    )
    hours = (o.hour == start,) if end is None else ()
    query = select(*owners, *money_sums).where(*hours).group_by(*owners)
    return [OwnerMoney(*r[:4], *(int(v or 0) for v in r[4:])) for r in conn.execute(query)]


def idle_by_currency(
    conn: Connection, start: datetime, end: datetime
) -> list[tuple[str, int, int]]:
    """(currency, idle, of it unavailable: lost GPU time) over [start, end)."""
    o = owner_rows(start, end).c
    query = select(o.currency, func.sum(o.idle), func.sum(o.unavailable)).group_by(o.currency)
    return [(cur, int(idle or 0), int(lost or 0)) for cur, idle, lost in conn.execute(query)]


def currencies(conn: Connection, start: datetime, end: datetime) -> set[str]:
    """The currencies of the costs over [start, end)."""
    o = owner_rows(start, end).c
    return {str(c) for c in conn.execute(select(o.currency).distinct()).scalars()}


def model_energy(conn: Connection, start: datetime, end: datetime) -> list[tuple[str, int, int]]:
    """(GPU model, energy mJ, CO2e mg) the fleet's GPUs drew over [start, end)."""
    g = GpuPresence
    query = (
        select(g.model, func.sum(g.energy_mj), func.sum(g.co2e_mg))
        .where(g.hour >= start, g.hour < end)
        .group_by(g.model)
    )
    return [(m, int(e or 0), int(c or 0)) for m, e, c in conn.execute(query)]


@dataclass(frozen=True, slots=True)
class PodMoney:
    team: str
    project: str
    namespace: str
    pod: str
    currency: str
    cost: int
    waste: int


def pod_money(conn: Connection, start: datetime, end: datetime) -> list[PodMoney]:
    """Cost and waste per pod (of a team, not idle capacity) over [start, end)."""
    c = pod_rows(start, end).c  # whole days from cost_pod_days
    pods = (c.team, c.project, c.namespace, c.pod, c.currency)
    query = (
        select(*pods, func.sum(c.allocated + c.idle), func.sum(c.waste))
        .where(c.team != IDLE, c.pod != "")
        .group_by(*pods)
    )
    return [PodMoney(*r[:5], int(r[5] or 0), int(r[6] or 0)) for r in conn.execute(query)]


# --- OpenCost's /allocation (costsvc/opencost/) ---------------------------------------------


def allocation_rows(
    conn: Connection,
    start: datetime,
    end: datetime,
    step: timedelta,
    columns: set[str],
    team: str | None,
) -> tuple[list[Row], set[str]]:
    """The chargeback of the hours in [start, end) summed per allocation set (``step`` long
    from ``start``) and per combination of ``columns`` (with cluster and team always), only
    ``team``'s rows when given; and the currencies met."""
    dims = sorted(columns | {"cluster", "team"})
    t = source(set(dims))
    one_set = step >= end - start
    idx = literal_column("0") if one_set else step_index(conn, t.hour, start, step)
    cols = [getattr(t, d) for d in dims]
    money_sums = (t.allocated, t.used, t.waste, t.idle, t.gpu_hours)  # Row's, in its order
    q = select(
        idx,
        *cols,
        t.currency,
        *(func.sum(m) for m in money_sums),
        type_coerce(func.min(t.hour), DateTime(timezone=True)),
        type_coerce(func.max(t.hour), DateTime(timezone=True)),
    ).where(t.hour >= start, t.hour < end)
    if team is not None:
        q = q.where(t.team == team)
    q = q.group_by(*([] if one_set else [idx]), *cols, t.currency)
    shared = _shared_keys(conn, start, end, step, dims, team)
    rows, currencies = [], set()
    n = len(dims)
    for r in conn.execute(q):
        key = (int(r[0]), *r[1 : n + 1])
        currencies.add(r[n + 1])
        allocated, used, waste, idle, gpu_hours = (int(v or 0) for v in r[n + 2 : n + 7])
        rows.append(
            Row(
                int(r[0]),
                dict(zip(dims, r[1 : n + 1], strict=True)),
                allocated,
                used,
                waste,
                idle,
                gpu_hours,
                first=as_utc(r[n + 7]),
                last=as_utc(r[n + 8]),
                shared=key in shared,
            )
        )
    return rows, currencies


def _shared_keys(
    conn: Connection,
    start: datetime,
    end: datetime,
    step: timedelta,
    dims: list[str],
    team: str | None,
) -> set[tuple[Any, ...]]:
    """(set, columns...) of the lines with a holding on a shared (time-sliced, MPS) GPU: the
    few shared holdings of the window, joined to their lines (never a probe per line)."""
    c, u = Chargeback, UsageFact
    held = (
        select(u.hour, u.cluster, u.namespace, u.pod)
        .where(u.shared == true(), u.hour >= start, u.hour < end)
        .distinct()
        .subquery()
    )
    on = and_(
        held.c.hour == c.hour,
        held.c.cluster == c.cluster,
        held.c.namespace == c.namespace,
        held.c.pod == c.pod,
    )
    idx = step_index(conn, c.hour, start, step)
    cols = [getattr(c, d) for d in dims]
    q = select(idx, *cols).select_from(c).join(held, on).where(c.hour >= start, c.hour < end)
    if team is not None:
        q = q.where(c.team == team)
    return {(int(r[0]), *r[1:]) for r in conn.execute(q.distinct())}


def label_history(conn: Connection, start: datetime, end: datetime) -> list[Labelled]:
    """Pod and namespace label sets in force at some time in [start, end)."""
    p, n = PodLabels, NamespaceLabels
    pods = select(p.cluster, p.namespace, p.name, p.labels, p.valid_from, p.valid_to).where(
        in_force_during(p, start, end)
    )
    spaces = select(n.cluster, n.name, n.labels, n.valid_from, n.valid_to).where(
        in_force_during(n, start, end)
    )

    def aware(t: datetime | None) -> datetime | None:
        return None if t is None else as_utc(t)

    out = [Labelled(r[0], r[1], r[2], r[3], as_utc(r[4]), aware(r[5])) for r in conn.execute(pods)]
    out += [
        Labelled(r[0], r[1], None, r[2], as_utc(r[3]), aware(r[4])) for r in conn.execute(spaces)
    ]
    return out


def team_known(conn: Connection, team: str) -> bool:
    """Whether ``team`` has ever had a chargeback line, a budget or a token: a team's page
    exists for it (one that has none is nobody's, not a team with nothing spent)."""
    for column in (Chargeback.team, Budget.team, ApiToken.team):
        if conn.execute(select(column).where(column == team).limit(1)).first() is not None:
            return True
    return False
