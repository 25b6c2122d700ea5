"""Databases for the cost-service tests: a SQLite file, and a throwaway PostgreSQL cluster
started from the installed server binaries (as the postgres user when the tests run as root,
since PostgreSQL refuses to run as root). Every DB test runs on both."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from costsvc.db.migrate import upgrade
from tests.conftest import require_binary
from tests.costsvc.history import T0, history
from tests.costsvc.history14 import TS, history14
from tests.costsvc.scraped import as_scraped
from tests.prom import Prometheus


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """A PostgreSQL cluster on a unix socket in a temporary directory; yields its base URL."""
    bindir = _pg_bin()
    if bindir is None:
        why = "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why + " (make test installs the postgresql package)")
        pytest.skip(why)
    base = Path(tempfile.mkdtemp(prefix="pg-"))  # short: the socket path must be < 108 bytes
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(sock, "postgres")
    subprocess.run(
        _as_postgres(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
            ]
        ),
        check=True,
        capture_output=True,
    )
    subprocess.run(
        _as_postgres(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-w",
                "-s",
                "-l",
                str(base / "log"),
                "-o",
                f"-c listen_addresses='' -k {sock} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off",
                "start",
            ]
        ),
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql+psycopg://postgres@/{{db}}?host={sock}"
    finally:
        subprocess.run(
            _as_postgres(
                [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-s", "stop"]
            ),
            check=False,
            capture_output=True,
        )
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def fresh_database(kind: str, request: pytest.FixtureRequest, directory: Path) -> Iterator[str]:
    """A fresh, empty database: a SQLite file in ``directory``, or a new database in the
    session's PostgreSQL cluster, dropped afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{directory / 'costsvc.db'}"
        return
    server: str = request.getfixturevalue("pg_server")
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server.format(db="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield server.format(db=name)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database of each kind."""
    with fresh_database(request.param, request, tmp_path) as url:
        yield url


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """An engine on ``db_url``, migrated to the head."""
    upgrade(db_url)
    e = create_engine(db_url)
    try:
        yield e
    finally:
        e.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def three_dbs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """Three fresh, empty databases of one kind (the fast-reads tests: raw, fast in one run,
    fast hour by hour)."""
    for name in ("raw", "fast", "hourly"):
        (tmp_path / name).mkdir()
    with (
        fresh_database(request.param, request, tmp_path / "raw") as raw,
        fresh_database(request.param, request, tmp_path / "fast") as fast,
        fresh_database(request.param, request, tmp_path / "hourly") as hourly,
    ):
        yield raw, fast, hourly


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A real Prometheus on loopback holding the synthetic history of history.py."""
    yield from _loaded_prometheus(tmp_path_factory, "history", history(), T0)


@pytest.fixture(scope="session")
def prometheus14(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A real Prometheus on loopback holding the synthetic history of history14.py."""
    yield from _loaded_prometheus(tmp_path_factory, "history14", history14(), TS)


def _loaded_prometheus(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    text: str,
    probe: int,
    scraped: bool = True,
) -> Iterator[Prometheus]:
    """``text`` loaded (``scraped``: first put in the scraped form, tests/costsvc/scraped.py;
    else it is already)."""
    work = tmp_path_factory.mktemp(name)
    (work / "history.om").write_text(as_scraped(text) if scraped else text)
    yield from prometheus_over(work, probe)


def prometheus_over(work: Path, probe: int) -> Iterator[Prometheus]:
    """``work/history.om`` (OpenMetrics) as TSDB blocks under a real Prometheus, yielded once
    the blocks answer at ``probe + 60``."""
    promtool, binary = require_binary("promtool"), require_binary("prometheus")
    subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(work / "history.om"),
            str(work / "data"),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    prom = Prometheus(binary, work, [], extra_args=["--storage.tsdb.retention.time=100y"])
    try:
        prom.wait_ready()
        prom.until(lambda: prom.query(f"{{__name__=~'.+'}} @ {probe + 60}"), 30, "blocks loaded")
        yield prom
    finally:
        prom.stop()
