"""``create_app()``: the FastAPI application, its lifespan (one database engine) and routers,
the request limits (costsvc/api/limits.py), the security headers of every answer
(costsvc/api/headers.py), and the API docs served from packaged assets."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from importlib.resources import files
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy import Engine
from starlette.types import ASGIApp

from costsvc import __version__
from costsvc.advice import routes as advice
from costsvc.api.cache import AnswerCache
from costsvc.api.errors import validation_problem
from costsvc.api.exports import ExportSlots
from costsvc.api.headers import SecurityHeaders
from costsvc.api.limits import Limits
from costsvc.auth import routes as tokens
from costsvc.budgets import routes as budgets
from costsvc.costs import cost_model_routes as cost_model
from costsvc.costs import routes as costs
from costsvc.db.engine import make_engine, reachable
from costsvc.inference import routes as inference
from costsvc.ingest import routes as ingest
from costsvc.kit.settings import Settings
from costsvc.metrics import routes as metrics
from costsvc.months import routes as months
from costsvc.opencost import routes as allocation
from costsvc.pages.site import install as install_pages
from costsvc.queues import routes as queues
from costsvc.reports import routes as reports

Clock = Callable[[], datetime]
# Swagger UI (Apache-2.0) and ReDoc (MIT) as the fastapi-offline package (MIT) ships them,
# each with its licence notice: /docs and /redoc work with no network (docs/security.md)
ASSETS = "/docs-assets"


class CostApp(FastAPI):
    """The FastAPI app with the security headers outside every middleware
    (costsvc/api/headers.py): the limits' refusals and Starlette's own 500 carry them too."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())


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

    app = CostApp(
        title="gpu-costsvc",
        version=__version__,
        description="GPU chargeback: costs per team, CSV and FOCUS reports, month close, "
        "budgets. Money is a decimal string in the billing currency; times are UTC. "
        "Every /v1 operation needs a bearer token (docs/security.md).",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.engine = engine if engine is not None else make_engine(settings.database_url)
    app.state.settings = settings
    app.state.clock = clock
    app.state.answers = AnswerCache(
        settings.answer_cache_bytes, settings.answer_cache_max_answer_bytes
    )
    app.state.exports = ExportSlots(settings.exports_per_token, settings.exports_max)
    app.add_middleware(
        Limits,
        max_body_bytes=settings.max_body_bytes,
        body_timeout_seconds=settings.body_timeout_seconds,
    )
    app.add_exception_handler(RequestValidationError, validation_problem)
    for module in (costs, reports, months, budgets, tokens, cost_model, ingest, advice):
        app.include_router(module.router, prefix="/v1")
    app.include_router(inference.router, prefix="/v1")
    app.include_router(queues.router, prefix="/v1")
    app.include_router(metrics.router)
    app.include_router(allocation.router)  # OpenCost's path, not under /v1
    app.include_router(inference.opencost_router)  # OpenCost's /inferenceCost/total
    _docs(app)
    install_pages(app)  # the pages under /ui (costsvc/pages/), / leads there
    if settings.metrics_public:
        _metrics_auth_optional(app)

    @app.get("/healthz", tags=["health"], summary="Liveness and database reachability")
    def healthz(request: Request) -> JSONResponse:
        if not reachable(request.app.state.engine):  # the reason never goes to an open endpoint
            return JSONResponse({"status": "database unavailable"}, status_code=503)
        return JSONResponse({"status": "ok"})

    return app


def _metrics_auth_optional(app: FastAPI) -> None:
    """With ``COSTSVC_METRICS_PUBLIC``, the description says /metrics answers without a token
    too (OpenAPI: an empty requirement among the alternatives)."""
    described = app.openapi

    def openapi() -> dict[str, Any]:
        schema = described()
        schema["paths"]["/metrics"]["get"]["security"] = [{}, {"bearer": []}]
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI) and ``/redoc`` from the packaged assets, never a CDN."""
    assets = files("fastapi_offline") / "static"
    app.mount(ASSETS, StaticFiles(directory=str(assets)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}/openapi.json",
            title="gpu-costsvc - Swagger UI",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
            # validatorUrl null: Swagger UI would otherwise send the spec's URL to its online
            # validator (https://validator.swagger.io) from any browser not on localhost
            # (swagger-ui docs/usage/configuration.md, "validatorUrl")
            swagger_ui_parameters={"persistAuthorization": False, "validatorUrl": None},
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}/openapi.json",
            title="gpu-costsvc - ReDoc",
            redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
