"""The rollups of the chargeback: ``cost_hours`` per owner and hour, ``cost_days`` per owner,
``cost_pod_days`` per owner, namespace and pod, ``cost_months`` per owner — this module is
their one writer, in the hour's transaction — and their reads over a range: whole months and
days from the coarse ones plus the partial edges from the hourly tables (``cost_hours``, the
chargeback).

A day is a UTC day and a month a UTC month (``cost_months``: per owner) — the days billing
months are cut in (costsvc/kit/times.py: months are UTC), and the buckets
``step=day``/``month`` answer in. Every writer of chargeback rows goes
through ``costsvc/db/lines.py write_lines`` (ingest, reprice, re-ingest of an hour, corrections
of a closed month): it subtracts the hour's rows from their day before it replaces them
(:func:`take_hour`) and adds the new ones after (:func:`put_hour`, which also recomputes the
hour's ``cost_hours``) — integers, so the day stays
Σ of its hours exactly, at the cost of the hour's own rows, in SQL (re-summing the day's
chargeback instead took ~1.2 s an hour at 5,000 pods; sending per-pod differences from Python,
~1 s). On PostgreSQL the hour's rows are summed per pod once and the three rollups upserted
from those sums in one statement, and a re-write adds new minus old per pod (the old sums
kept by :func:`take_hour` in a temporary table), leaving the pods whose sums did not change
untouched (bench/store_hour.py: a re-write of 5,000 pods ~330 -> ~190 ms); SQLite keeps the
statement per rollup. ``lines`` counts the chargeback rows under a rollup row: a row whose
count falls to 0 is deleted, so a day has a row for an owner (a pod) exactly when the hourly
tables do.

``cost_pod_days`` of a day is either kept hour by hour like the others, or **pending**
(``cost_pod_days_pending``): a multi-hour ingest writing most of a day's hours (``defer``)
leaves the per-pod upserts out (5,000 an hour at 1,000 GPUs: ~0.09 of the server's ~0.3 CPU-s
an hour) and the day's rows are written once from its chargeback when the run ends
(:func:`flush_pod_day`); any hour written meanwhile leaves them out too. The per-pod reads
(:func:`pod_rows`) take a pending day from the chargeback, so an answer never depends on it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from sqlalchemy import Connection, DateTime, delete, func, literal, select, text, union_all
from sqlalchemy import insert as sa_insert
from sqlalchemy.dialects import postgresql, sqlite

from costsvc.db.models import Chargeback, CostDay, CostHour, CostMonth, CostPodDay, PodDayPending
from costsvc.kit.times import as_utc, day_floor, month_floor, months_after
from costsvc.rules.chargeback import AMOUNTS, OWNER

DAY = timedelta(days=1)
POD = ("cluster", *OWNER, "namespace", "pod", "currency")  # cost_pod_days' key, with day
OWNER_KEY = ("cluster", *OWNER, "currency")  # cost_days' key, with day


def day_of(hour: datetime) -> datetime:
    """The first instant of ``hour``'s UTC day."""
    return day_floor(hour)


def month_start(t: datetime) -> datetime:
    """The first instant of ``t``'s UTC month."""
    return month_floor(t)


def _same_hour(hour: datetime) -> datetime:
    return hour


# each rollup the writer keeps: table, its period column, the period of an hour, its key.
# cost_hours first: recomputed from the hour's rows (it has no ``lines``); the others are
# added to (ADDED)
ROLLUPS: tuple[tuple[Any, str, Any, tuple[str, ...]], ...] = (
    (CostHour, "hour", _same_hour, OWNER_KEY),
    (CostPodDay, "day", day_of, POD),
    (CostDay, "day", day_of, OWNER_KEY),
    (CostMonth, "month", month_start, OWNER_KEY),
)
ADDED = ROLLUPS[1:]
# what a read over a range takes its rows from, coarsest first: whole periods from the first
# table that has them, the edges from the finer ones (:func:`owner_rows`, :func:`pod_rows`)
OWNER_READS: tuple[tuple[Any, str], ...] = (
    (CostMonth, "month"),
    (CostDay, "day"),
    (CostHour, "hour"),
)
POD_READS: tuple[tuple[Any, str], ...] = ((CostPodDay, "day"), (Chargeback, "hour"))


