"""The declarative base of the tables and the column sets several tables share, each written
once as a mixin. Money is integer micro-units of the billing currency (BigInteger), never
floats; durations are integer micro-seconds. Constraint names come from one naming convention
so they are the same on SQLite and PostgreSQL.

A table's columns stand in this order: the leading mixins' (``sort_order=LEAD``: the row's id
and the head of its key), the table's own, the other mixins' in the order of its bases, then
the table's own columns marked ``sort_order=AFTER``."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, MetaData, String, false
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",  # short: PostgreSQL cuts names at 63
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
LEAD = -1  # a mixin's columns placed before the table's own
AFTER = 1  # a table's own columns placed after its mixins'


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Hourly:
    """The head of an hour's row: its id, the hour and the cluster."""

    id: Mapped[int] = mapped_column(primary_key=True, sort_order=LEAD)
    hour: Mapped[datetime] = mapped_column(DateTime(timezone=True), sort_order=LEAD)
    cluster: Mapped[str] = mapped_column(String(253), sort_order=LEAD)


class Daily:
    """The head of a day's rollup row: its id, the UTC day (its first instant), the cluster."""

    id: Mapped[int] = mapped_column(primary_key=True, sort_order=LEAD)
    day: Mapped[datetime] = mapped_column(DateTime(timezone=True), sort_order=LEAD)
    cluster: Mapped[str] = mapped_column(String(253), sort_order=LEAD)


class Owned:
    """The owner a row's money is charged to, after the head of its key."""

    team: Mapped[str] = mapped_column(String(253), sort_order=LEAD)
    project: Mapped[str] = mapped_column(String(253), sort_order=LEAD)
    stage: Mapped[str] = mapped_column(String(253), sort_order=LEAD)


class Money:
    """An owner's money of its GPU time (micro-units): allocated, used, wasted, the idle
    spread onto it, and the time held (micro GPU-hours)."""

    allocated: Mapped[int] = mapped_column(BigInteger)
    used: Mapped[int] = mapped_column(BigInteger)
    waste: Mapped[int] = mapped_column(BigInteger)
    idle: Mapped[int] = mapped_column(BigInteger)
    gpu_hours: Mapped[int] = mapped_column(BigInteger)


class Charged(Money):
    """The money of a row written by the ingest, in its currency."""

    currency: Mapped[str] = mapped_column(String(3))


class Lost:
    """Of an __idle__ row's idle: what the time its GPUs were lost cost, and how long; the
    energy (mJ) and CO2e (mg) of the row, and of them the idle GPUs'. Columns added to tables
    that had rows already: they default to 0."""

    unavailable: Mapped[int] = mapped_column(BigInteger, server_default="0")
    unavailable_gpu_hours: Mapped[int] = mapped_column(BigInteger, server_default="0")
    energy_mj: Mapped[int] = mapped_column(BigInteger, server_default="0")
    idle_energy_mj: Mapped[int] = mapped_column(BigInteger, server_default="0")
    co2e_mg: Mapped[int] = mapped_column(BigInteger, server_default="0")
    idle_co2e_mg: Mapped[int] = mapped_column(BigInteger, server_default="0")


class Summed(Money):
    """The columns a daily or monthly rollup sums (integer micro-units, mJ, mg), after its key:
    ``lines``, the chargeback rows summed into the row, then :class:`Money`'s, then those of
    :class:`Lost` (here without a server default: the rollups were created with them)."""

    currency: Mapped[str] = mapped_column(String(3))
    lines: Mapped[int] = mapped_column(BigInteger)
    unavailable: Mapped[int] = mapped_column(BigInteger, sort_order=AFTER)
    unavailable_gpu_hours: Mapped[int] = mapped_column(BigInteger, sort_order=AFTER)
    energy_mj: Mapped[int] = mapped_column(BigInteger, sort_order=AFTER)
    idle_energy_mj: Mapped[int] = mapped_column(BigInteger, sort_order=AFTER)
    co2e_mg: Mapped[int] = mapped_column(BigInteger, sort_order=AFTER)
    idle_co2e_mg: Mapped[int] = mapped_column(BigInteger, sort_order=AFTER)


class PodVersion:
    """The head of a pod's versioned row: its id, cluster, UID, namespace and name."""

    id: Mapped[int] = mapped_column(primary_key=True, sort_order=LEAD)
    cluster: Mapped[str] = mapped_column(String(253), sort_order=LEAD)
    uid: Mapped[str] = mapped_column(String(64), sort_order=LEAD)
    namespace: Mapped[str] = mapped_column(String(253), sort_order=LEAD)
    name: Mapped[str] = mapped_column(String(253), sort_order=LEAD)


