"""Answers of the read endpoints, kept until the data behind them changes.

The key holds the question (endpoint, the caller's scope, the parameters, the resolved time
range) and the **data version**: the newest ingest/reprice run and the newest audit entry
(budgets, tokens, cost model, month close). Every write that can change an answer adds one of
those rows, whichever process makes it, so a cached answer is never stale — reading the
version is two index lookups, much less than the aggregate it saves. Dashboards and team
portals ask the same questions over and over; between hourly ingests they are free.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from fastapi import Response
from fastapi.encoders import jsonable_encoder
from sqlalchemy import Engine

from costsvc.db.runs import data_version

T = TypeVar("T")
MAX_ENTRIES = 2048


def json_response(answer: Any) -> Response:
    """An answer encoded once, as FastAPI would (its response model documents it)."""
    return Response(
        json.dumps(jsonable_encoder(answer), ensure_ascii=False, separators=(",", ":")).encode(),
        media_type="application/json",
    )


class AnswerCache:
    def __init__(self, size: int = MAX_ENTRIES) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._answers: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, engine: Engine, key: Hashable, compute: Callable[[], T]) -> T:
        full = (data_version(engine), key)
        with self._lock:
            if full in self._answers:
                self._answers.move_to_end(full)
                found: T = self._answers[full]
                return found
        answer = compute()
        with self._lock:
            self._answers[full] = answer
            while len(self._answers) > self._size:
                self._answers.popitem(last=False)
        return answer
