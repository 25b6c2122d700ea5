"""The cost model kept in the database, where no ``COSTSVC_COST_MODEL`` file is configured:
every version is a ``cost_model_versions`` row (by content hash); the one in force is the one
activated last, and each activation is in the audit log with the hashes before and after."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

from costsvc.auth.audit import audit
from costsvc.db.models import CostModelVersion
from costsvc.kit.times import as_utc
from costsvc.rules.cost_model import CostModel


@dataclass(frozen=True, slots=True)
class Active:
    sha256: str
    document: dict[str, Any]
    activated_at: datetime
    activated_by: str


def active_document(engine: Engine) -> Active | None:
    """The cost-model document activated last (None: none ever was)."""
    t = CostModelVersion
    query = (
        select(t.sha256, t.document, t.activated_at, t.activated_by)
        .where(t.activated_at.is_not(None))
        .order_by(t.activated_at.desc(), t.id.desc())
        .limit(1)
    )
    with engine.connect() as conn:
        row = conn.execute(query).first()
    if row is None:
        return None
    return Active(row.sha256, row.document, as_utc(row.activated_at), row.activated_by or "")


def activate(engine: Engine, model: CostModel, actor: str, via: str) -> str | None:
    """Put ``model`` in force (stored first if new), audited; the hash it replaced."""
    t, digest = CostModelVersion, model.sha256()
    for _ in range(2):  # a concurrent writer may store the same document first
        try:
            with engine.begin() as conn:
                before = conn.execute(
                    select(t.sha256)
                    .where(t.activated_at.is_not(None))
                    .order_by(t.activated_at.desc(), t.id.desc())
                    .limit(1)
                ).scalar()
                now = datetime.now(UTC)
                found = conn.execute(select(t.id).where(t.sha256 == digest)).scalar()
                if found is None:
                    conn.execute(
                        insert(t).values(
                            sha256=digest,
                            document=model.document(),
                            loaded_at=now,
                            activated_at=now,
                            activated_by=actor,
                        )
                    )
                else:
                    conn.execute(
                        update(t).where(t.id == found).values(activated_at=now, activated_by=actor)
                    )
                detail = {"before_sha256": before, "after_sha256": digest, "via": via}
                audit(conn, actor, "cost_model.replace", "database", detail)
                return str(before) if before is not None else None
        except IntegrityError:
            continue
    raise RuntimeError("could not store the cost model")
