"""Memory stays bounded under a flood of distinct filtered queries from one team token
(2,400 such requests would otherwise take the API past 1 GB). The API runs as
``gpu-costsvc serve`` in its own process; its RSS is read from /proc, not inferred from
timings. The bound is documented in docs/security.md: the answer cache's size
(``COSTSVC_ANSWER_CACHE_BYTES``) plus the interpreter's and allocator's slack."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine

from costsvc.auth.tokens import create_token
from tests.costsvc.history import HOUR3, MODEL, ingest_with
from tests.procs import LISTENING, Process
from tests.prom import Prometheus, free_port

CACHE = 4 * 2**20  # the answer cache of the process under test
SLACK = 12 * 2**20  # what else may grow: allocator arenas, SQLAlchemy's statement cache, …
WARM = 200  # distinct requests before the first reading: the cache is full by then
FLOOD = 1000  # distinct requests after it: ~25 MB of keys if nothing bounded the cache


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def server(prometheus: Prometheus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    work = tmp_path_factory.mktemp("memory")
    url = f"sqlite:///{work / 'memory.db'}"
    ingest_with(prometheus.url, url, MODEL, [HOUR3])
    engine = create_engine(url)
    token = create_token(engine, "flood", "team", "a", "test")
    engine.dispose()
    port = free_port()
    proc = Process(
        [sys.executable, "-m", "costsvc.cli", "serve", "--no-ingest"],
        env={
            "COSTSVC_DATABASE_URL": url,
            "COSTSVC_LISTEN_ADDRESS": f"127.0.0.1:{port}",
            "COSTSVC_ANSWER_CACHE_BYTES": str(CACHE),
            "COSTSVC_KUBE_API_URL": "",
        },
    )
    try:
        proc.wait_for(LISTENING, 30)
        yield proc, f"http://127.0.0.1:{port}", token
    finally:
        proc.stop()


def _query(i: int) -> dict[str, str]:
    """A distinct question: four filters of 90 values each, ~7 KB of query string."""
    values = lambda name: ",".join(f"{name[:2]}{i:06d}-{j:03d}-xxxxxx" for j in range(90))  # noqa: E731
    return {
        "start": "2026-11-10T00:00:00Z",
        "end": "2026-11-11T00:00:00Z",
        "pod": values("pod"),
        "namespace": values("namespace"),
        "node": values("node"),
        "project": values("project"),
    }


def test_a_flood_of_distinct_queries_keeps_rss_bounded(server: Any) -> None:
    proc, base, token = server
    pid = proc.proc.pid
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as http:
        for i in range(WARM):
            r = http.get("/v1/costs", params=_query(i))
            assert r.status_code == 200, r.text[:300]
        before = rss(pid)
        for i in range(WARM, WARM + FLOOD):
            r = http.get("/v1/costs", params=_query(i))
            assert r.status_code == 200, r.text[:300]
        after = rss(pid)
        # the same question again is answered (from the cache or not) identically
        assert http.get("/v1/costs", params=_query(WARM + FLOOD - 1)).json() == r.json()
    growth = after - before
    print(f"RSS {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB after {FLOOD} requests")
    assert growth <= CACHE + SLACK, f"RSS grew {growth / 2**20:.1f} MiB"