def pod_clusters(conn: Connection, hour: datetime, clusters: set[str], defer: bool) -> list[str]:
    """Those of ``clusters`` whose ``cost_pod_days`` of ``hour``'s day are kept hour by hour;
    the others' day is pending (``defer``: all of them, marked so here)."""
    p, day = PodDayPending, day_of(hour)
    pending = set(
        conn.execute(select(p.cluster).where(p.day == day, p.cluster.in_(clusters))).scalars()
    )
    if not defer:
        return sorted(clusters - pending)
    rows = [{"day": day, "cluster": c, "day_end": day + DAY} for c in sorted(clusters - pending)]
    if rows:
        conn.execute(sa_insert(PodDayPending), rows)
    return []


def take_hour(conn: Connection, hour: datetime, clusters: set[str], kept: list[str]) -> bool:
    """Subtract the chargeback rows of ``hour`` (these clusters) from its day: call before
    they are replaced (``kept``: :func:`pod_clusters`). False when there were none (a first
    ingest of the hour).

    On PostgreSQL the rows are only summed per pod into a temporary table here, and
    :func:`put_hour` adds the difference, new minus old, in one upsert per rollup: a re-write
    touches each rollup row once instead of twice, and not at all where the pod's sums did not
    change (a re-ingest of the same data)."""
    c = Chargeback
    held = select(c.id).where(c.hour == hour, c.cluster.in_(clusters)).limit(1)
    if conn.execute(held).first() is None:
        return False
    if conn.dialect.name == "postgresql":
        conn.execute(
            text(f"CREATE TEMP TABLE {TAKEN} ON COMMIT DROP AS {_PER_POD}"), _at(hour, clusters)
        )
    else:
        _add_hour(conn, hour, clusters, -1, kept)
    return True


def put_hour(
    conn: Connection, hour: datetime, clusters: set[str], took: bool, kept: list[str]
) -> None:
    """The hour's ``cost_hours`` (these clusters) recomputed from its chargeback rows, and
    those rows added to its day and month (to ``cost_pod_days`` for the ``kept`` clusters:
    :func:`pod_clusters`): call after they are written; ``took``: :func:`take_hour`
    subtracted rows first (then rows left with no lines are dropped). On PostgreSQL in one
    statement: the hour's rows are grouped once."""
    if conn.dialect.name == "postgresql":
        conn.execute(delete(CostHour).where(CostHour.hour == hour, CostHour.cluster.in_(clusters)))
        params = {**_at(hour, clusters), "day": day_of(hour), "month": month_start(hour)}
        conn.execute(text(_put(took, bool(kept))), {**params, "kept": kept})
        if took:
            conn.execute(text(f"DROP TABLE {TAKEN}"))
    else:
        refresh_cost_hours(conn, hour, clusters)
        _add_hour(conn, hour, clusters, 1, kept)
    if took:
        for table, period, of, _ in ADDED:
            conn.execute(
                delete(table).where(
                    getattr(table, period) == of(hour),
                    table.cluster.in_(clusters),
                    table.lines <= 0,
                )
            )


def _at(hour: datetime, clusters: set[str]) -> dict[str, Any]:
    return {"hour": hour, "clusters": sorted(clusters)}


# PostgreSQL: the hour's rows summed per pod once, and the three rollups upserted from those
# sums in one statement (data-modifying CTEs): cost_days and cost_months sum the per-pod sums
# per owner instead of grouping the hour's chargeback rows again. Built from the column names
# above (no outside text; the values are bound parameters).
TAKEN = "rollup_taken"
_VALUES = ("lines", *AMOUNTS)
_POD, _OWNER = ", ".join(POD), ", ".join(OWNER_KEY)
_SUMMED = ", ".join(f"sum({v}) AS {v}" for v in _VALUES)
_PER_POD = (
    f"SELECT {_POD}, count(*) AS lines, {', '.join(f'sum({a}) AS {a}' for a in AMOUNTS)} "  # noqa: S608
    f"FROM chargeback WHERE hour = :hour AND cluster = ANY(:clusters) GROUP BY {_POD}"
)
# a re-write: the new sums minus the taken ones, only for the pods whose sums changed
_NET = (
    f"SELECT {_POD}, {_SUMMED} FROM (SELECT * FROM new UNION ALL "  # noqa: S608
    f"SELECT {_POD}, {', '.join(f'-{v}' for v in _VALUES)} FROM {TAKEN}) AS both_ "
    f"GROUP BY {_POD} HAVING {' OR '.join(f'sum({v}) <> 0' for v in _VALUES)}"
)
# cost_hours of the hour: the new per-pod sums per owner (as refresh_cost_hours sums the
# hour's rows)
_HOURS = (
    f"INSERT INTO cost_hours (hour, {_OWNER}, {', '.join(AMOUNTS)}) "  # noqa: S608
    f"SELECT :hour, {_OWNER}, {', '.join(f'sum({a})' for a in AMOUNTS)} FROM new "
    f"GROUP BY {_OWNER}"
)


