"""A month close is one transaction: SIGKILLed at any of its steps it leaves the month open,
and one more close ends with the month closed, its hashes set and the audit entry written
(a forced close's skipped hours in it) — the same state and the same CSV bytes as a close
that was never interrupted. SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import shutil
import signal
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, make_url, text

from costsvc.auth.audit import recent
from costsvc.db.engine import make_engine
from costsvc.months.close import FAULT, STEPS, close_month
from costsvc.months.repository import month_close
from costsvc.reports.monthly import chargeback_csv, focus_csv
from tests.costsvc.conftest import fresh_database
from tests.costsvc.history import HOUR, MODEL, ingest_with
from tests.prom import Prometheus

DEC2 = datetime(2026, 12, 2, 9, tzinfo=UTC)  # November has ended


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def base(
    request: pytest.FixtureRequest, prometheus: Prometheus, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """(kind, URL) of a database with one ingested hour of November: the month has missing
    hours, so only a forced close closes it."""
    work = tmp_path_factory.mktemp("close")
    with fresh_database(request.param, request, work) as url:
        ingest_with(prometheus.url, url, MODEL, [HOUR])
        yield request.param, url


@contextmanager
def clone(base: tuple[str, str], work: Path) -> Iterator[str]:
    """A copy of the base database (a file copy; PostgreSQL: CREATE DATABASE … TEMPLATE)."""
    kind, url = base
    if kind == "sqlite":
        path = work / f"{uuid.uuid4().hex[:8]}.db"
        shutil.copy(url.removeprefix("sqlite:///"), path)
        yield f"sqlite:///{path}"
        return
    name, parsed = f"c_{uuid.uuid4().hex[:12]}", make_url(url)
    admin = create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{parsed.database}"'))
    try:
        yield parsed.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _close(url: str, kill_at: str | None) -> None:
    if kill_at:
        os.environ[FAULT] = kill_at
    engine = make_engine(url)
    close_month(engine, "2026-11", "ops", DEC2, force=True)
    engine.dispose()


def close_in_child(url: str, kill_at: str | None = None) -> int | None:
    """A forced close of November in a child process (forked: no interpreter start-up)."""
    child = multiprocessing.get_context("fork").Process(target=_close, args=(url, kill_at))
    child.start()
    child.join(60)
    return child.exitcode


def state(url: str) -> dict[str, Any]:
    """What a close leaves: the month's row, its audit entries, and both reports' bytes."""
    engine = create_engine(url)
    try:
        closed = month_close(engine, "2026-11")
        entries = [e for e in recent(engine, 100) if e.action == "month.close"]
        return {
            "closed": closed and (closed.closed_by, closed.csv_sha256, closed.focus_sha256),
            "audit": [(e.actor, e.target, e.detail) for e in entries],
            "csv": "".join(chargeback_csv(engine, "2026-11")).encode(),
            "focus": "".join(focus_csv(engine, "2026-11")).encode(),
        }
    finally:
        engine.dispose()


def test_a_close_killed_at_any_step_is_done_by_the_next(
    base: tuple[str, str], tmp_path: Path
) -> None:
    with clone(base, tmp_path) as url:
        assert close_in_child(url) == 0  # never interrupted
        reference = state(url)
    assert reference["closed"][0] == "ops"
    assert reference["closed"][1] == hashlib.sha256(reference["csv"]).hexdigest()
    assert reference["closed"][2] == hashlib.sha256(reference["focus"]).hexdigest()
    ((actor, target, detail),) = reference["audit"]
    assert (actor, target, detail["forced"]) == ("ops", "2026-11", True)
    assert detail["skipped"][0]["state"] == "missing" and detail["skipped"][0]["hours"] > 0
    assert detail["csv_sha256"] == reference["closed"][1]
    untouched = {**reference, "closed": None, "audit": []}

    for step in STEPS:
        with clone(base, tmp_path) as url:
            assert close_in_child(url, kill_at=step) == -signal.SIGKILL, step
            assert state(url) == untouched, step  # nothing half-done: the month is open
            assert close_in_child(url) == 0, step
            assert state(url) == reference, step
