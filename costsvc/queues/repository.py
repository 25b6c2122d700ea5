"""``queue_hours``: an hour's Kueue quota against use and the borrowing policy's money,
written in the hour's transaction (costsvc/db/hour_facts.py) and read back for a reprice.

The rows keep the facts (resource-seconds) next to the money, so a reprice recomputes the money
from them with the policy and prices in force (costsvc/rules/queues.py), no Prometheus
needed; the team owning each ClusterQueue stays as it was at that hour.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from sqlalchemy import Connection, Engine, delete, select

from costsvc.db.bulk import insert_tuples
from costsvc.db.lines import closed_months
from costsvc.db.models import QueueHourRow
from costsvc.kit.times import as_utc, month_of
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
)
QueueRows = Mapping[str, Sequence[QueueHour]]  # cluster -> its rows of the hour


def write_queues(
    conn: Connection, hour: datetime, clusters: set[str], rows: QueueRows, currency: str
) -> None:
    """Make the hour's ``queue_hours`` rows (for these clusters and those of ``rows``) equal
    ``rows``; an hour of a closed month is left as it was billed (its rows are lines of the
    month's reports, whose SHA-256 the close recorded: docs/queues.md, "A closed month")."""
    if month_of(hour) in closed_months(conn):
        return
    t = QueueHourRow
    conn.execute(delete(t).where(t.hour == hour, t.cluster.in_(clusters | set(rows))))
    tuples = [
        (
            hour,
            cluster,
            r.use.cohort,
            r.use.cluster_queue,
            r.use.flavor,
            r.use.resource,
            r.use.team,
            r.use.nominal,
            r.use.used,
            r.within,
            r.borrowed,
            r.lent,
            r.idle,
            r.policy,
            currency,
            r.charge,
            r.credit,
            r.price,
            r.premium_ppm,
        )
        for cluster, found in sorted(rows.items())
        for r in found
    ]
    insert_tuples(conn, t, COLUMNS, tuples)


def load_queues(conn: Connection, hour: datetime) -> dict[str, list[QueueHour]]:
    """An ingested hour's rows per cluster, as stored (their money included)."""
    t = QueueHourRow
    out: dict[str, list[QueueHour]] = {}
    for r in conn.execute(select(*t.__table__.c).where(t.hour == hour).order_by(t.id)):
        use = QueueUse(
            r.cohort, r.cluster_queue, r.flavor, r.resource, int(r.nominal_s), int(r.used_s), r.team
        )
        row = QueueHour(
            use,
            int(r.within_s),
            int(r.borrowed_s),
            int(r.lent_s),
            int(r.idle_s),
            int(r.charge),
            int(r.credit),
            r.policy,
            None if r.price is None else int(r.price),
            int(r.premium_ppm),
        )
        out.setdefault(r.cluster, []).append(row)
    return out


def charged_terms(engine: Engine) -> list[tuple[datetime, str, str, str, int, int | None]]:
    """Each stored hour's (flavor, resource) with the terms its rows were priced on: policy,
    premium (millionths), price per resource-hour (costsvc/rules/queues.py ``terms``); the
    hours of closed months left out (they are not repriced: :func:`write_queues`)."""
    t = QueueHourRow
    cols = (t.hour, t.flavor, t.resource, t.policy, t.premium_ppm, t.price)
    with engine.connect() as conn:
        found = conn.execute(select(*cols).distinct()).all()
        closed = closed_months(conn)
    return [
        (as_utc(h), f, r, p, int(m), None if c is None else int(c))
        for h, f, r, p, m, c in found
        if month_of(as_utc(h)) not in closed  # billed as they are (write_queues)
    ]
