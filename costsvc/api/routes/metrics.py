"""``/metrics``: the cost service's own series (costsvc/metrics.py) for Prometheus, read from
the database on scrape at most every ``CACHE_SECONDS``. Documented in docs/costsvc-metrics.md."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric

from costsvc.metrics import collect

router = APIRouter(tags=["metrics"])
CACHE_SECONDS = 15.0


class _Collector:
    def __init__(self, request: Request) -> None:
        self.request = request

    def collect(self) -> Iterator[Metric]:
        state = self.request.app.state
        lock: threading.Lock = state.__dict__.setdefault("metrics_lock", threading.Lock())
        with lock:
            cached = getattr(state, "metrics_cache", None)
            if cached is None or time.monotonic() - cached[0] > CACHE_SECONDS:
                cached = (time.monotonic(), collect(state.engine, state.clock()))
                state.metrics_cache = cached
        yield from cached[1]


@router.get(
    "/metrics",
    response_class=Response,
    summary="Prometheus exposition",
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
def metrics(request: Request) -> Response:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(request))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
