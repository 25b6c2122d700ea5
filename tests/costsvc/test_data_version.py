"""The data version (costsvc/db/version.py): an answer computed while an ingest runs is never
served after the hour lands. Real Prometheus (history.py), real uvicorn, SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from costsvc.auth.audit import audit
from costsvc.db import runs
from costsvc.db.version import data_version
from costsvc.ingest.prom import PrometheusReader
from costsvc.ingest.serial import ingest_hours
from tests.costsvc.apiserver import NOV20, Api, Clock, serve
from tests.costsvc.history import HOUR, MODEL
from tests.prom import Prometheus

COSTS = {"start": "2026-11-10T00:00:00Z", "end": "2026-11-11T00:00:00Z", "group_by": "team"}


def _costs(api: Api) -> Any:
    r = api.get("/v1/costs", **COSTS)
    assert r.status_code == 200, r.text
    return r.json()


def test_an_answer_computed_during_an_ingest_is_not_served_after_it(
    engine: Engine, prometheus: Prometheus
) -> None:
    url = engine.url.render_as_string(hide_password=False)
    during: list[Any] = []
    with serve(url, Clock(NOV20)) as api:
        empty = _costs(api)
        reader = PrometheusReader(prometheus.url)

        def started(hour: datetime, run_id: int) -> None:
            # the hour's run is recorded, its money not yet written: a dashboard asks now
            during.append(_costs(api))

        try:
            report = ingest_hours(engine, reader, MODEL, "c1", [HOUR], started=started)
        finally:
            reader.close()
        assert report.done == [HOUR]
        assert during == [empty] and not empty["rows"]  # the answer during: nothing yet
        after = _costs(api)
        with serve(url, Clock(NOV20), prefix="fresh-") as fresh:
            expected = _costs(fresh)
    assert expected["rows"], "the hour landed"
    assert after == expected


def _model(engine: Engine) -> int:
    return runs.record_cost_model(engine, MODEL)


def _audited(engine: Engine) -> None:
    with engine.begin() as conn:
        audit(conn, "t", "test", "x", {"at": str(HOUR + timedelta(hours=1))})


@pytest.mark.parametrize(
    "write",
    [
        lambda e: runs.finish_run(e, runs.start_run(e, "c1", HOUR, "ingest", _model(e)), "done"),
        lambda e: runs.move_watermark(e, "c1", HOUR),
        _audited,
    ],
    ids=["run", "watermark", "audited"],
)
def test_every_write_moves_the_version_with_its_commit(engine: Engine, write: Any) -> None:
    before = data_version(engine)
    write(engine)
    assert data_version(engine) > before


def test_the_version_moves_only_when_the_write_commits(engine: Engine) -> None:
    before = data_version(engine)
    with engine.connect() as conn:
        trans = conn.begin()
        audit(conn, "t", "test", "x", {})
        assert data_version(engine) == before  # another connection: not yet
        trans.rollback()
    assert data_version(engine) == before
