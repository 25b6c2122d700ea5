"""Abandoned and stalled downloads never take the API down: one team token starts
200 chargeback exports and hangs up after ~100 KB, then 50 more whose client never reads on,
against a real ``gpu-costsvc serve`` on PostgreSQL. Meanwhile and afterwards no session of the
service is idle in a transaction; the stalled ones are cut by the server (their export slots
come back), ``/healthz`` and ``/v1/costs`` answer at once and right, and SIGTERM stops the
server promptly even with stalled downloads in flight.

Raw sockets, many at once: what a browser or a script that gives up does, not what a polite
HTTP client does. The server's send time-out is set short through its setting."""

from __future__ import annotations

import re
import signal
import socket
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from costsvc.api.exports import RETRY_AFTER, ExportSlots
from costsvc.auth.tokens import create_token
from costsvc.db.engine import APPLICATION
from tests.costsvc.apiserver import NOV20, Clock, serve
from tests.costsvc.conftest import fresh_database
from tests.costsvc.history import HOUR, MODEL, ingest_with
from tests.procs import LISTENING, Process
from tests.prom import Prometheus, free_port

ROWS = 20_000  # ~4 MB of CSV: more than the loopback socket buffers hold
EXPORT = "/v1/reports/chargeback.csv?month=2026-10"
BIG_MONTH = f"""
INSERT INTO chargeback (hour, cluster, team, project, stage, namespace, pod, node, gpu_model,
    mig_profile, billing_month, correction, currency, allocated, used, waste, idle, gpu_hours)
SELECT timestamptz '2026-10-01 00:00Z' + (i / 100) * interval '1 hour', 'c1', 'nlp', 'p', 's',
    'ns', 'pod-' || (i % 100), 'node-1', 'NVIDIA H100 80GB HBM3', '', '2026-10', false, 'USD',
    2500000, 1000000, 1500000, 0, 1000000
FROM generate_series(0, {ROWS - 1}) AS i
"""


@pytest.fixture(scope="module")
def database(
    request: pytest.FixtureRequest, prometheus: Prometheus, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with fresh_database("postgresql", request, tmp_path_factory.mktemp("abandon")) as url:
        ingest_with(prometheus.url, url, MODEL, [HOUR])  # November: what /v1/costs answers
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text(BIG_MONTH))  # October: what the team exports
        engine.dispose()
        yield url


def request_line(token: str) -> bytes:
    return (f"GET {EXPORT} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n").encode()


def status_of(sock: socket.socket) -> int:
    """Read up to the end of the answer's headers; its status."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError(f"closed after {head!r}")
        head += chunk
    return int(head.split(b" ", 2)[1])


def abort_after_100kb(port: int, token: str) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request_line(token))
        status = status_of(sock)
        got = 0
        while status == 200 and got < 100_000:
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += len(chunk)
        return status  # the socket is closed with the rest unread: the client is gone


def stall(port: int, token: str) -> tuple[int, socket.socket]:
    """An export whose client reads its headers and nothing more, its receive window small."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    sock.sendall(request_line(token))
    return status_of(sock), sock


