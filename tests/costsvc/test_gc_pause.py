"""The garbage collector is paused only in processes that only ingest (costsvc/ingest/run.py
``collections_paused``): the ``ingest`` command and ``serve``'s hourly child
(costsvc/commands/hourly.py) — never the API process, where a paused collector would let every
request's cycles pile up. ``serve``'s hourly work runs in that child, not in the API process,
and stopping ``serve`` stops it. Real Prometheus (history.py), SQLite and PostgreSQL."""

from __future__ import annotations

import gc
import logging
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from costsvc import cli
from costsvc.commands import hourly
from costsvc.db.runs import done_hours
from costsvc.ingest import serial
from costsvc.kit.settings import Settings
from tests.costsvc.history_checks import assert_every_hour_adds_up
from tests.costsvc.test_ingest import cli_env
from tests.prom import Prometheus

SPAN = ["--start", "2026-11-10T05:00:00Z", "--end", "2026-11-10T07:00:00Z"]


@pytest.fixture
def collector_seen(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether the collector was on as each hour was stored."""
    seen: list[bool] = []
    store = serial.store_hour

    def watched(*args: Any, **kwargs: Any) -> None:
        seen.append(gc.isenabled())
        store(*args, **kwargs)

    monkeypatch.setattr(serial, "store_hour", watched)
    return seen


def _env(engine: Engine, prometheus: Prometheus, tmp: Path, mp: pytest.MonkeyPatch) -> Settings:
    url = engine.url.render_as_string(hide_password=False)
    for name, value in cli_env(prometheus, url, tmp).items():
        mp.setenv(name, value)
    return Settings()


def test_the_ingest_command_pauses_the_collector(
    engine: Engine,
    prometheus: Prometheus,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    collector_seen: list[bool],
) -> None:
    _env(engine, prometheus, tmp_path, monkeypatch)
    assert gc.isenabled()
    assert cli.main(["ingest", *SPAN]) == 0
    assert collector_seen == [False, False]
    assert gc.isenabled()  # and on again after


def test_serves_hourly_work_runs_in_a_child_process(
    engine: Engine,
    prometheus: Prometheus,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    collector_seen: list[bool],
) -> None:
    settings = _env(engine, prometheus, tmp_path, monkeypatch)
    url = engine.url.render_as_string(hide_password=False)
    assert cli.main(["ingest", "--start", SPAN[1], "--end", "2026-11-10T06:00:00Z"]) == 0
    assert collector_seen == [False]  # 05:00, in this process (the watermark)
    # what serve's scheduler does at 07:05: the hours up to 07:00, in a child of its own
    now = datetime(2026, 11, 10, 7, 5, tzinfo=UTC)
    assert hourly.run_hour(settings, now, threading.Event()) == 0
    assert gc.isenabled()
    assert collector_seen == [False]  # nothing stored in this process ...
    done = done_hours(engine, datetime(2026, 11, 10, 5, tzinfo=UTC), now)["c1"]
    assert sorted(h.hour for h in done) == [5, 6]  # ... the child stored 06:00, not 07:00
    assert assert_every_hour_adds_up(url) == 2


def test_stopping_serve_stops_its_hourly_child(
    engine: Engine,
    prometheus: Prometheus,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = _env(engine, prometheus, tmp_path, monkeypatch)
    stop = threading.Event()
    found: list[int | None] = []
    now = datetime(2026, 11, 10, 7, 5, tzinfo=UTC)
    worker = threading.Thread(target=lambda: found.append(hourly.run_hour(settings, now, stop)))
    caplog.set_level(logging.INFO, logger=hourly.PROG)
    worker.start()
    stop.set()  # as serve does on SIGTERM, before the child has stored anything
    worker.join(hourly.STOP_GRACE + 30)
    assert found == [None]  # stopped, not run to the end
    (line,) = [r.getMessage() for r in caplog.records if "stopped with serve" in r.getMessage()]
    pid = int(line.split("pid ")[1].split(")")[0])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # gone, and reaped
    assert done_hours(engine, datetime(2026, 11, 10, tzinfo=UTC), now) == {}
