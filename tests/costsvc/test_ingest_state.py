"""The ingest state /metrics reports (costsvc/db/runs.py ``ingest_state``): each cluster's
watermark, its last successful run and its failed runs — read in a fixed number of statements
however many clusters and runs there are (no query per cluster). SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, event, insert

from costsvc.db.models import IngestRun
from costsvc.db.runs import IngestState, ingest_state, move_watermark

H = timedelta(hours=1)
T0 = datetime(2026, 11, 20, tzinfo=UTC)


def fill(engine: Engine, clusters: int, hours: int) -> dict[str, IngestState]:
    """``clusters`` clusters of ``hours`` runs each (every third failed, the last of the
    first cluster still running) and their watermarks; what ``ingest_state`` should say."""
    rows: list[dict[str, Any]] = []
    want = {}
    for c in range(clusters):
        cluster = f"cluster-{c}"
        last_done = None
        for h in range(hours):
            hour = T0 + h * H
            running = c == 0 and h == hours - 1
            status = "running" if running else ("failed" if h % 3 == 2 else "done")
            finished = None if running else hour + H + timedelta(minutes=c + 1)
            rows.append(
                {
                    "cluster": cluster,
                    "hour": hour,
                    "started_at": hour + H,
                    "finished_at": finished,
                    "status": status,
                    "kind": "ingest",
                }
            )
            if status == "done":
                last_done = finished
        move_watermark(engine, cluster, T0 + (hours - 1) * H)
        want[cluster] = IngestState(cluster, T0 + (hours - 1) * H, last_done)
    with engine.begin() as conn:
        conn.execute(insert(IngestRun), rows)
    return want


def counted(engine: Engine) -> tuple[list[IngestState], dict[str, int], int]:
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(args[2])

    event.listen(engine, "before_cursor_execute", count)
    try:
        with engine.connect() as conn:
            states, failed = ingest_state(conn)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    return states, failed, len(statements)


def test_ingest_state_reads_in_a_fixed_number_of_statements(engine: Engine) -> None:
    want = fill(engine, 1, 1)
    states, failed, few = counted(engine)
    assert states == list(want.values())
    assert failed == {}
    more = fill(engine, 15, 10)  # cluster-0 again, and 14 more, with ten hours of runs each
    states, failed, many = counted(engine)
    assert sorted(states, key=lambda s: s.cluster) == sorted(more.values(), key=lambda s: s.cluster)
    assert failed == {f"cluster-{c}": 3 for c in range(15)}
    assert states[0].last_success is not None and states[0].last_success.tzinfo is not None
    assert many == few <= 3
