"""The daily rollups: ``cost_days`` per owner (from ``cost_hours``) and ``cost_pod_days``
per owner, namespace and pod (from the chargeback), kept in the hour's transaction, and read
over a range as whole days from them plus the partial-day edges from the hourly tables.

A day is a UTC day — the days billing months are cut in (costsvc/chargeback.py: months are
UTC), and the buckets ``step=day``/``month`` answer in. Every writer of chargeback rows goes
through ``costsvc/db/lines.py write_lines`` (ingest, reprice, re-ingest of an hour, corrections
of a closed month), which refreshes ``cost_hours`` and then this day from ``cost_hours``: a
recomputation, never an increment, so the day is Σ of its hours whatever happened before.
(``cost_pod_days`` re-sums the day's chargeback rows of the cluster: ~24 x pods rows, tens of
milliseconds at 5,000 pods on PostgreSQL.)
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, DateTime, delete, func, insert, literal, select, union_all

from costsvc.chargeback import AMOUNTS, OWNER
from costsvc.db.models import Chargeback, CostDay, CostHour, CostPodDay

DAY = timedelta(days=1)
# False: every read sums cost_hours (the tests compare both paths; nothing else sets it)
USE_DAYS = True


def day_of(hour: datetime) -> datetime:
    """The first instant of ``hour``'s UTC day."""
    h = hour.astimezone(UTC)
    return datetime(h.year, h.month, h.day, tzinfo=UTC)


def refresh_rollups(conn: Connection, hour: datetime, clusters: set[str]) -> None:
    """Recompute the daily rollups of ``hour``'s day for these clusters (after the hour's
    chargeback rows and ``cost_hours`` are written, in the same transaction)."""
    refresh_cost_days(conn, hour, clusters)
    refresh_cost_pod_days(conn, hour, clusters)


def refresh_cost_days(conn: Connection, hour: datetime, clusters: set[str]) -> None:
    """Recompute ``cost_days`` of ``hour``'s day for these clusters from its ``cost_hours``
    (call after the hour's ``cost_hours`` are written, in the same transaction)."""
    d0 = day_of(hour)
    h = CostHour
    conn.execute(delete(CostDay).where(CostDay.day == d0, CostDay.cluster.in_(clusters)))
    owner = (h.cluster, *(getattr(h, o) for o in OWNER), h.currency)
    rollup = (
        select(
            literal(d0, DateTime(timezone=True)),
            *owner,
            *(func.sum(getattr(h, m)) for m in AMOUNTS),
        )
        .where(h.hour >= d0, h.hour < d0 + DAY, h.cluster.in_(clusters))
        .group_by(*owner)
    )
    columns = ["day", "cluster", *OWNER, "currency", *AMOUNTS]
    conn.execute(insert(CostDay).from_select(columns, rollup))


POD = ("cluster", *OWNER, "namespace", "pod", "currency")  # cost_pod_days' key, with day


def refresh_cost_pod_days(conn: Connection, hour: datetime, clusters: set[str]) -> None:
    """Recompute ``cost_pod_days`` of ``hour``'s day for these clusters from its chargeback
    rows (call after the hour's rows are written, in the same transaction)."""
    d0 = day_of(hour)
    c = Chargeback
    conn.execute(delete(CostPodDay).where(CostPodDay.day == d0, CostPodDay.cluster.in_(clusters)))
    key = [getattr(c, k) for k in POD]
    rollup = (
        select(
            literal(d0, DateTime(timezone=True)),
            *key,
            *(func.sum(getattr(c, m)) for m in AMOUNTS),
        )
        .where(c.hour >= d0, c.hour < d0 + DAY, c.cluster.in_(clusters))
        .group_by(*key)
    )
    conn.execute(insert(CostPodDay).from_select(["day", *POD, *AMOUNTS], rollup))


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
