"""Truthful failures of the database: PostgreSQL going away in the middle of an
ingest, a database that is not there, a full disk — each ends ``gpu-costsvc`` with one line
that names the database and says which (never a traceback, never "the source looks down"),
and the hour not done is ingested by the next run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from sqlalchemy import Engine, create_engine, event, make_url, text
from sqlalchemy.exc import OperationalError

from costsvc import cli
from costsvc.db.engine import disk_full
from costsvc.db.migrate import upgrade
from costsvc.db.runs import done_hours, failed_hour_states
from costsvc.ingest.run import RETRY_FIRST, pending_hours
from costsvc.kit.times import iso_z
from tests.costsvc.conftest import fresh_database
from tests.costsvc.history import HOUR, HOUR2, MODEL
from tests.costsvc.history_checks import assert_every_hour_adds_up
from tests.prom import Prometheus

END = iso_z(HOUR2 + timedelta(hours=1))


@pytest.fixture
def env(prometheus: Prometheus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    model = tmp_path / "cost-model.yaml"
    model.write_text(yaml.safe_dump(MODEL.document()))
    settings = {
        "COSTSVC_PROMETHEUS_URL": prometheus.url,
        "COSTSVC_COST_MODEL": str(model),
        "COSTSVC_CLUSTER": "c1",
    }
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    return settings


def gpu_costsvc(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, url: str, *argv: str
) -> tuple[int, list[str]]:
    """``gpu-costsvc ARGV`` (in this process); its exit status and its standard error's
    lines, the progress line's carriage returns as new lines."""
    monkeypatch.setenv("COSTSVC_DATABASE_URL", url)
    code = cli.main(list(argv))
    err = capsys.readouterr().err.replace("\r", "\n")
    return code, [line for line in err.splitlines() if line]


def hours_done(url: str) -> set[Any]:
    engine = create_engine(url)
    try:
        return done_hours(engine, HOUR, HOUR2 + timedelta(hours=1)).get("c1", set())
    finally:
        engine.dispose()


def test_postgresql_going_away_mid_ingest_is_one_line_and_the_hour_is_retried(
    env: dict[str, str],
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with fresh_database("postgresql", request, tmp_path) as url:
        upgrade(url)
        name = make_url(url).database
        admin = create_engine(make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT")
        shown = make_url(url).render_as_string(hide_password=True)
        progress = cli._progress

        def outage_after_the_first_hour(what: str, i: int, n: int, hour: Any) -> None:
            progress(what, i, n, hour)
            with admin.connect() as conn:  # as a restart does: sessions cut, none let in
                conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
                conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = :d AND pid <> pg_backend_pid()"
                    ),
                    {"d": name},
                )

        monkeypatch.setattr(cli, "_progress", outage_after_the_first_hour)
        code, lines = gpu_costsvc(
            capsys, monkeypatch, url, "ingest", "--start", iso_z(HOUR), "--end", END
        )
        assert code == 1, lines
        *_, last = lines
        assert last.startswith(f"gpu-costsvc: error: the database {shown} is unreachable: ")
        assert [line for line in lines if "error" in line] == [last], lines
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
        admin.dispose()
        assert hours_done(url) == {HOUR}

        monkeypatch.setattr(cli, "_progress", progress)
        code, lines = gpu_costsvc(capsys, monkeypatch, url, "ingest", "--end", END)
        assert code == 0, lines  # the next run, from the watermark: the hour not done
        assert hours_done(url) == {HOUR, HOUR2}
        assert assert_every_hour_adds_up(url) == 2


def test_a_database_that_is_not_there_is_one_line(
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gone = f"postgresql+psycopg://costsvc:s3cret@/costsvc?host={tmp_path / 'no-server'}"
    for argv in (["ingest"], ["report", "--month", "2026-11"], ["ingest", "--status"]):
        code, lines = gpu_costsvc(capsys, monkeypatch, gone, *argv)
        assert code == 1, (argv, lines)
        assert len(lines) == 1 and "the database postgresql+psycopg://costsvc:***@" in lines[0]
        assert "is unreachable: " in lines[0] and "s3cret" not in lines[0], lines


def test_a_full_disk_is_named_as_such_and_the_hour_is_retried(
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"sqlite:///{tmp_path / 'full.db'}"
    upgrade(url)
    code, lines = gpu_costsvc(
        capsys, monkeypatch, url, "ingest", "--start", iso_z(HOUR), "--end", iso_z(HOUR2)
    )
    assert code == 0 and hours_done(url) == {HOUR}, lines
    engine = create_engine(url)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("PRAGMA page_size = 512"))  # small pages, packed: little room left
        conn.execute(text("VACUUM"))  # in them, and no free page in the file
    engine.dispose()

    def no_room(dbapi_connection: Any, record: Any) -> None:
        """SQLite's answer when its disk is full (SQLITE_FULL), at the database's size now."""
        cur = dbapi_connection.cursor()
        pages = cur.execute("PRAGMA page_count").fetchone()[0]
        cur.execute(f"PRAGMA max_page_count = {pages}")
        cur.close()

    event.listen(Engine, "connect", no_room)
    try:
        code, lines = gpu_costsvc(capsys, monkeypatch, url, "ingest", "--end", END)
    finally:
        event.remove(Engine, "connect", no_room)
    assert code == 1, lines
    assert lines == [
        f"gpu-costsvc: error: the database {url} is out of disk space: database or disk is full"
    ]
    assert hours_done(url) == {HOUR}
    code, _ = gpu_costsvc(capsys, monkeypatch, url, "ingest", "--status")
    assert code == 1  # a failed hour is listed
    engine = create_engine(url)
    try:  # recorded as failed, why, and retried by the next hourly run
        (failed,) = failed_hour_states(engine, "c1")
        assert failed.hour == HOUR2 and "is out of disk space" in (failed.error or "")
        later = datetime.now(UTC) + RETRY_FIRST
        assert HOUR2 in pending_hours(engine, "c1", HOUR2 + timedelta(hours=1), now=later)
    finally:
        engine.dispose()
    code, lines = gpu_costsvc(  # with room again, as that run does it
        capsys, monkeypatch, url, "ingest", "--start", iso_z(HOUR2), "--end", END
    )
    assert code == 0 and hours_done(url) == {HOUR, HOUR2}, lines


def test_postgresql_says_disk_full_by_its_sqlstate() -> None:
    """PostgreSQL's disk_full (53100) — "could not extend file …: No space left on device" —
    as psycopg raises it and SQLAlchemy wraps it."""
    full = psycopg.errors.DiskFull("could not extend file: No space left on device")
    assert disk_full(OperationalError("INSERT …", {}, full))
    other = psycopg.errors.QueryCanceled("canceling statement due to statement timeout")
    assert not disk_full(OperationalError("SELECT …", {}, other))
