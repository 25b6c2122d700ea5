"""Parallel hour workers (costsvc/ingest/parallel.py, ``COSTSVC_INGEST_WORKERS``): hours of the
ground-truth history (history.py) ingested by worker processes give the rows one process gives;
the watermark only passes hours done or recorded failed; a chunk whose hours fail, a worker that
dies and an interrupt leave every hour either done or pending. SQLite: always one process."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import threading
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select

from costsvc.db.migrate import upgrade
from costsvc.db.models import IngestRun
from costsvc.db.runs import failed_hours, watermark
from costsvc.ingest.clusters import ClusterReader
from costsvc.ingest.parallel import chunks, settled_prefix
from costsvc.ingest.prom import Params, PrometheusReader
from costsvc.ingest.run import ingest, pending_hours
from costsvc.ingest.serial import Report
from costsvc.rules.cost_model import parse
from tests.costsvc.history import ELEVENTH, FIFTEENTH, H100, HOUR, HOUR2, HOUR3, MODEL, TWELFTH
from tests.costsvc.history_checks import tables
from tests.costsvc.test_cli import run
from tests.prom import Prometheus

HOURS = [HOUR, HOUR2, HOUR3, ELEVENTH]
LATER = datetime(2027, 1, 1, tzinfo=UTC)  # every failed hour's back-off has passed


def _ingest(
    prom: PrometheusReader, url: str, hours: list[datetime], workers: int, model: Any = MODEL
) -> tuple[Report, list[int]]:
    """Ingest; and how many worker processes were alive at each progress call."""
    upgrade(url)
    engine = create_engine(url)
    alive: list[int] = []

    def progress(hour: datetime, error: str | None) -> None:
        alive.append(len(multiprocessing.active_children()))

    try:
        return ingest(engine, prom, model, "c1", hours, progress, workers=workers), alive
    finally:
        prom.close()
        engine.dispose()


def _runs(url: str) -> dict[tuple[datetime, str], int]:
    """How many ingest runs each (hour, status) has."""
    engine = create_engine(url)
    r = IngestRun
    with engine.connect() as conn:
        rows = conn.execute(select(r.hour, r.status, func.count()).group_by(r.hour, r.status))
        out = {(_utc(h), s): int(n) for h, s, n in rows}
    engine.dispose()
    return out


def _utc(at: datetime) -> datetime:
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def _mark(url: str) -> datetime | None:
    engine = create_engine(url)
    try:
        return watermark(engine, "c1")
    finally:
        engine.dispose()


def test_chunks_are_contiguous_and_near_equal() -> None:
    hours = [HOUR + timedelta(hours=n) for n in range(7)]
    assert chunks(hours, 3) == [hours[:3], hours[3:5], hours[5:]]
    assert chunks(hours[:2], 8) == [hours[:1], hours[1:2]]
    assert chunks([], 4) == []


def test_the_watermark_is_the_end_of_the_settled_prefix() -> None:
    h = [HOUR + timedelta(hours=n) for n in range(5)]
    assert settled_prefix(h, set()) is None
    assert settled_prefix(h, {h[1], h[2], h[4]}) is None  # the first hour is not settled
    assert settled_prefix(h, {h[0], h[1], h[3], h[4]}) == h[1]  # h[2] holds it
    assert settled_prefix(h, set(h)) == h[4]
    retry = [h[3], h[4], h[0]]  # planned order: a failed hour retried after the new ones
    assert settled_prefix(retry, {h[3], h[4]}) == h[4]


def test_workers_give_the_rows_of_one_process(
    prometheus: Prometheus, three_dbs: tuple[str, str, str]
) -> None:
    one, two, three = three_dbs
    serial, _ = _ingest(PrometheusReader(prometheus.url), one, HOURS, 1)
    pair, alive2 = _ingest(PrometheusReader(prometheus.url), two, HOURS, 2)
    trio, alive3 = _ingest(PrometheusReader(prometheus.url), three, HOURS, 3)
    assert serial.done == pair.done == trio.done == HOURS
    assert not (serial.failed or pair.failed or trio.failed)
    expected = tables(one)
    assert all(expected)
    assert tables(two) == expected
    assert tables(three) == expected
    for url in three_dbs:
        assert _mark(url) == ELEVENTH
        assert _runs(url) == {(h, "done"): 1 for h in HOURS}
    if one.startswith("sqlite"):  # one writer: no worker process, ever
        assert set(alive2) == set(alive3) == {0}
    else:  # the hours came from worker processes
        assert max(alive2) >= 1 and max(alive3) >= 1


def test_a_chunk_whose_hours_fail_does_not_stop_the_others(
    prometheus: Prometheus, db_url: str
) -> None:
    # priced only from 07:00: the first chunk's hours (05:00, 06:00) fail, the second's do not
    late = parse(
        {
            "versions": [
                {
                    "effective_from": "2026-11-10T07:00:00Z",
                    "prices": [{"model": H100, "hourly": "2.50"}],
                }
            ]
        }
    )
    report, _ = _ingest(PrometheusReader(prometheus.url), db_url, HOURS, 2, late)
    assert report.done == [HOUR3, ELEVENTH]
    assert list(report.failed) == [HOUR, HOUR2]
    assert all("no price for GPU model" in why for why in report.failed.values())
    assert _mark(db_url) == ELEVENTH  # failed hours are settled: recorded, retried later
    engine = create_engine(db_url)
    try:
        assert failed_hours(engine, "c1") == [HOUR, HOUR2]
        stop = ELEVENTH + timedelta(hours=1)
        assert pending_hours(engine, "c1", stop, now=LATER) == [HOUR, HOUR2]
    finally:
        engine.dispose()


class _Dying(PrometheusReader):
    """The real reader, in a worker process that dies (``os._exit``, as a kill would leave it)
    at its first query of the hour ``die_at`` on the main thread (not the read-ahead thread's,
    made while the hour before is worked on). Rebuilt in the worker from its spec."""

    def __init__(
        self,
        url: str,
        timeout: float = 60.0,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        compress: bool = False,
        raw_only: bool = True,
        die_at: datetime = HOUR,
    ) -> None:
        super().__init__(url, timeout, headers, params, compress, raw_only)
        self._spec_args["die_at"] = die_at
        self.die_at = die_at.timestamp()

    def _get(
        self, params: Params, what: str, post: bool = False, path: str = "/api/v1/query"
    ) -> Any:
        at = params.get("time")
        in_worker = multiprocessing.parent_process() is not None  # never the test's process
        main = threading.current_thread() is threading.main_thread()
        doomed = isinstance(at, str) and self.die_at < float(at) <= self.die_at + 3600
        if in_worker and main and doomed:
            os._exit(7)
        return super()._get(params, what, post, path)


SIX = [HOUR, HOUR2, HOUR3, ELEVENTH, TWELFTH, FIFTEENTH]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_worker_that_dies_leaves_its_hours_failed_and_pending(
    prometheus: Prometheus, db_url: str
) -> None:
    # chunks [05, 06, 07] and [11th, 12th, 15th]; the first dies in 06:00, 07:00 never begun
    reader = _Dying(prometheus.url, die_at=HOUR2)
    report, _ = _ingest(reader, db_url, SIX, 2)
    assert report.done == [HOUR, ELEVENTH, TWELFTH, FIFTEENTH]
    assert list(report.failed) == [HOUR2, HOUR3]
    assert all("exit code 7" in why for why in report.failed.values())
    assert _mark(db_url) == FIFTEENTH
    runs = _runs(db_url)
    assert runs == {
        **{(h, "done"): 1 for h in report.done},
        (HOUR2, "failed"): 1,  # the run the worker had begun
        (HOUR3, "failed"): 1,  # recorded by the parent
    }
    engine = create_engine(db_url)
    try:
        stop = FIFTEENTH + timedelta(hours=1)
        assert pending_hours(engine, "c1", stop, now=LATER) == [HOUR2, HOUR3]
    finally:
        engine.dispose()


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_an_interrupt_stops_the_workers(prometheus: Prometheus, db_url: str) -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    reader = PrometheusReader(prometheus.url)

    def progress(hour: datetime, error: str | None) -> None:
        raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt):
            ingest(engine, reader, MODEL, "c1", SIX, progress, workers=2)
        assert multiprocessing.active_children() == []
        # nothing left running: what was done is done, the rest pending after the watermark
        assert all(status != "running" for _, status in _runs(db_url))
        mark = watermark(engine, "c1")
        assert mark is None or mark < FIFTEENTH
    finally:
        reader.close()
        engine.dispose()


def test_a_reader_is_rebuilt_from_its_spec() -> None:
    reader = ClusterReader(
        "http://query:9090", "east", "c1", 5.0, {"X-Scope-OrgID": "gpu"}, {"p": "q"}, raw_only=True
    )
    spec = pickle.loads(pickle.dumps(reader.spec()))  # as it crosses to a worker
    again = PrometheusReader.from_spec(spec)
    try:
        assert isinstance(again, ClusterReader) and again.cluster == "east"
        assert again.raw_only and again.spec() == reader.spec()
    finally:
        reader.close()
        again.close()


def test_the_cli_backfill_uses_the_setting(
    prometheus: Prometheus, three_dbs: tuple[str, str, str], tmp_path: Path
) -> None:
    serial, parallel, _ = three_dbs
    _ingest(PrometheusReader(prometheus.url), serial, HOURS[:3], 1)
    model = tmp_path / "model.json"  # JSON is YAML
    model.write_text(json.dumps(MODEL.document()))
    upgrade(parallel)
    env = {
        "COSTSVC_DATABASE_URL": parallel,
        "COSTSVC_PROMETHEUS_URL": prometheus.url,
        "COSTSVC_COST_MODEL": str(model),
        "COSTSVC_CLUSTER": "c1",
        "COSTSVC_INGEST_WORKERS": "2",
    }
    end = (HOUR3 + timedelta(hours=1)).isoformat()
    done = run("ingest", "--start", HOUR.isoformat(), "--end", end, env=env)
    assert done.returncode == 0, done.stderr
    assert "ingested 3 hour(s)" in done.stdout
    assert tables(parallel) == tables(serial)
    assert _mark(parallel) == HOUR3
