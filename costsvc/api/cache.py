"""Answers of the read endpoints, kept until the data behind them changes.

The key holds the question (endpoint, the caller's scope, the normalised parameters, the
resolved time range in whole hours — a live window such as ``month`` or ``24h`` is the same
question for a whole hour) and the **data version** (costsvc/db/version.py): a counter every
write that can change an answer bumps in its own transaction, whichever process makes it, so
a cached answer is never stale — reading the version is one primary-key lookup, much less
than the aggregate it saves. Dashboards
and team portals ask the same questions over and over; between hourly ingests they are free.

Memory is bounded in bytes, not entries (``COSTSVC_ANSWER_CACHE_BYTES``, default 64 MiB per
process): an entry costs what its objects take (the body, every string and tuple of its key,
as ``sys.getsizeof`` counts them) and a fixed overhead for the rest; the least recently used
go first; an answer larger than ``COSTSVC_ANSWER_CACHE_MAX_ANSWER_BYTES`` (1 MiB) is
served but not kept. docs/security.md.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Annotated, Any

from fastapi import Depends, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.encoders import jsonable_encoder
from sqlalchemy import Engine

from costsvc.db.version import data_version

OVERHEAD = 1024  # bytes an entry costs besides its body and key (objects, dict slot)


def size_of(key: Any) -> int:
    """Bytes a key takes: itself and, for tuples, everything in them."""
    total, stack = 0, [key]
    while stack:
        item = stack.pop()
        total += sys.getsizeof(item)
        if isinstance(item, tuple):
            stack.extend(item)
    return total


def json_response(answer: Any) -> Response:
    """An answer encoded once, as FastAPI would (its response model documents it)."""
    return Response(
        json.dumps(jsonable_encoder(answer), ensure_ascii=False, separators=(",", ":")).encode(),
        media_type="application/json",
    )


class SharedVersion:
    """The data version, read once for all the requests waiting on it.

    A request may use a read only if the read *started after the request arrived*: then
    every write committed before the request is in it, exactly as if the request had read
    the version itself. Under load (50 clients) one read serves the dozens of requests that
    arrived while the previous one ran, instead of a database round trip each."""

    def __init__(self, read: Callable[[Engine], int] = data_version) -> None:
        self._read = read
        self._cond = threading.Condition()
        self._started = 0  # reads started so far (the latest one's number)
        self._done = 0  # the number of the latest read that finished
        self._value: int | None = None
        self._reading = False

    def get(self, engine: Engine) -> int:
        with self._cond:
            arrived = self._started  # a read numbered above this started after we came
            while True:
                if self._done > arrived and self._value is not None:
                    return self._value
                if not self._reading:
                    self._reading = True
                    self._started += 1
                    mine = self._started
                    break
                self._cond.wait()
        value: int | None = None
        try:
            value = self._read(engine)
            return value
        finally:
            with self._cond:
                self._reading = False
                if value is not None:  # a failed read: the waiters try themselves
                    self._value, self._done = value, mine
                self._cond.notify_all()


class SharedVersionAsync:
    """:class:`SharedVersion` for ``async def`` routes, on the event loop: the requests that
    wait for a read await it there (no thread each); the read itself runs in the thread
    pool. The same rule: only a read that started after the request arrived answers it."""

    def __init__(self, read: Callable[[Engine], int] = data_version) -> None:
        self._read = read
        self._started = 0
        self._done = 0
        self._value: int | None = None
        self._reading: asyncio.Future[None] | None = None

    async def get(self, engine: Engine) -> int:
        arrived = self._started
        while True:
            if self._done > arrived and self._value is not None:
                return self._value
            if self._reading is None:
                break
            await asyncio.shield(self._reading)
        self._started += 1
        mine = self._started
        self._reading = asyncio.get_running_loop().create_future()
        try:
            value = await run_in_threadpool(self._read, engine)
            self._value, self._done = value, mine
            return value
        finally:  # a failed read: the waiters try themselves
            self._reading.set_result(None)
            self._reading = None


class AnswerCache:
    def __init__(self, max_bytes: int = 64 * 2**20, max_answer_bytes: int = 2**20) -> None:
        self.max_bytes = max_bytes
        self.max_answer = max_answer_bytes
        self._lock = threading.Lock()
        self._answers: OrderedDict[Hashable, tuple[Response, int]] = OrderedDict()
        self._computing: dict[Hashable, threading.Event] = {}
        self.version = SharedVersion()
        self.version_async = SharedVersionAsync()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._answers)

    def get(self, engine: Engine, key: Hashable, compute: Callable[[], Response]) -> Response:
        """The answer to ``key`` at the current data version: kept, or computed — once, when
        several requests ask the same question at the same time (the others wait for it)."""
        return self._get_at((self.version.get(engine), key), compute)

    def _get_at(self, full: Hashable, compute: Callable[[], Response]) -> Response:
        while True:
            with self._lock:
                hit = self._answers.get(full)
                if hit is not None:
                    self._answers.move_to_end(full)
                    return hit[0]
                running = self._computing.get(full)
                if running is None:
                    self._computing[full] = threading.Event()
                    break
            running.wait()  # then kept (a hit), or not (too large, failed): ours to compute
        try:
            return self._keep(full, compute())
        finally:
            with self._lock:
                done = self._computing.pop(full, None)
            if done is not None:
                done.set()

    async def aget(
        self, engine: Engine, key: Hashable, compute: Callable[[], Response]
    ) -> Response:
        """:meth:`get` for ``async def`` routes: a kept answer is served on the event loop
        (no thread hand-off); the version read and a computation run in the thread pool."""
        full = (await self.version_async.get(engine), key)
        with self._lock:
            hit = self._answers.get(full)
            if hit is not None:
                self._answers.move_to_end(full)
                return hit[0]
        found: Response = await run_in_threadpool(self._get_at, full, compute)
        return found

    def _keep(self, full: Hashable, answer: Response) -> Response:
        cost = sys.getsizeof(answer.body) + size_of(full) + OVERHEAD
        if len(answer.body) > self.max_answer or cost > self.max_bytes:
            return answer
        with self._lock:
            old = self._answers.pop(full, None)
            if old is not None:
                self.bytes -= old[1]
            self._answers[full] = (answer, cost)
            self.bytes += cost
            while self.bytes > self.max_bytes:
                _, (_, dropped) = self._answers.popitem(last=False)
                self.bytes -= dropped
        return answer


async def answers(request: Request) -> AnswerCache:
    found: AnswerCache = request.app.state.answers
    return found


Answers = Annotated[AnswerCache, Depends(answers)]
