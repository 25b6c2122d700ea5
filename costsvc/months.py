"""Billing months, and how a closed month stays closed.

An hour is billed in its own month (``YYYY-MM``, UTC). Closing a month freezes its chargeback
rows: when a later ingest or reprice recomputes one of its hours (late data, a back-dated
price), the rows of that hour are left as they are and the difference — new minus everything
already billed for that hour and owner — is written as **correction** rows billed in the next
open month. Σ over every row of an hour (originals and corrections) is always that hour's
current fleet cost; a closed month's own rows, and so its reports, never change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, delete, func, insert, select, update

from costsvc.attribution import Line
from costsvc.db.models import Chargeback, CostHour, MonthClose
from costsvc.utc import as_utc

MONTH = re.compile(r"^(19[7-9]\d|2\d{3})-(0[1-9]|1[0-2])$")  # 1970-01 .. 2999-12
MONEY = ("allocated", "used", "waste", "idle", "gpu_hours")
KEY = ("cluster", "team", "project", "stage", "namespace", "pod", "node", "gpu_model",
       "mig_profile")  # fmt: skip


def month_of(hour: datetime) -> str:
    return f"{hour.astimezone(UTC):%Y-%m}"


def parse_month(text: str) -> tuple[datetime, datetime]:
    """``YYYY-MM`` -> [first instant, first instant of the next month), UTC."""
    m = MONTH.match(text)
    if not m:
        raise ValueError(f"month {text!r}: expected YYYY-MM, e.g. 2026-11")
    year, month = int(m[1]), int(m[2])
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return start, end


def next_month(month: str) -> str:
    _, end = parse_month(month)
    return month_of(end)


def closed_months(conn: Connection) -> set[str]:
    return set(conn.execute(select(MonthClose.month)).scalars())


def billing_month_for(month: str, closed: set[str]) -> str:
    """Where rows of an hour in ``month`` are billed: there, or the first open month after."""
    while month in closed:
        month = next_month(month)
    return month


def write_lines(conn: Connection, hour: datetime, clusters: set[str], lines: Iterable[Line],
                currency: str) -> None:  # fmt: skip
    """Make the chargeback of ``hour`` (for these clusters) equal ``lines``."""
    closed = closed_months(conn)
    own = month_of(hour)
    where = (Chargeback.hour == hour, Chargeback.cluster.in_(clusters))
    if own not in closed:
        conn.execute(delete(Chargeback).where(*where))
        rows = [_row(hour, ln, currency, own, correction=False) for ln in lines]
        if rows:
            conn.execute(insert(Chargeback), rows)
        refresh_cost_hours(conn, hour, clusters)
        return
    # a closed month: bill the difference as corrections in the first open month after it
    target = billing_month_for(own, closed)
    billed: dict[tuple[str, ...], list[int]] = {}
    cols = [getattr(Chargeback, c) for c in KEY]
    sums = [func.sum(getattr(Chargeback, c)) for c in MONEY]
    for r in conn.execute(select(*cols, *sums).where(*where).group_by(*cols)):
        billed[tuple(r[: len(KEY)])] = [int(v or 0) for v in r[len(KEY) :]]
    wanted: dict[tuple[str, ...], list[int]] = {}
    for ln in lines:
        wanted[tuple(getattr(ln, c) for c in KEY)] = [getattr(ln, c) for c in MONEY]
    for key in sorted(set(billed) | set(wanted)):
        new, old = wanted.get(key, [0] * 5), billed.get(key, [0] * 5)
        delta = [a - b for a, b in zip(new, old, strict=True)]
        if not any(delta):
            continue
        match = (*where, Chargeback.billing_month == target,
                 *(getattr(Chargeback, c) == v for c, v in zip(KEY, key, strict=True)))  # fmt: skip
        existing = conn.execute(select(Chargeback.id).where(*match)).scalar()
        if existing is None:
            line = Line(*key)  # type: ignore[arg-type]
            for c, v in zip(MONEY, delta, strict=True):
                setattr(line, c, v)
            conn.execute(insert(Chargeback), [_row(hour, line, currency, target, True)])
        else:
            conn.execute(update(Chargeback).where(Chargeback.id == existing).values(
                {c: getattr(Chargeback, c) + d for c, d in zip(MONEY, delta, strict=True)}
            ))  # fmt: skip
    refresh_cost_hours(conn, hour, clusters)


def refresh_cost_hours(conn: Connection, hour: datetime, clusters: set[str]) -> None:
    """Recompute ``cost_hours`` of ``hour`` for these clusters from its chargeback rows."""
    c = Chargeback
    conn.execute(delete(CostHour).where(CostHour.hour == hour, CostHour.cluster.in_(clusters)))
    owner = (c.hour, c.cluster, c.team, c.project, c.stage, c.currency)
    conn.execute(insert(CostHour).from_select(
        ["hour", "cluster", "team", "project", "stage", "currency", *MONEY],
        select(*owner, *(func.sum(getattr(c, m)) for m in MONEY))
        .where(c.hour == hour, c.cluster.in_(clusters)).group_by(*owner),
    ))  # fmt: skip


def _row(
    hour: datetime, ln: Line, currency: str, month: str, correction: bool
) -> dict[str, object]:
    return {"hour": hour, "cluster": ln.cluster, "team": ln.team, "project": ln.project,
            "stage": ln.stage, "namespace": ln.namespace, "pod": ln.pod, "node": ln.node,
            "gpu_model": ln.gpu_model, "mig_profile": ln.mig_profile, "billing_month": month,
            "correction": correction, "currency": currency, "allocated": ln.allocated,
            "used": ln.used, "waste": ln.waste, "idle": ln.idle,
            "gpu_hours": ln.gpu_hours}  # fmt: skip


@dataclass(frozen=True)
class Closed:
    month: str
    closed_at: datetime
    closed_by: str
    csv_sha256: str
    focus_sha256: str


class MonthError(ValueError):
    """A month that cannot be closed (yet): the message says why."""


def close_month(engine: Engine, month: str, actor: str, now: datetime) -> Closed:
    """Freeze ``month`` and record its reports' SHA-256. Only a month that has ended can be
    closed; closing twice is an error. Writers of every cluster are held off while the month is
    marked closed, so no ingest can slip a change into it afterwards."""
    from costsvc.api.auth import audit
    from costsvc.ingest.run import lock_clusters
    from costsvc.reports import chargeback_csv, focus_csv, sha256_of

    _, end = parse_month(month)
    if end > now:
        raise MonthError(f"month {month} has not ended yet (it ends {end:%Y-%m-%dT%H:%M:%SZ})")
    with engine.begin() as conn:
        clusters = set(conn.execute(select(Chargeback.cluster).distinct()).scalars())
        lock_clusters(conn, clusters)
        if conn.execute(select(MonthClose.month).where(MonthClose.month == month)).first():
            raise MonthError(f"month {month} is already closed")
        conn.execute(insert(MonthClose).values(month=month, closed_at=now, closed_by=actor,
                                               csv_sha256="", focus_sha256=""))  # fmt: skip
    # its rows are frozen from here on: hash the reports as every later export will give them
    csv_hash = sha256_of(chargeback_csv(engine, month))
    focus_hash = sha256_of(focus_csv(engine, month))
    with engine.begin() as conn:
        conn.execute(update(MonthClose).where(MonthClose.month == month)
                     .values(csv_sha256=csv_hash, focus_sha256=focus_hash))  # fmt: skip
        audit(conn, actor, "month.close", month, {"csv_sha256": csv_hash,
                                                   "focus_sha256": focus_hash})  # fmt: skip
    found = month_close(engine, month)
    assert found is not None
    return found


def month_close(engine: Engine, month: str) -> Closed | None:
    t = MonthClose
    with engine.connect() as conn:
        r = conn.execute(select(t.month, t.closed_at, t.closed_by, t.csv_sha256, t.focus_sha256)
                         .where(t.month == month)).first()  # fmt: skip
    if r is None:
        return None
    return Closed(r.month, as_utc(r.closed_at), r.closed_by, r.csv_sha256, r.focus_sha256)
