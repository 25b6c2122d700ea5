"""``create_app()``: the FastAPI application, its lifespan (one database engine) and routers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy import Engine

from costsvc import __version__
from costsvc.api.routes import (
    allocation,
    budgets,
    cost_model,
    costs,
    ingest,
    metrics,
    months,
    reports,
    tokens,
)
from costsvc.db.engine import make_engine, reachable
from costsvc.settings import Settings

Clock = Callable[[], datetime]


def _now() -> datetime:
    return datetime.now(UTC)


def create_app(
    settings: Settings | None = None, engine: Engine | None = None, clock: Clock = _now
) -> FastAPI:
    """The API over ``settings.database_url`` (or ``engine``); ``clock`` gives "now" (tests
    move it by hand)."""
    settings = settings or Settings()
    own_engine = engine is None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        if own_engine:
            app.state.engine.dispose()

    app = FastAPI(
        title="gpu-costsvc",
        version=__version__,
        description="GPU chargeback: costs per team, CSV and FOCUS reports, month close, "
        "budgets. Money is a decimal string in the billing currency; times are UTC.",
        lifespan=lifespan,
    )
    app.state.engine = engine if engine is not None else make_engine(settings.database_url)
    app.state.settings = settings
    app.state.clock = clock
    for module in (costs, reports, months, budgets, tokens, cost_model, ingest):
        app.include_router(module.router, prefix="/v1")
    app.include_router(metrics.router)
    app.include_router(allocation.router)  # OpenCost's path, not under /v1

    @app.get("/healthz", tags=["health"], summary="Liveness and database reachability")
    def healthz(request: Request) -> JSONResponse:
        if not reachable(request.app.state.engine):  # the reason never goes to an open endpoint
            return JSONResponse({"status": "database unavailable"}, status_code=503)
        return JSONResponse({"status": "ok"})

    return app