def _upsert(table: str, period: str, key: tuple[str, ...], source: str) -> str:
    cols = ", ".join((*key, *_VALUES))
    added = ", ".join(f"{v} = {table}.{v} + excluded.{v}" for v in _VALUES)
    return (
        f"INSERT INTO {table} ({period}, {cols}) SELECT :{period}, {cols} FROM {source} "  # noqa: S608
        f"ON CONFLICT ({period}, {', '.join(key)}) DO UPDATE SET {added}"
    )


@cache
def _put(took: bool, pods: bool = True) -> str:
    """The one statement of :func:`put_hour` (PostgreSQL); ``pods``: with the upsert of the
    ``:kept`` clusters' pods into ``cost_pod_days``."""
    to_pods = _upsert("cost_pod_days", "day", POD, "pods WHERE cluster = ANY(:kept)")
    return (
        f"WITH new AS ({_PER_POD}), pods AS ({_NET if took else 'SELECT * FROM new'}), "  # noqa: S608
        f"owners AS (SELECT {_OWNER}, {_SUMMED} FROM pods GROUP BY {_OWNER}), "
        f"to_hours AS ({_HOURS}), "
        f"{f'to_pods AS ({to_pods}), ' if pods else ''}"
        f"to_days AS ({_upsert('cost_days', 'day', OWNER_KEY, 'owners')}) "
        f"{_upsert('cost_months', 'month', OWNER_KEY, 'owners')}"
    )


def refresh_cost_hours(conn: Connection, hour: datetime, clusters: set[str]) -> None:
    """Recompute ``cost_hours`` of ``hour`` for these clusters from its chargeback rows."""
    c = Chargeback
    conn.execute(delete(CostHour).where(CostHour.hour == hour, CostHour.cluster.in_(clusters)))
    owner = (c.hour, c.cluster, *(getattr(c, o) for o in OWNER), c.currency)
    sums = select(*owner, *(func.sum(getattr(c, m)) for m in AMOUNTS))
    rollup = sums.where(c.hour == hour, c.cluster.in_(clusters)).group_by(*owner)
    columns = ["hour", "cluster", *OWNER, "currency", *AMOUNTS]
    conn.execute(sa_insert(CostHour).from_select(columns, rollup))


def _add_hour(
    conn: Connection, hour: datetime, clusters: set[str], sign: int, kept: list[str]
) -> None:
    """``sign`` x the hour's rows, per key, upserted into each added rollup in SQL (one
    statement each; ``cost_pod_days`` only for the ``kept`` clusters)."""
    c = Chargeback
    insert: Any = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    for table, period, of, key in ADDED:
        mine = kept if table is CostPodDay else sorted(clusters)
        if not mine:
            continue
        rows = _summed(of(hour), key, sign, c.hour == hour, c.cluster.in_(mine))
        stmt = insert(table).from_select([period, *key, "lines", *AMOUNTS], rows)
        stmt = stmt.on_conflict_do_update(
            index_elements=[period, *key],
            set_={a: getattr(table, a) + getattr(stmt.excluded, a) for a in ("lines", *AMOUNTS)},
        )
        conn.execute(stmt)


def _summed(period: datetime, key: tuple[str, ...], sign: int, *where: Any) -> Any:
    """The chargeback rows ``where`` says, per ``key``: ``period``, the key, ``sign`` x their
    count and amounts (a rollup's columns, in its order)."""
    c = Chargeback
    cols = [getattr(c, k) for k in key]
    return (
        select(
            literal(period, DateTime(timezone=True)),
            *cols,
            sign * func.count(),
            *(sign * func.sum(getattr(c, m)) for m in AMOUNTS),
        )
        .where(*where)
        .group_by(*cols)
    )


def flush_pod_day(conn: Connection, day: datetime, cluster: str) -> bool:
    """A pending day's ``cost_pod_days`` (one cluster) written from its chargeback, and the
    day no longer pending; False where it was not pending. Call under the writers' lock."""
    p = PodDayPending
    where = (p.day == day, p.cluster == cluster)
    if conn.execute(select(p.day).where(*where)).first() is None:
        return False
    conn.execute(delete(CostPodDay).where(CostPodDay.day == day, CostPodDay.cluster == cluster))
    c = Chargeback
    rows = _summed(day, POD, 1, c.hour >= day, c.hour < day + DAY, c.cluster == cluster)
    conn.execute(sa_insert(CostPodDay).from_select(["day", *POD, "lines", *AMOUNTS], rows))
    conn.execute(delete(p).where(*where))
    return True


