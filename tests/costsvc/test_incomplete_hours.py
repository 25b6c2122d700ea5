"""Only complete hours are ingested (costsvc/ingest/run.py ``clip_end``): a backfill "to the
month end" bills no running hour, writes no future hour, and leaves the watermark at the last
complete hour, so the hourly ingest after it takes every later hour. Real Prometheus, SQLite
and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from costsvc.cli import main
from costsvc.db import runs
from costsvc.db.models import IngestRun
from costsvc.ingest.prom import PrometheusReader
from costsvc.ingest.run import ingest, last_complete
from tests.costsvc.history import MODEL
from tests.costsvc.test_ingest import cli_env
from tests.prom import Prometheus


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_backfill_past_now_is_clipped_to_the_last_complete_hour(
    engine: Engine,
    prometheus: Prometheus,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = engine.url.render_as_string(hide_password=False)
    for name, value in cli_env(prometheus, url, tmp_path).items():
        monkeypatch.setenv(name, value)
    before = last_complete(datetime.now(UTC))
    start = before - timedelta(hours=3)
    month_end = before + timedelta(days=1)
    assert main(["ingest", "--start", _iso(start), "--end", _iso(month_end)]) == 0
    after = last_complete(datetime.now(UTC))  # the clock may pass an hour meanwhile
    err = capsys.readouterr().err
    assert f"--end {_iso(month_end)} is after the last complete hour: clipped to" in err
    with engine.connect() as conn:
        hours = {runs.as_utc(h) for h in conn.execute(select(IngestRun.hour)).scalars()}
    # every complete hour of the span, and nothing else: no running, no future hour
    assert min(hours) == start
    assert max(hours) + timedelta(hours=1) in (before, after)
    assert len(hours) == (max(hours) - start) // timedelta(hours=1) + 1
    mark = runs.watermark(engine, "c1")
    assert mark is not None and mark + timedelta(hours=1) <= datetime.now(UTC)


def test_an_hour_not_yet_ended_is_never_taken(engine: Engine, prometheus: Prometheus) -> None:
    running = last_complete(datetime.now(UTC))  # the hour running now
    reader = PrometheusReader(prometheus.url)
    try:
        report = ingest(engine, reader, MODEL, "c1", [running, running + timedelta(hours=5)])
    finally:
        reader.close()
    assert report.done == [] and report.failed == {}
    assert runs.watermark(engine, "c1") is None
    with engine.connect() as conn:
        assert conn.execute(select(IngestRun.id)).first() is None
