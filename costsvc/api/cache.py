"""The cost service's caches and their one rule: a value is kept while the **data version**
(costsvc/db/version.py) it was computed at is the current one. One :class:`SharedVersion` reads
the version; each request reads it once (:func:`request_version`) and every cache it consults
uses that: the answers of the read endpoints and ``/allocation`` (:class:`AnswerCache`), the
bearer tokens (costsvc/auth/principal.py) and ``/metrics`` (costsvc/metrics/routes.py), both
:class:`Kept`.

Answers of the read endpoints, kept until the data behind them changes.

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
from typing import Annotated, Any, Generic, TypeVar

from fastapi import Depends, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.encoders import jsonable_encoder
from sqlalchemy import Engine

from costsvc.db.version import data_version

OVERHEAD = 1024  # bytes an entry costs besides its body and key (objects, dict slot)
Compute = Callable[[], Response]  # what works an answer out


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
    """The data version, read once for all the requests waiting on it — from a thread
    (:meth:`get`) or on the event loop (:meth:`aget`: the requests that wait for a read await
    it there, no thread each; the read itself runs in the thread pool). One state, one rule:

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
        self._waiting: list[asyncio.Future[None]] = []  # event-loop requests waiting

    def _answer(self, arrived: int) -> int | None:
        """The value of a read that started after ``arrived`` (under the lock), or None."""
        return self._value if self._done > arrived else None

    def _begin(self) -> int:
        self._reading = True
        self._started += 1
        return self._started

    def _end(self, mine: int, value: int | None) -> None:
        with self._cond:
            self._reading = False
            if value is not None:  # a failed read: the waiters try themselves
                self._value, self._done = value, mine
            self._cond.notify_all()
            waiting, self._waiting = self._waiting, []
        for future in waiting:
            future.get_loop().call_soon_threadsafe(_wake, future)

    def get(self, engine: Engine) -> int:
        with self._cond:
            arrived = self._started  # a read numbered above this started after we came
            while True:
                if (found := self._answer(arrived)) is not None:
                    return found
                if not self._reading:
                    mine = self._begin()
                    break
                self._cond.wait()
        value: int | None = None
        try:
            value = self._read(engine)
            return value
        finally:
            self._end(mine, value)

    async def aget(self, engine: Engine) -> int:
        with self._cond:
            arrived = self._started
        while True:
            with self._cond:  # held for a few operations, never across a read
                if (found := self._answer(arrived)) is not None:
                    return found
                if not self._reading:
                    mine = self._begin()
                    break
                waiting = asyncio.get_running_loop().create_future()
                self._waiting.append(waiting)
            await waiting
        value: int | None = None
        try:
            value = await run_in_threadpool(self._read, engine)
            return value
        finally:
            self._end(mine, value)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def request_version(request: Request) -> int:
    """The data version this request's cached values are valid at: read once per request
    (by a read that started after it arrived), then the same for every cache it consults —
    its token, its answer, ``/metrics``."""
    found: int | None = getattr(request.state, "data_version", None)
    if found is None:
        state = request.app.state
        found = await state.answers.version.aget(state.engine)
        request.state.data_version = found
    return found


def request_version_sync(request: Request) -> int:
    """:func:`request_version` from a thread (a plain ``def`` route)."""
    found: int | None = getattr(request.state, "data_version", None)
    if found is None:
        state = request.app.state
        found = state.answers.version.get(state.engine)
        request.state.data_version = found
    return found


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
_ABSENT: Any = object()


class Kept(Generic[K, V]):
    """Small values kept while the data version they were computed at is the current one
    (the one rule of every cache here); at most ``max_entries`` (then emptied: keys an
    attacker chooses, such as unknown tokens, never grow it without bound)."""

    def __init__(self, max_entries: int) -> None:
        self._lock = threading.Lock()
        self._max = max_entries
        self._values: dict[K, tuple[int, V]] = {}

    def get(self, version: int, key: K, default: Any = _ABSENT) -> V | Any:
        """The value of ``key`` if computed at ``version``, else ``default`` (absent: a
        sentinel :meth:`missing` recognises)."""
        with self._lock:
            hit = self._values.get(key)
        return hit[1] if hit is not None and hit[0] == version else default

    @staticmethod
    def missing(value: Any) -> bool:
        return value is _ABSENT

    def put(self, version: int, key: K, value: V) -> None:
        with self._lock:
            if len(self._values) >= self._max and key not in self._values:
                self._values.clear()
            self._values[key] = (version, value)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()


class AnswerCache:
    def __init__(self, max_bytes: int = 64 * 2**20, max_answer_bytes: int = 2**20) -> None:
        self.max_bytes = max_bytes
        self.max_answer = max_answer_bytes
        self._lock = threading.Lock()
        self._answers: OrderedDict[Hashable, tuple[Response, int]] = OrderedDict()
        self._computing: dict[Hashable, threading.Event] = {}
        self.version = SharedVersion()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._answers)

    def get(
        self, engine: Engine, key: Hashable, compute: Compute, version: int | None = None
    ) -> Response:
        """The answer to ``key`` at the current data version (``version``: the request's,
        :func:`request_version`): kept, or computed — once, when several requests ask the
        same question at the same time (the others wait for it)."""
        at = self.version.get(engine) if version is None else version
        return self._get_at((at, key), compute)

    def _kept(self, full: Hashable) -> Response | None:
        """The answer kept for ``full`` (now the last to be dropped), or None; under the lock."""
        hit = self._answers.get(full)
        if hit is None:
            return None
        self._answers.move_to_end(full)
        return hit[0]

    def _get_at(self, full: Hashable, compute: Compute) -> Response:
        while True:
            with self._lock:
                if (hit := self._kept(full)) is not None:
                    return hit
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
        self, engine: Engine, key: Hashable, compute: Compute, version: int | None = None
    ) -> Response:
        """:meth:`get` for ``async def`` routes: a kept answer is served on the event loop
        (no thread hand-off); the version read and a computation run in the thread pool."""
        full = (await self.version.aget(engine) if version is None else version, key)
        with self._lock:
            hit = self._kept(full)
        if hit is not None:
            return hit
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


class RequestAnswers:
    """The app's :class:`AnswerCache` at the request's data version (:func:`request_version`)."""

    def __init__(self, cache: AnswerCache, version: int) -> None:
        self.cache, self.version = cache, version

    def get(self, engine: Engine, key: Hashable, compute: Compute) -> Response:
        return self.cache.get(engine, key, compute, self.version)

    async def aget(self, engine: Engine, key: Hashable, compute: Compute) -> Response:
        return await self.cache.aget(engine, key, compute, self.version)


async def answers(request: Request) -> RequestAnswers:
    return RequestAnswers(request.app.state.answers, await request_version(request))


Answers = Annotated[RequestAnswers, Depends(answers)]
