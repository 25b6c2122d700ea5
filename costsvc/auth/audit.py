"""The audit log: who changed a budget, a token or the cost model, or closed a month."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, insert, select

from costsvc.db.models import AuditEntry
from costsvc.db.version import bump


def audit(conn: Connection, actor: str, action: str, target: str, detail: dict[str, Any]) -> None:
    """One entry, written in the transaction of the change it records; the change moves the
    data version (costsvc/db/version.py) with it."""
    entry = {"at": datetime.now(UTC), "actor": actor, "action": action, "target": target[:253]}
    conn.execute(insert(AuditEntry).values(**entry, detail=detail))
    bump(conn)


@dataclass(frozen=True, slots=True)
class Entry:
    at: datetime
    actor: str
    action: str
    target: str
    detail: dict[str, Any]


def recent(engine: Engine, limit: int) -> list[Entry]:
    """The newest ``limit`` entries, newest first."""
    a = AuditEntry
    query = select(a.at, a.actor, a.action, a.target, a.detail).order_by(a.id.desc()).limit(limit)
    with engine.connect() as conn:
        return [Entry(*r) for r in conn.execute(query)]
