"""The garbage collector is paused only in processes that only ingest (costsvc/ingest/run.py
``collections_paused``): the ``ingest`` command — not ``serve``, whose hourly ingest is a
thread of the API process, where a paused collector lets every request's cycles pile up for
the whole run. Real Prometheus (history.py), SQLite and PostgreSQL."""

from __future__ import annotations

import gc
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from costsvc import cli
from costsvc.ingest import serial
from costsvc.settings import Settings
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


def test_serves_ingest_thread_leaves_it_on(
    engine: Engine,
    prometheus: Prometheus,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    collector_seen: list[bool],
) -> None:
    settings = _env(engine, prometheus, tmp_path, monkeypatch)
    done: list[int] = []
    # what serve's scheduler thread runs each hour (cli._scheduler), here over the span
    worker = threading.Thread(target=lambda: done.append(cli._ingest(settings, *SPAN[1::2])))
    worker.start()
    worker.join(120)
    assert done == [0]
    assert collector_seen == [True, True]
