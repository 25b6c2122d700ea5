"""Closed months, and the SHA-256 of their reports as exported when they were closed. A close
is one transaction (costsvc/months/close.py): these writes take its connection."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, insert, select, update

from costsvc.auth.audit import audit
from costsvc.db.models import Chargeback, MonthClose
from costsvc.db.runs import lock_clusters
from costsvc.db.version import bump
from costsvc.kit.times import as_utc


@dataclass(frozen=True)
class Closed:
    month: str
    closed_at: datetime
    closed_by: str
    csv_sha256: str
    focus_sha256: str


def lock_for_close(conn: Connection) -> None:
    """Hold off the writers of every cluster until the close's transaction ends, so that no
    ingest slips a change into the month meanwhile (on SQLite the database write lock, taken
    by the close's first write, does the same)."""
    lock_clusters(conn, set(conn.execute(select(Chargeback.cluster).distinct()).scalars()))


def close_state(conn: Connection, month: str) -> str | None:
    """``closed``; ``unhashed`` (closed by a version that wrote the close in two
    transactions and was stopped between them: its hashes and audit entry are missing); or
    None: open."""
    t = MonthClose
    found = conn.execute(select(t.csv_sha256).where(t.month == month)).first()
    if found is None:
        return None
    return "closed" if found[0] else "unhashed"


def mark_closed(conn: Connection, month: str, now: datetime, actor: str) -> None:
    """Mark ``month`` closed, in the close's transaction (its hashes follow in it)."""
    conn.execute(
        insert(MonthClose).values(
            month=month, closed_at=now, closed_by=actor, csv_sha256="", focus_sha256=""
        )
    )
    bump(conn)


def record_hashes(
    conn: Connection,
    month: str,
    csv_sha256: str,
    focus_sha256: str,
    actor: str,
    extra: dict[str, Any] | None = None,
) -> None:
    """The closed month's report hashes, and the close in the audit log (with ``extra``: a
    forced close's skipped hours), in the close's transaction."""
    hashes = {"csv_sha256": csv_sha256, "focus_sha256": focus_sha256}
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
