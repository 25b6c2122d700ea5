"""The daily rollups: ``cost_days`` per owner and ``cost_pod_days`` per owner, namespace and
pod, kept in the hour's transaction, and read over a range as whole days from them plus the
partial-day edges from the hourly tables (``cost_hours``, the chargeback).

A day is a UTC day — the days billing months are cut in (costsvc/chargeback.py: months are
UTC), and the buckets ``step=day``/``month`` answer in. Every writer of chargeback rows goes
through ``costsvc/db/lines.py write_lines`` (ingest, reprice, re-ingest of an hour, corrections
of a closed month): it takes the hour's per-pod sums before (:func:`hour_sums`) and after it
writes, and :func:`apply_delta` adds the difference to the hour's day — integers, so the day
stays Σ of its hours exactly, at the cost of the hour's own rows (re-summing the day's
chargeback instead took ~1.2 s an hour at 5,000 pods). ``lines`` counts the chargeback rows
under a rollup row: a row whose count falls to 0 is deleted, so a day has a row for an owner
(a pod) exactly when the hourly tables do.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, delete, func, select, union_all
from sqlalchemy.dialects import postgresql, sqlite

from costsvc.chargeback import AMOUNTS, OWNER
from costsvc.db.models import Chargeback, CostDay, CostHour, CostPodDay

DAY = timedelta(days=1)
# False: every read sums cost_hours (the tests compare both paths; nothing else sets it)
USE_DAYS = True
POD = ("cluster", *OWNER, "namespace", "pod", "currency")  # cost_pod_days' key, with day
OWNER_KEY = ("cluster", *OWNER, "currency")  # cost_days' key, with day
_OWNER_AT = [POD.index(k) for k in OWNER_KEY]

Sums = dict[tuple[str, ...], list[int]]  # key -> [lines, *AMOUNTS]


def day_of(hour: datetime) -> datetime:
    """The first instant of ``hour``'s UTC day."""
    h = hour.astimezone(UTC)
    return datetime(h.year, h.month, h.day, tzinfo=UTC)


def hour_sums(conn: Connection, hour: datetime, clusters: set[str]) -> Sums:
    """The chargeback rows of ``hour`` (these clusters) per :data:`POD` key: count and sums."""
    c = Chargeback
    key = [getattr(c, k) for k in POD]
    q = (
        select(*key, func.count(), *(func.sum(getattr(c, m)) for m in AMOUNTS))
        .where(c.hour == hour, c.cluster.in_(clusters))
        .group_by(*key)
    )
    n = len(POD)
    return {tuple(r[:n]): [int(v or 0) for v in r[n:]] for r in conn.execute(q)}


def apply_delta(conn: Connection, hour: datetime, before: Sums, after: Sums) -> None:
    """Add ``after - before`` (the hour's per-pod sums) to ``hour``'s day in
    ``cost_pod_days`` and, summed per owner, ``cost_days``."""
    width = 1 + len(AMOUNTS)
    pods: Sums = {}
    for k in before.keys() | after.keys():
        new, old = after.get(k, [0] * width), before.get(k, [0] * width)
        delta = [a - b for a, b in zip(new, old, strict=True)]
        if any(delta):
            pods[k] = delta
    if not pods:
        return
    owners: Sums = {}
    for k, delta in pods.items():
        got = owners.setdefault(tuple(k[i] for i in _OWNER_AT), [0] * width)
        for i, v in enumerate(delta):
            got[i] += v
    day = day_of(hour)
    _add(conn, CostPodDay, POD, day, pods)
    _add(conn, CostDay, OWNER_KEY, day, owners)


def _add(conn: Connection, table: Any, key: tuple[str, ...], day: datetime, deltas: Sums) -> None:
    """Upsert ``deltas`` into ``table``'s rows of ``day``; drop rows left with no lines."""
    pg = conn.dialect.name == "postgresql"
    cols = ("lines", *AMOUNTS)
    rows = [
        {"day": day, **dict(zip(key, k, strict=True)), **dict(zip(cols, d, strict=True))}
        for k, d in sorted(deltas.items())
    ]
    stmt: Any = postgresql.insert(table) if pg else sqlite.insert(table)
    stmt = stmt.on_conflict_do_update(
        index_elements=["day", *key],
        set_={c: getattr(table, c) + getattr(stmt.excluded, c) for c in cols},
    )
    conn.execute(stmt, rows)
    if any(d[0] < 0 for d in deltas.values()):  # some key lost lines: maybe all of them
        clusters = {k[0] for k in deltas}  # key[0] is the cluster
        conn.execute(
            delete(table).where(table.day == day, table.cluster.in_(clusters), table.lines <= 0)
        )


def _ceil_day(t: datetime) -> datetime:
    d = day_of(t)
    return d if d == t.astimezone(UTC) else d + DAY


def owner_rows(start: datetime, end: datetime, hourly: bool = False) -> Any:
    """The per-owner rows of [start, end) as one subquery with ``cost_hours``'s columns
    (``hour``, cluster, team, project, stage, currency, the amounts): whole UTC days from
    ``cost_days`` (``hour`` = the day's first instant) and the edges from ``cost_hours``. Sums
    over it per any owner column, and buckets of a day or longer, equal those of
    ``cost_hours``; ``hourly``: ``cost_hours`` only (hour buckets, an hour's own rows)."""
    cols = ("cluster", *OWNER, "currency", *AMOUNTS)
    return _ranged(CostDay, CostHour, cols, start, end, hourly, "owner_rows")


def pod_rows(start: datetime, end: datetime) -> Any:
    """The per-pod rows of [start, end) (``hour``, cluster, team, project, stage, namespace,
    pod, currency, the amounts): whole UTC days from ``cost_pod_days``, the edges from the
    chargeback. Sums over it per any of those columns equal the chargeback's."""
    return _ranged(CostPodDay, Chargeback, (*POD, *AMOUNTS), start, end, False, "pod_rows")


def _ranged(
    days: Any,
    hours: Any,
    cols: tuple[str, ...],
    start: datetime,
    end: datetime,
    hourly: bool,
    name: str,
) -> Any:
    d0, d1 = _ceil_day(start), day_of(end)
    h = hours
    if hourly or not USE_DAYS or d0 >= d1:
        return (
            select(h.hour, *(getattr(h, c) for c in cols))
            .where(h.hour >= start, h.hour < end)
            .subquery(name)
        )
    whole = select(days.day.label("hour"), *(getattr(days, c) for c in cols)).where(
        days.day >= d0, days.day < d1
    )
    edges = [
        select(h.hour, *(getattr(h, c) for c in cols)).where(h.hour >= a, h.hour < b)
        for a, b in ((start, d0), (d1, end))
        if a < b
    ]
    return union_all(whole, *edges).subquery(name)