def idle_in_transaction(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return list(
                conn.execute(
                    text(
                        "SELECT left(query, 80) FROM pg_stat_activity WHERE application_name = "
                        ":app AND datname = current_database() AND state LIKE 'idle in trans%'"
                    ),
                    {"app": APPLICATION},
                ).scalars()
            )
    finally:
        engine.dispose()


def test_abandoned_and_stalled_downloads_leave_the_api_whole(database: str, tmp_path: Path) -> None:
    engine = create_engine(database)
    token = create_token(engine, "team-nlp", "team", "nlp", "test")
    engine.dispose()
    port = free_port()
    serve = Process(
        [sys.executable, "-m", "costsvc.cli", "serve", "--no-ingest"],
        env={
            "COSTSVC_DATABASE_URL": database,
            "COSTSVC_LISTEN_ADDRESS": f"127.0.0.1:{port}",
            "COSTSVC_SEND_TIMEOUT_SECONDS": "2",
        },
    )
    stalled: list[socket.socket] = []
    try:
        serve.wait_for(LISTENING, 30)
        api = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        costs = {"start": "2026-11-10T00:00:00Z", "end": "2026-11-11T00:00:00Z"}
        before = api.get("/v1/costs", params=costs)  # and warm: the token looked up
        assert before.status_code == 200 and before.json()["rows"], before.text
        whole = api.get(EXPORT)
        assert whole.status_code == 200 and whole.text.count("\n") == ROWS + 1

        with ThreadPoolExecutor(32) as pool:
            aborted = list(pool.map(lambda _: abort_after_100kb(port, token), range(200)))
        assert set(aborted) <= {200, 429} and aborted.count(200) >= 2, aborted

        with ThreadPoolExecutor(50) as pool:
            held = list(pool.map(lambda _: stall(port, token), range(50)))
        stalled = [s for _, s in held]
        statuses = [status for status, _ in held]
        assert set(statuses) <= {200, 429} and 1 <= statuses.count(200) <= 2, statuses
        # the stalled exports hold a file and a slot, never a transaction
        assert idle_in_transaction(database) == []
        # the server cuts them: their slots come back while their clients still hang on
        deadline = time.monotonic() + 30
        while (probe := api.get(EXPORT)).status_code == 429:
            assert probe.headers["retry-after"]
            assert time.monotonic() < deadline, "the stalled exports' slots never came back"
            time.sleep(0.2)
        assert probe.status_code == 200 and probe.content == whole.content

        # at once: within 5 s
        assert api.get("/healthz", timeout=5).json() == {"status": "ok"}
        assert api.get("/v1/costs", params=costs, timeout=5).json() == before.json()
        assert idle_in_transaction(database) == []

        # SIGTERM with stalled downloads in flight
        more = [stall(port, token) for _ in range(2)]
        assert [status for status, _ in more] == [200, 200]
        stalled += [s for _, s in more]
        serve.proc.send_signal(signal.SIGTERM)
        # uvicorn ends a graceful shutdown by raising the signal again: the exit says SIGTERM
        assert serve.proc.wait(5) in (0, -signal.SIGTERM), serve.output()
        assert "Finished server process" in serve.output()
        api.close()
    finally:
        for s in stalled:
            s.close()
        serve.stop()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def november(
    request: pytest.FixtureRequest, prometheus: Prometheus, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with fresh_database(request.param, request, tmp_path_factory.mktemp("exports")) as url:
        ingest_with(prometheus.url, url, MODEL, [HOUR])
        yield url


def settled(slots: ExportSlots, held: int = 0) -> None:
    """Wait until ``held`` slots are in use: an answer gives its slot back just after its
    last byte went out, when the client may already have it all."""
    deadline = time.monotonic() + 10
    while slots.in_progress() != held:
        assert time.monotonic() < deadline, slots.in_progress()
        time.sleep(0.01)


def test_exports_are_limited_per_token_and_in_all(november: str) -> None:
    with serve(november, Clock(NOV20), ["nlp"], exports_per_token=1, exports_max=2) as api:
        slots = api.app.state.exports
        path = "/v1/reports/focus.csv?month=2026-11"
        free = api.http.get(path, headers=api.auth("team:nlp"))
        assert free.status_code == 200
        assert int(free.headers["content-length"]) == len(free.content) > 0
        settled(slots)
        release = slots.take("team-nlp")  # an export of that token in progress
        busy = api.http.get(path, headers=api.auth("team:nlp"))
        assert busy.status_code == 429 and busy.headers["retry-after"] == str(RETRY_AFTER)
        assert "at most 1 exports per token" in busy.json()["detail"]
        assert api.http.get(path, headers=api.auth("finance")).status_code == 200
        settled(slots, 1)
        other = slots.take("someone")
        full = api.http.get(path, headers=api.auth("finance"))
        assert full.status_code == 429 and "at most 2 exports at once" in full.text
        release()
        release()  # given back once only
        other()
        assert slots.in_progress() == 0
        again = api.http.get(path, headers=api.auth("team:nlp"))
        assert again.status_code == 200 and again.content == free.content
        settled(slots)  # the answers gave theirs back


def test_an_export_past_its_bound_is_refused_and_holds_nothing(november: str) -> None:
    with serve(november, Clock(NOV20), prefix="b-", export_max_bytes=1024) as api:
        r = api.http.get("/v1/reports/focus.csv?month=2026-11", headers=api.auth("finance"))
        assert r.status_code == 507 and "COSTSVC_EXPORT_MAX_BYTES" in r.json()["detail"]
        assert api.app.state.exports.in_progress() == 0
        assert api.app.state.engine.pool.checkedout() == 0  # the report's connection is back
        small = api.http.get(
            "/v1/reports/chargeback.csv?month=2026-10", headers=api.auth("finance")
        )
        assert small.status_code == 200 and small.text.startswith("billing_month,")


def test_every_api_server_is_built_by_one_function() -> None:
    """``serve``, ``serve --workers N``, the demo and the bench run uvicorn with the time-outs
    and limits of costsvc/api/server.py: nothing else builds a uvicorn configuration."""
    root = Path(__file__).resolve().parents[2]
    found = []
    for package in ("costsvc", "demo", "bench", "exporter"):
        for path in sorted((root / package).rglob("*.py")):
            source = path.read_text()
            for m in re.finditer(r"uvicorn\.(Config|run)\(", source):
                call = source[m.start() : m.start() + 600].split("\n\n")[0]
                found.append((path.relative_to(root).as_posix(), m[1], "options(" in call))
    assert ("costsvc/api/server.py", "Config", True) in found
    assert ("costsvc/cli.py", "run", True) in found
    assert [f for f in found if f[0] != "costsvc/api/server.py" and not f[2]] == []
