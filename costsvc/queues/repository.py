"""``queue_hours``: an hour's Kueue quota against use and the borrowing policy's money,
written in the hour's transaction (costsvc/db/hour_facts.py) and read back for a reprice.

An hour is billed in its own month. Once that month is closed its rows stay as billed: a later
ingest or reprice of the hour writes the difference (new minus everything billed for the hour
and ClusterQueue, flavor and resource: resource-seconds, charge and credit) as **correction**
rows billed in the next open month, as the GPU rows do (costsvc/db/lines.py). Read back, an
hour is the sum of its rows, its terms those of its latest.

The rows keep the facts (resource-seconds) next to the money, so a reprice recomputes the money
from them with the policy and prices in force (costsvc/rules/queues.py), no Prometheus
needed; the team owning each ClusterQueue stays as it was at that hour.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, delete, select, update

from costsvc.db.bulk import insert_tuples
from costsvc.db.lines import closed_months
from costsvc.db.models import QueueHourRow
from costsvc.kit.times import as_utc, month_of
from costsvc.rules.chargeback import billing_month_for
from costsvc.rules.queues import QueueHour, QueueUse

COLUMNS = (
    "hour",
    "cluster",
    "cohort",
    "cluster_queue",
    "flavor",
    "resource",
    "team",
    "nominal_s",
    "used_s",
    "within_s",
    "borrowed_s",
    "lent_s",
    "idle_s",
    "policy",
    "currency",
    "charge",
    "credit",
    "price",
    "premium_ppm",
    "billing_month",
    "correction",
)
KEY = ("cluster", "cohort", "cluster_queue", "flavor", "resource")
SECONDS = ("nominal_s", "used_s", "within_s", "borrowed_s", "lent_s", "idle_s")
SUMMED = (*SECONDS, "charge", "credit")  # what a correction holds the difference of
QueueRows = Mapping[str, Sequence[QueueHour]]  # cluster -> its rows of the hour


def write_queues(
    conn: Connection, hour: datetime, clusters: set[str], rows: QueueRows, currency: str
) -> None:
    """Make the hour's ``queue_hours`` rows (for these clusters and those of ``rows``) add up
    to ``rows``: replaced in an open month; of a closed month (its rows are lines of reports
    whose SHA-256 the close recorded), the difference is written as corrections."""
    t = QueueHourRow
    own, closed = month_of(hour), closed_months(conn)
    where = (t.hour == hour, t.cluster.in_(clusters | set(rows)))
    if own not in closed:
        conn.execute(delete(t).where(*where))
        tuples = [_tuple(hour, c, r, currency, own, False) for c, r in _flat(rows)]
        insert_tuples(conn, t, COLUMNS, tuples)
        return
    target = billing_month_for(own, closed)
    billed = {k: (v, row) for k, v, row in _summed(conn, where)}
    for cluster, r in _flat(rows):
        key: tuple[str, ...] = (
            cluster,
            r.use.cohort,
            r.use.cluster_queue,
            r.use.flavor,
            r.use.resource,
        )
        new = _tuple(hour, cluster, r, currency, target, True)
        old, last = billed.pop(key, ([0] * len(SUMMED), None))
        delta = [new[COLUMNS.index(c)] - o for c, o in zip(SUMMED, old, strict=True)]  # type: ignore[operator]
        terms = tuple(new[COLUMNS.index(c)] for c in ("policy", "price", "premium_ppm"))
        if any(delta) or last is None or terms != (last.policy, last.price, last.premium_ppm):
            _correct(conn, (*where, t.billing_month == target), key, new, delta)
    for was, (old, last) in billed.items():  # gone from the hour: take back what was billed
        gone = [-o for o in old]
        if any(gone):
            head = (hour, *was, last.team, *([0] * 6), last.policy, currency, 0, 0)
            row = (*head, last.price, last.premium_ppm, target, True)
            _correct(conn, (*where, t.billing_month == target), was, row, gone)


def _flat(rows: QueueRows) -> list[tuple[str, QueueHour]]:
    return [(cluster, r) for cluster, found in sorted(rows.items()) for r in found]


def _tuple(
    hour: datetime, cluster: str, r: QueueHour, currency: str, month: str, correction: bool
) -> tuple[object, ...]:
    u = r.use
    facts = (u.team, u.nominal, u.used, r.within, r.borrowed, r.lent, r.idle)
    money = (r.policy, currency, r.charge, r.credit, r.price, r.premium_ppm)
    return (
        hour,
        cluster,
        u.cohort,
        u.cluster_queue,
        u.flavor,
        u.resource,
        *facts,
        *money,
        month,
        correction,
    )


def _summed(
    conn: Connection, where: tuple[object, ...]
) -> list[tuple[tuple[str, ...], list[int], Any]]:
    """Per ClusterQueue, flavor and resource of the hour: Σ of its rows' :data:`SUMMED` and its
    latest row (by billing month: its terms are what the hour was last priced on)."""
    t = QueueHourRow
    out: dict[tuple[str, ...], tuple[list[int], Any]] = {}
    order = (t.billing_month, t.id)
    for r in conn.execute(select(*t.__table__.c).where(*where).order_by(*order)):  # type: ignore[arg-type]
        key = tuple(getattr(r, c) for c in KEY)
        sums, _ = out.get(key, ([0] * len(SUMMED), None))
        out[key] = ([s + int(getattr(r, c)) for s, c in zip(sums, SUMMED, strict=True)], r)
    return [(k, v, row) for k, (v, row) in out.items()]


def _correct(
    conn: Connection,
    where: tuple[object, ...],
    key: tuple[str, ...],
    row: tuple[object, ...],
    delta: list[int],
) -> None:
    """Add ``delta`` to the hour's correction row of ``key`` in the target month (made from
    ``row``, the new terms, where there is none yet)."""
    t = QueueHourRow
    match = (*where, *(getattr(t, c) == v for c, v in zip(KEY, key, strict=True)))
    existing = conn.execute(select(t.id).where(*match)).scalar()
    terms = {c: row[COLUMNS.index(c)] for c in ("policy", "price", "premium_ppm")}
    if existing is None:
        values = dict(zip(COLUMNS, row, strict=True))
        values.update(zip(SUMMED, delta, strict=True))
        insert_tuples(conn, t, COLUMNS, [tuple(values[c] for c in COLUMNS)])
        return
    added = {c: getattr(t, c) + d for c, d in zip(SUMMED, delta, strict=True)}
    conn.execute(update(t).where(t.id == existing).values({**added, **terms}))


def load_queues(conn: Connection, hour: datetime) -> dict[str, list[QueueHour]]:
    """An ingested hour's rows per cluster and ClusterQueue, flavor and resource, as stored:
    the sum of its rows (corrections included), on the terms of its latest."""
    out: dict[str, list[QueueHour]] = {}
    for key, v, r in _summed(conn, (QueueHourRow.hour == hour,)):
        nominal, used, within, borrowed, lent, idle, charge, credit = v
        row: Any = r
        use = QueueUse(key[1], key[2], key[3], key[4], nominal, used, row.team)
        price = None if row.price is None else int(row.price)
        found = QueueHour(
            use,
            within,
            borrowed,
            lent,
            idle,
            charge,
            credit,
            row.policy,
            price,
            int(row.premium_ppm),
        )
        out.setdefault(key[0], []).append(found)
    return out


def charged_terms(engine: Engine) -> list[tuple[datetime, str, str, str, int, int | None]]:
    """Each stored hour's (flavor, resource) with the terms it was last priced on: policy,
    premium (millionths), price per resource-hour (costsvc/rules/queues.py ``terms``) — those of
    its latest row, a correction's where a closed month's hour was repriced since."""
    t = QueueHourRow
    cols = (t.hour, *(getattr(t, c) for c in KEY), t.policy, t.premium_ppm, t.price)
    latest: dict[tuple[object, ...], tuple[datetime, str, str, str, int, int | None]] = {}
    with engine.connect() as conn:
        for r in conn.execute(select(*cols).order_by(t.billing_month, t.id)):
            h, c = as_utc(r.hour), r.price
            latest[(h, *r[1:6])] = (h, r.flavor, r.resource, r.policy, int(r.premium_ppm), c)
    return sorted(set(latest.values()), key=str)
