"""Closed months, and the SHA-256 of their reports as exported when they were closed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, insert, select, update

from costsvc.db.audit import audit
from costsvc.db.models import Chargeback, MonthClose
from costsvc.db.runs import lock_clusters
from costsvc.db.version import bump
from costsvc.utc import as_utc


@dataclass(frozen=True)
class Closed:
    month: str
    closed_at: datetime
    closed_by: str
    csv_sha256: str
    focus_sha256: str


def mark_closed(engine: Engine, month: str, now: datetime, actor: str) -> bool:
    """Mark ``month`` closed (False: it already was). Writers of every cluster are held off
    meanwhile, so no ingest can slip a change into the month afterwards."""
    with engine.begin() as conn:
        clusters = set(conn.execute(select(Chargeback.cluster).distinct()).scalars())
        lock_clusters(conn, clusters)
        if conn.execute(select(MonthClose.month).where(MonthClose.month == month)).first():
            return False
        conn.execute(
            insert(MonthClose).values(
                month=month, closed_at=now, closed_by=actor, csv_sha256="", focus_sha256=""
            )
        )
        bump(conn)
    return True


def record_hashes(
    engine: Engine,
    month: str,
    csv_sha256: str,
    focus_sha256: str,
    actor: str,
    extra: dict[str, Any] | None = None,
) -> None:
    """The closed month's report hashes, and the close in the audit log (with ``extra``: a
    forced close's skipped hours)."""
    hashes = {"csv_sha256": csv_sha256, "focus_sha256": focus_sha256}
    with engine.begin() as conn:
        conn.execute(update(MonthClose).where(MonthClose.month == month).values(**hashes))
        audit(conn, actor, "month.close", month, {**hashes, **(extra or {})})


def month_close(engine: Engine, month: str) -> Closed | None:
    t = MonthClose
    query = select(t.month, t.closed_at, t.closed_by, t.csv_sha256, t.focus_sha256).where(
        t.month == month
    )
    with engine.connect() as conn:
        r = conn.execute(query).first()
    if r is None:
        return None
    return Closed(r.month, as_utc(r.closed_at), r.closed_by, r.csv_sha256, r.focus_sha256)


def closed_month_names(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(select(MonthClose.month).order_by(MonthClose.month)).scalars())
