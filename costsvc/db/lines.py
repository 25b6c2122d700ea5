"""Chargeback rows of an hour, and corrections of closed months.

An hour is billed in its own month. Closing a month freezes its rows: when a later ingest or
reprice recomputes one of its hours (late data, a back-dated price), the rows of that hour are
left as they are and the difference — new minus everything already billed for that hour and
owner — is written as **correction** rows billed in the next open month. Σ over every row of
an hour (originals and corrections) is always that hour's current fleet cost; a closed month's
own rows, and so its reports, never change. The rollups (``cost_hours`` per hour, cluster and
owner; the days and months) follow in the same transaction (costsvc/db/rollup.py, their one
writer).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from operator import attrgetter

from sqlalchemy import Connection, delete, func, insert, select, update

from costsvc.db.bulk import insert_tuples
from costsvc.db.models import Chargeback, MonthClose
from costsvc.db.rollup import pod_clusters, put_hour, take_hour
from costsvc.kit.times import month_of
from costsvc.rules.chargeback import AMOUNTS, LINE_KEY, billing_month_for
from costsvc.rules.lines import Line

_AMOUNTS_OF = attrgetter(*AMOUNTS)
_KEY_OF = attrgetter(*LINE_KEY)
# a chargeback row as write_lines builds it: the line's key, then these, then its amounts
COLUMNS = (*LINE_KEY, "hour", "billing_month", "correction", "currency", *AMOUNTS, "unit_price")


def closed_months(conn: Connection) -> set[str]:
    return set(conn.execute(select(MonthClose.month)).scalars())


def write_lines(
    conn: Connection,
    hour: datetime,
    clusters: set[str],
    lines: Iterable[Line],
    currency: str,
    defer: bool = False,
) -> None:
    """Make the chargeback of ``hour`` (for these clusters) equal ``lines``; ``defer``: its
    day's per-pod rollup is left pending (costsvc/db/rollup.py)."""
    kept = pod_clusters(conn, hour, clusters, defer)
    took = take_hour(conn, hour, clusters, kept)  # out of the daily rollups, and back in below
    closed = closed_months(conn)
    own = month_of(hour)
    where = (Chargeback.hour == hour, Chargeback.cluster.in_(clusters))
    if own not in closed:
        conn.execute(delete(Chargeback).where(*where))
        tail = (hour, own, False, currency)
        rows = [(*_KEY_OF(ln), *tail, *_AMOUNTS_OF(ln), ln.unit_price) for ln in lines]
        insert_tuples(conn, Chargeback, COLUMNS, rows)
        put_hour(conn, hour, clusters, took, kept)
        return
    # a closed month: bill the difference as corrections in the first open month after it
    target = billing_month_for(own, closed)
    billed: dict[tuple[str, ...], list[int]] = {}
    cols = [getattr(Chargeback, c) for c in LINE_KEY]
    sums = [func.sum(getattr(Chargeback, c)) for c in AMOUNTS]
    for r in conn.execute(select(*cols, *sums).where(*where).group_by(*cols)):
        billed[tuple(r[: len(LINE_KEY)])] = [int(v or 0) for v in r[len(LINE_KEY) :]]
    wanted = {ln.key: [getattr(ln, c) for c in AMOUNTS] for ln in lines}
    for key in sorted(set(billed) | set(wanted)):
        new, old = wanted.get(key, [0] * len(AMOUNTS)), billed.get(key, [0] * len(AMOUNTS))
        delta = [a - b for a, b in zip(new, old, strict=True)]
        if not any(delta):
            continue
        match = (
            *where,
            Chargeback.billing_month == target,
            *(getattr(Chargeback, c) == v for c, v in zip(LINE_KEY, key, strict=True)),
        )
        existing = conn.execute(select(Chargeback.id).where(*match)).scalar()
        if existing is None:
            line = Line(*key)  # type: ignore[arg-type]
            for c, v in zip(AMOUNTS, delta, strict=True):
                setattr(line, c, v)
            conn.execute(insert(Chargeback), [_row(hour, line, currency, target, True)])
        else:
            added = {c: getattr(Chargeback, c) + d for c, d in zip(AMOUNTS, delta, strict=True)}
            conn.execute(update(Chargeback).where(Chargeback.id == existing).values(added))
    put_hour(conn, hour, clusters, took, kept)


def _row(
    hour: datetime, ln: Line, currency: str, month: str, correction: bool
) -> dict[str, object]:
    row: dict[str, object] = dict(zip(LINE_KEY, ln.key, strict=True))
    row.update(hour=hour, billing_month=month, correction=correction, currency=currency)
    row.update(zip(AMOUNTS, _AMOUNTS_OF(ln), strict=True))
    return row
