"""Cost queries over the chargeback tables, aggregated in SQL (the API, /metrics, the CLI).

Costs by time (``costs``) count every row of an hour — the original and any correction billed
later — so they show the current best figure for when the GPUs were used. Reports by billing
month (costsvc.reports.monthly) show what each month billed, and never change once it is closed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    Connection,
    case,
    func,
    select,
)

from costsvc.db.models import (
    ApiToken,
    Budget,
    Chargeback,
    CostHour,
    GpuPresence,
)
from costsvc.db.rollup import owner_rows, pod_rows
from costsvc.kit.money import kg, money, round_micro, split
from costsvc.kit.ratios import ratio_text
from costsvc.kit.sql_times import bucket
from costsvc.kit.times import as_utc, month_of, parse_month, whole_hours
from costsvc.rules.chargeback import IDLE, OWNER_DIMENSIONS, Spent
from costsvc.rules.energy import kwh
from costsvc.rules.idle_share import Held, share

FORECAST_WINDOW = timedelta(days=7)
IDLE_FLAG = "is_idle"  # a grouping of the idle share's read: 1 for the __idle__ lines
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

    def amounts(self) -> list[int]:
        """Every amount, ``allocated`` first (the order of the fields and of :func:`sums`)."""
        return [getattr(self, f) for f in AMOUNT_FIELDS]

    def add(self, amounts: list[int]) -> None:
        for f, v in zip(AMOUNT_FIELDS, amounts, strict=True):
            setattr(self, f, getattr(self, f) + v)

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


AMOUNT_FIELDS = tuple(f.name for f in fields(Totals))


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
    idle: str = "separate",
) -> list[dict[str, Any]]:
    """Totals per group (and per ``step`` bucket) of the hours in [start, end); ``idle``:
    ``separate`` (the lines as stored), or the ``__idle__`` lines shared onto the rest
    (``weighted``, ``even``: costsvc/rules/idle_share.py), over every row of a scope, the
    filters applied after (a team's share of its clusters' idle)."""
    if idle == "separate":
        found = _grouped(conn, start, end, group_by, step, filters)
        return [_answer_row(key, t, group_by, step) for key, t in found]
    extra = [d for d in ("cluster", *filters) if d not in group_by]
    dims = [*dict.fromkeys([*group_by, *extra])]
    rows = _grouped(conn, start, end, [*dims, IDLE_FLAG], step, {})
    n = 1 if step else 0  # the key: [start], dims..., flag, currency
    at = {d: n + i for i, d in enumerate(dims)}
    held = [
        Held((k[0] if step else None, k[-1], k[at["cluster"]]), bool(k[-2]), t.amounts(), k)
        for k, t in rows
    ]
    merged: dict[tuple[Any, ...], Totals] = {}
    for h in share(held, idle):
        k = h.key
        if all(k[at[f]] in values for f, values in filters.items()):
            key = (*k[:n], *(k[at[d]] for d in group_by), k[-1])
            merged.setdefault(key, Totals()).add(h.amounts)
    return [_answer_row(key, merged[key], group_by, step) for key in sorted(merged, key=_sort_key)]


def _sort_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple("" if v is None else str(v) for v in key)


def _answer_row(
    key: tuple[Any, ...], t: Totals, group_by: list[str], step: str | None
) -> dict[str, Any]:
    """A row of /v1/costs from its key ([start], the group's values, currency) and sums."""
    n = 1 if step else 0
    row: dict[str, Any] = {"start": key[0]} if step else {}
    row["group"] = {d: key[n + i] for i, d in enumerate(group_by)}
    row["currency"] = key[-1]
    row.update(t.json())
    return row


def _grouped(
    conn: Connection,
    start: datetime,
    end: datetime,
    group_by: list[str],
    step: str | None,
    filters: dict[str, list[str]],
) -> list[tuple[tuple[Any, ...], Totals]]:
    """The sums per ([step bucket], the ``group_by`` columns, currency) of [start, end), in
    their order; ``group_by`` may name :data:`IDLE_FLAG` (1 for the ``__idle__`` lines)."""
    dims = {d for d in (*group_by, *filters) if d != IDLE_FLAG}
    if IDLE_FLAG in group_by:
        dims.add("team")
    if source(dims) is CostHour:  # whole days from cost_days
        t: Any = owner_rows(start, end, grain=step or "month").c
        where: tuple[Any, ...] = ()
    elif dims <= POD_DIMENSIONS and step != "hour":  # whole days from cost_pod_days
        t = pod_rows(start, end).c
        where = ()
    else:
        t = Chargeback
        where = (t.hour >= start, t.hour < end)
    idle_flag = case((t.team == IDLE, 1), else_=0).label(IDLE_FLAG)
    cols: list[Any] = [idle_flag if d == IDLE_FLAG else getattr(t, d) for d in group_by]
    cols.append(t.currency)
    if step:
        cols.insert(0, bucket(conn, step, t.hour).label("start"))
    q = select(*cols, *sums(t)).where(*where)
    for name, values in filters.items():
        q = q.where(getattr(t, name).in_(values))
    q = q.group_by(*cols).order_by(*cols)
    n = len(cols)
    return [(tuple(r[:n]), Totals(*(int(v or 0) for v in r[n:]))) for r in conn.execute(q)]


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


def _trend(conn: Connection, start: datetime, end: datetime) -> tuple[datetime, datetime] | None:
    """The forecast's trend hours [since, upto) for the month [start, end): the last 7 days
    of ingested hours (fewer when the data is younger); None without recent data."""
    last = last_hour(conn)
    if last is None or last < start - FORECAST_WINDOW:
        return None
    upto = min(last + timedelta(hours=1), end)
    since = upto - FORECAST_WINDOW
    first = conn.execute(select(func.min(CostHour.hour))).scalar()
    if first is not None:
        since = max(since, as_utc(first))
    return since, upto


def forecast(conn: Connection, now: datetime, team: str, project: str | None = None) -> Forecast:
    month = month_of(now)
    start, end = parse_month(month)
    mtd = team_total(conn, start, end, team, project)
    trend = _trend(conn, start, end)
    if trend is None:
        hours = whole_hours(end - start)
        return Forecast(
            month, mtd.total, 0, mtd.total, hours, *(2 * [mtd.energy]), *(2 * [mtd.co2e])
        )
    since, upto = trend
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


def _team_by_cluster(conn: Connection, start: datetime, end: datetime, team: str) -> dict[str, int]:
    t = owner_rows(start, end).c
    q = select(t.cluster, func.sum(t.allocated + t.idle)).where(t.team == team)
    return {c: int(v or 0) for c, v in conn.execute(q.group_by(t.cluster))}


def forecast_by_cluster(conn: Connection, now: datetime, team: str) -> dict[str, int]:
    """The team's month-end forecast (:func:`forecast`, the one rule) in parts per cluster:
    each cluster's month to date, plus the forecast's remainder (burn rate x hours left) split
    in proportion to each cluster's cost over the trend hours (largest remainder,
    costsvc/kit/money.py ``split``). The parts sum to the team's forecast exactly."""
    f = forecast(conn, now, team)
    start, end = parse_month(f.month)
    parts = _team_by_cluster(conn, start, end, team)
    trend = _trend(conn, start, end)
    recent = _team_by_cluster(conn, *trend, team) if trend else {}
    clusters = sorted(set(parts) | set(recent))
    weights = [max(0, recent.get(c, 0)) for c in clusters]
    ahead = split(f.forecast - f.month_to_date, weights) if clusters else []
    return {c: parts.get(c, 0) + a for c, a in zip(clusters, ahead, strict=True)}


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
    cluster: str
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
    """Money (and energy, CO2e) per cluster, owner and currency over the hours in
    [start, end), or of the hour ``start`` when ``end`` is None."""
    o: Any = CostHour if end is None else owner_rows(start, end).c
    owners = (o.cluster, o.team, o.project, o.stage, o.currency)
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
    return [OwnerMoney(*r[:5], *(int(v or 0) for v in r[5:])) for r in conn.execute(query)]


def idle_by_currency(
    conn: Connection, start: datetime, end: datetime
) -> list[tuple[str, str, int, int]]:
    """(cluster, currency, idle, of it unavailable: lost GPU time) over [start, end)."""
    o = owner_rows(start, end).c
    by = (o.cluster, o.currency)
    query = select(*by, func.sum(o.idle), func.sum(o.unavailable)).group_by(*by)
    return [(c, cur, int(idle or 0), int(lost or 0)) for c, cur, idle, lost in conn.execute(query)]


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
    cluster: str
    team: str
    project: str
    namespace: str
    pod: str
    currency: str
    cost: int
    waste: int


def pod_money(conn: Connection, start: datetime, end: datetime) -> list[PodMoney]:
    """Cost and waste per cluster and pod (of a team, not idle capacity) over [start, end)."""
    c = pod_rows(start, end).c  # whole days from cost_pod_days
    pods = (c.cluster, c.team, c.project, c.namespace, c.pod, c.currency)
    query = (
        select(*pods, func.sum(c.allocated + c.idle), func.sum(c.waste))
        .where(c.team != IDLE, c.pod != "")
        .group_by(*pods)
    )
    return [PodMoney(*r[:6], int(r[6] or 0), int(r[7] or 0)) for r in conn.execute(query)]


def team_known(conn: Connection, team: str) -> bool:
    """Whether ``team`` has ever had a chargeback line, a budget or a token: a team's page
    exists for it (one that has none is nobody's, not a team with nothing spent)."""
    for column in (Chargeback.team, Budget.team, ApiToken.team):
        if conn.execute(select(column).where(column == team).limit(1)).first() is not None:
            return True
    return False
