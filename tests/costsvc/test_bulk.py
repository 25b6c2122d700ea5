"""costsvc/db/bulk.py: rows through COPY (PostgreSQL) or the INSERT (SQLite) read back equal,
whatever their text holds."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select

from costsvc.db.bulk import insert_rows
from costsvc.db.engine import make_engine
from costsvc.db.migrate import upgrade
from costsvc.db.models import UsageFact
from costsvc.kit.times import as_utc

HOUR = datetime(2026, 11, 20, 3, tzinfo=UTC)
AWKWARD = ["tab\there", "new\nline", "back\\slash", "quote\"'", "\\N", "", "ünï €", "a,b;c"]


def test_rows_read_back_as_written(db_url: str) -> None:
    upgrade(db_url)
    engine = make_engine(db_url)
    rows = [
        {
            "hour": HOUR,
            "cluster": "c",
            "node": f"n-{text}",
            "gpu_uuid": f"GPU-{i}",
            "gi_id": -1 if i % 2 else i,
            "namespace": text,
            "pod": f"p{i}",
            "container": text or "main",
            "share_us": 3_600_000_000 - i,
            "busy_share_us": -1 if i == 0 else 2**40 + i,
            "sm_us": 0,
            "shared": bool(i % 2),
            "compute_slices": None if i % 3 else i,
            "memory_slices": None,
            "mig_profile": "",
            "memory_share_us": None if i % 2 else 9_223_372_036_854_775_807,
        }
        for i, text in enumerate(AWKWARD)
    ]
    with engine.begin() as conn:
        insert_rows(conn, UsageFact, rows)
        insert_rows(conn, UsageFact, [])
    names = list(rows[0])
    u = UsageFact
    with engine.connect() as conn:
        found = conn.execute(select(*(getattr(u, n) for n in names)).order_by(u.pod)).all()
    back = [dict(zip(names, r, strict=True)) for r in found]
    for row in back:
        row["hour"] = as_utc(row["hour"])
    assert back == sorted(rows, key=lambda r: str(r["pod"]))
    engine.dispose()
