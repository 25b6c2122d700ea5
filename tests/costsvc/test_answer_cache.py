"""The answer cache's shared work (costsvc/api/cache.py): one data-version read serves the
requests that arrived before it started — never one that started before a request arrived —
and one computation serves the requests asking the same question at once."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from fastapi import Response
from sqlalchemy import create_engine

from costsvc.api.cache import AnswerCache, SharedVersion
from costsvc.auth.tokens import revoke_token
from costsvc.db.migrate import upgrade
from tests.costsvc.apiserver import NOV20, Clock, serve


class GatedReads:
    """A data-version reader whose reads block until released, numbering what they return."""

    def __init__(self) -> None:
        self.started: list[threading.Event] = []
        self.release: list[threading.Event] = []
        self.version = 0  # bumped by a "write"
        self._lock = threading.Lock()

    def __call__(self, _engine: Any) -> tuple[int, int]:
        with self._lock:
            started, release = threading.Event(), threading.Event()
            self.started.append(started)
            self.release.append(release)
            seen = self.version  # what the database holds when the read starts
        started.set()
        release.wait()
        return (0, seen)


def run(target: Any, out: list[Any]) -> threading.Thread:
    t = threading.Thread(target=lambda: out.append(target()), daemon=True)
    t.start()
    return t


def wait_for_reads(reads: GatedReads, n: int) -> None:
    while len(reads.started) < n:  # the list grows as reads begin; each is then waited on
        threading.Event().wait(0.001)
    reads.started[n - 1].wait()


def test_a_read_that_started_before_a_request_is_never_its_answer() -> None:
    reads = GatedReads()
    shared = SharedVersion(reads)
    a: list[Any] = []
    ta = run(lambda: shared.get(None), a)  # type: ignore[arg-type]
    wait_for_reads(reads, 1)  # read 1 is under way, with version 0
    reads.version = 1  # a write commits
    b: list[Any] = []
    tb = run(lambda: shared.get(None), b)  # type: ignore[arg-type]
    reads.release[0].set()
    ta.join()
    assert a == [(0, 0)]
    wait_for_reads(reads, 2)  # b arrived after read 1 started: it needs read 2
    reads.release[1].set()
    tb.join()
    assert b == [(0, 1)]
    assert len(reads.started) == 2


def test_requests_waiting_on_one_read_share_it() -> None:
    reads = GatedReads()
    shared = SharedVersion(reads)
    first: list[Any] = []
    t0 = run(lambda: shared.get(None), first)  # type: ignore[arg-type]
    wait_for_reads(reads, 1)
    waiting: list[Any] = []
    threads = [run(lambda: shared.get(None), waiting) for _ in range(8)]  # type: ignore[arg-type]
    while len(shared._cond._waiters) < 8:  # type: ignore[attr-defined]  # all eight wait
        threading.Event().wait(0.001)
    reads.release[0].set()
    t0.join()
    wait_for_reads(reads, 2)  # the eight arrived during read 1: one read 2 for all of them
    reads.release[1].set()
    for t in threads:
        t.join()
    assert waiting == [(0, 0)] * 8
    assert len(reads.started) == 2


def test_one_computation_answers_concurrent_requests() -> None:
    cache = AnswerCache()
    cache.version = SharedVersion(lambda _e: (1, 1))
    gate, calls = threading.Event(), []

    def compute() -> Response:
        calls.append(1)
        gate.wait()
        return Response(b"answer")

    out: list[Any] = []
    threads = [run(lambda: cache.get(None, "q", compute), out) for _ in range(6)]  # type: ignore[arg-type]
    while not calls:
        threading.Event().wait(0.001)
    gate.set()
    for t in threads:
        t.join()
    assert [r.body for r in out] == [b"answer"] * 6
    assert calls == [1]


def test_the_event_loop_variant_keeps_the_same_rule() -> None:
    reads = GatedReads()
    shared = SharedVersion(reads)

    async def started(n: int) -> None:
        while len(reads.started) < n:  # the read runs in a worker thread
            await asyncio.sleep(0.001)

    async def scenario() -> tuple[Any, Any, Any]:
        a = asyncio.create_task(shared.aget(None))  # type: ignore[arg-type]
        await started(1)
        reads.version = 1  # a write commits while read 1 is under way
        b = asyncio.create_task(shared.aget(None))  # type: ignore[arg-type]
        c = asyncio.create_task(shared.aget(None))  # type: ignore[arg-type]
        await asyncio.sleep(0)  # b and c arrive (and wait)
        reads.release[0].set()
        got_a = await a
        await started(2)  # b and c need a read that started after they came: one, shared
        reads.release[1].set()
        return got_a, await b, await c

    assert asyncio.run(scenario()) == ((0, 0), (0, 1), (0, 1))
    assert len(reads.started) == 2


def test_a_token_revoked_elsewhere_is_refused_at_once(db_url: str) -> None:
    """The token cache keeps a principal while the data version is unchanged (the one rule of
    costsvc/api/cache.py): a revocation by another process (here the CLI's function, as
    ``gpu-costsvc token revoke`` runs it) bumps it, so the next request is refused — not
    served from a cache for a few more seconds."""
    upgrade(db_url)
    with serve(db_url, Clock(NOV20), ["a"]) as api:
        assert api.get("/v1/budgets", "team:a").status_code == 200  # looked up, kept
        assert api.get("/v1/budgets", "team:a").status_code == 200
        engine = create_engine(db_url)
        try:
            assert revoke_token(engine, "team-a", "cli")
        finally:
            engine.dispose()
        r = api.get("/v1/budgets", "team:a")
        assert r.status_code == 401, r.text
        assert api.get("/v1/budgets", "finance").status_code == 200