class Valid:
    """The validity of a row of an object's history: [valid_from, valid_to), valid_to NULL
    while it holds."""

    valid_from: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    valid_to: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Reported:
    """A namespaced Kubernetes object as the API last reported it: the row's id, cluster and
    namespace lead, when it was seen (``seen_at``) follows the table's own columns."""

    id: Mapped[int] = mapped_column(primary_key=True, sort_order=LEAD)
    cluster: Mapped[str] = mapped_column(String(253), sort_order=LEAD)
    namespace: Mapped[str] = mapped_column(String(253), sort_order=LEAD)
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Advised:
    """The head of an advice row (replaced as a whole by each run): its id, cluster, when it
    was computed and over which window, and the team and namespace it is for."""

    id: Mapped[int] = mapped_column(primary_key=True, sort_order=LEAD)
    cluster: Mapped[str] = mapped_column(String(253), sort_order=LEAD)
    computed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), sort_order=LEAD)
    window_start: Mapped[datetime] = mapped_column(DateTime(timezone=True), sort_order=LEAD)
    window_end: Mapped[datetime] = mapped_column(DateTime(timezone=True), sort_order=LEAD)
    team: Mapped[str] = mapped_column(String(253), sort_order=LEAD)
    namespace: Mapped[str] = mapped_column(String(253), sort_order=LEAD)


class QuotaSeconds:
    """A ClusterQueue's flavor and resource (in its cohort, owned by a team) and its quota
    against use in resource-seconds of an hour (costsvc/rules/queues.py): nominal, used, used
    within the quota, borrowed, lent to others, left idle."""

    cohort: Mapped[str] = mapped_column(String(253))
    cluster_queue: Mapped[str] = mapped_column(String(253))
    flavor: Mapped[str] = mapped_column(String(253))
    resource: Mapped[str] = mapped_column(String(253))
    team: Mapped[str] = mapped_column(String(253))

    nominal_s: Mapped[int] = mapped_column(BigInteger)
    used_s: Mapped[int] = mapped_column(BigInteger)
    within_s: Mapped[int] = mapped_column(BigInteger)
    borrowed_s: Mapped[int] = mapped_column(BigInteger)
    lent_s: Mapped[int] = mapped_column(BigInteger)
    idle_s: Mapped[int] = mapped_column(BigInteger)


class QueueMoney:
    """After :class:`QuotaSeconds`, the borrowing policy's money of the row (docs/queues.md): the
    policy it was priced on, the currency, the charge to a borrower, the credit to a lender, the
    price per resource-hour and the premium (millionths)."""

    policy: Mapped[str] = mapped_column(String(16), sort_order=AFTER)  # none | credit_lenders
    currency: Mapped[str] = mapped_column(String(3), sort_order=AFTER)
    charge: Mapped[int] = mapped_column(BigInteger, sort_order=AFTER)
    credit: Mapped[int] = mapped_column(BigInteger, sort_order=AFTER)
    price: Mapped[int | None] = mapped_column(BigInteger, sort_order=AFTER)
    premium_ppm: Mapped[int] = mapped_column(BigInteger, sort_order=AFTER)


class QueueBilled:
    """After :class:`QueueMoney`, where a ``queue_hours`` row is billed: ``billing_month`` the
    hour's own month, or — a ``correction`` of an hour in a month closed since (the difference,
    new minus billed, costsvc/queues/repository.py) — the next open month (docs/queues.md)."""

    billing_month: Mapped[str] = mapped_column(String(7), sort_order=AFTER)  # YYYY-MM
    correction: Mapped[bool] = mapped_column(server_default=false(), sort_order=AFTER)


# the unique key of a queue_hours row: a correction is billed in another month than the hour's
QUEUE_HOUR_KEY = (
    "hour",
    "cluster",
    "cohort",
    "cluster_queue",
    "flavor",
    "resource",
    "billing_month",
)


class QueueTags:
    """After a chargeback line's own columns: its pod's Kueue queue at that hour — the
    LocalQueue, its ClusterQueue and cohort, the ResourceFlavor of the line's GPUs ("" unknown,
    docs/queues.md) — and which labels decided its owner (``owner_from``,
    costsvc/rules/owners.py: ``team=pod:team;project=namespace:project;stage=-``)."""

    queue: Mapped[str] = mapped_column(String(253), server_default="", sort_order=AFTER)
    cluster_queue: Mapped[str] = mapped_column(String(253), server_default="", sort_order=AFTER)
    cohort: Mapped[str] = mapped_column(String(253), server_default="", sort_order=AFTER)
    flavor: Mapped[str] = mapped_column(String(253), server_default="", sort_order=AFTER)
    owner_from: Mapped[str] = mapped_column(String(1000), server_default="", sort_order=AFTER)
