"""Answers of the read endpoints, kept until the data behind them changes.

The key holds the question (endpoint, the caller's scope, the normalised parameters, the
resolved time range in whole hours — a live window such as ``month`` or ``24h`` is the same
question for a whole hour) and the **data version**: the newest ingest/reprice run and the
newest audit entry (budgets, tokens, cost model, month close). Every write that can change an
answer adds one of those rows, whichever process makes it, so a cached answer is never stale —
reading the version is two index lookups, much less than the aggregate it saves. Dashboards
and team portals ask the same questions over and over; between hourly ingests they are free.

Memory is bounded in bytes, not entries (``COSTSVC_ANSWER_CACHE_BYTES``, default 64 MiB per
process): an entry costs what its objects take (the body, every string and tuple of its key,
as ``sys.getsizeof`` counts them) and a fixed overhead for the rest; the least recently used
go first; an answer larger than ``COSTSVC_ANSWER_CACHE_MAX_ANSWER_BYTES`` (1 MiB) is
served but not kept. docs/security.md.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Annotated, Any

from fastapi import Depends, Request, Response
from fastapi.encoders import jsonable_encoder
from sqlalchemy import Engine

from costsvc.db.runs import data_version

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


class AnswerCache:
    def __init__(self, max_bytes: int = 64 * 2**20, max_answer_bytes: int = 2**20) -> None:
        self.max_bytes = max_bytes
        self.max_answer = max_answer_bytes
        self._lock = threading.Lock()
        self._answers: OrderedDict[Hashable, tuple[Response, int]] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._answers)

    def get(self, engine: Engine, key: Hashable, compute: Callable[[], Response]) -> Response:
        full = (data_version(engine), key)
        with self._lock:
            hit = self._answers.get(full)
            if hit is not None:
                self._answers.move_to_end(full)
                return hit[0]
        answer = compute()
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


def answers(request: Request) -> AnswerCache:
    found: AnswerCache = request.app.state.answers
    return found


Answers = Annotated[AnswerCache, Depends(answers)]