def pending_pod_days(conn: Connection) -> list[tuple[datetime, str]]:
    """Every pending (day, cluster), in order."""
    p = PodDayPending
    found = conn.execute(select(p.day, p.cluster).order_by(p.day, p.cluster))
    return [(as_utc(d), c) for d, c in found]


def _ceil_day(t: datetime) -> datetime:
    d = day_of(t)
    return d if d == t.astimezone(UTC) else d + DAY


def owner_rows(start: datetime, end: datetime, grain: str = "month") -> Any:
    """The per-owner rows of [start, end) as one subquery with ``cost_hours``'s columns
    (``hour``, cluster, team, project, stage, currency, the amounts): whole UTC months from
    ``cost_months`` (``hour`` = the month's first instant) when ``grain`` is ``month``, whole
    UTC days from ``cost_days`` unless it is ``hour``, the rest from ``cost_hours``. Sums over
    it per any owner column, and buckets of ``grain`` or longer, equal those of
    ``cost_hours``."""
    cols = ("cluster", *OWNER, "currency", *AMOUNTS)
    periods = {"hour": ("hour",), "month": ("month", "day", "hour")}.get(grain, ("day", "hour"))
    tables = [(t, p) for t, p in OWNER_READS if p in periods]
    return _ranged(tables, cols, start, end, "owner_rows")


def pod_rows(start: datetime, end: datetime) -> Any:
    """The per-pod rows of [start, end) (``hour``, cluster, team, project, stage, namespace,
    pod, currency, the amounts): whole UTC days from ``cost_pod_days`` — a pending day's
    (costsvc/db/models.py ``PodDayPending``) from the chargeback — the rest from the
    chargeback. Sums over it per any of those columns equal the chargeback's."""
    cols = (*POD, *AMOUNTS)
    d, c, p = CostPodDay, Chargeback, PodDayPending
    charged = select(c.hour.label("hour"), *(getattr(c, n) for n in cols))
    parts = []
    for t, _, a, b in _pieces(list(POD_READS), start, end):
        if t is not CostPodDay:
            parts.append(charged.where(c.hour >= a, c.hour < b))
            continue
        pending = select(p.day).where(p.day == d.day, p.cluster == d.cluster).exists()
        parts.append(
            select(d.day.label("hour"), *(getattr(d, n) for n in cols)).where(
                d.day >= a, d.day < b, ~pending
            )
        )
        parts.append(  # (driven by the pending days: none, most of the time)
            charged.join(
                p, (p.cluster == c.cluster) & (c.hour >= p.day) & (c.hour < p.day_end)
            ).where(p.day >= a, p.day < b)
        )
    if not parts:  # an empty range: no rows
        parts = [charged.where(c.hour < c.hour)]
    both = parts[0] if len(parts) == 1 else union_all(*parts)
    return both.subquery("pod_rows")


def _ceil_month(t: datetime) -> datetime:
    m = month_start(t)
    return m if m == t.astimezone(UTC) else months_after(m)


def _pieces(
    tables: list[tuple[Any, str]], start: datetime, end: datetime
) -> list[tuple[Any, str, datetime, datetime]]:
    """[start, end) cut into (table, period column, a, b): the coarsest table for each whole
    period, finer ones for the edges."""
    table, period = tables[0]
    if period == "hour":
        hourly, col = tables[-1]
        return [(hourly, col, start, end)] if start < end else []
    if period == "day":
        a, b = _ceil_day(start), day_of(end)
    else:
        a, b = _ceil_month(start), month_start(end)
    if a >= b:
        return _pieces(tables[1:], start, end)
    return [
        *_pieces(tables[1:], start, a),
        (table, period, a, b),
        *_pieces(tables[1:], b, end),
    ]


def _ranged(
    tables: list[tuple[Any, str]], cols: tuple[str, ...], start: datetime, end: datetime, name: str
) -> Any:
    parts = [
        select(getattr(t, p).label("hour"), *(getattr(t, c) for c in cols)).where(
            getattr(t, p) >= a, getattr(t, p) < b
        )
        for t, p, a, b in _pieces(tables, start, end)
    ]
    if not parts:  # an empty range: no rows
        t, p = tables[-1]
        parts = [
            select(getattr(t, p).label("hour"), *(getattr(t, c) for c in cols)).where(
                getattr(t, p) >= start, getattr(t, p) < start
            )
        ]
    if len(parts) == 1:
        return parts[0].subquery(name)
    return union_all(*parts).subquery(name)
