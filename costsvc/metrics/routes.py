"""``/metrics``: the cost service's own series (costsvc/metrics/series.py) for Prometheus, read from
the database on scrape when the data version changed (costsvc/api/cache.py's rule,
costsvc/db/version.py: a budget, an ingested hour, whichever process wrote it) or, for the
figures that move with the clock (the ingest lag), in each new ``CACHE_SECONDS`` slot, then
cut to what the caller may see (``costsvc.metrics.series.scoped``: per-team and per-pod series only
with a token allowed them).
Documented in docs/costsvc-metrics.md and docs/security.md."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from fastapi import APIRouter, HTTPException, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric

from costsvc.api.cache import Kept, request_version_sync
from costsvc.api.errors import ERRORS
from costsvc.auth.principal import MaybeCaller
from costsvc.metrics.series import collect, scoped

router = APIRouter(tags=["metrics"])
CACHE_SECONDS = 15.0


class _Collector:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def _families(request: Request) -> list[Metric]:
    state = request.app.state
    lock: threading.Lock = state.__dict__.setdefault("metrics_lock", threading.Lock())
    kept: Kept[int, list[Metric]] = state.__dict__.setdefault("metrics_cache", Kept(1))
    version = request_version_sync(request)
    slot = int(time.monotonic() // CACHE_SECONDS)
    with lock:
        found: list[Metric] = kept.get(version, slot)
        if Kept.missing(found):
            found = collect(state.engine, state.clock())
            kept.put(version, slot, found)
    return found


@router.get(
    "/metrics",
    response_class=Response,
    summary="Prometheus exposition: per-team series need a token (docs/security.md)",
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        401: ERRORS[401],
    },
)
def metrics(request: Request, who: MaybeCaller) -> Response:
    if who is None and not request.app.state.settings.metrics_public:
        raise HTTPException(401, "missing bearer token", {"WWW-Authenticate": "Bearer"})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(scoped(_families(request), who)))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
