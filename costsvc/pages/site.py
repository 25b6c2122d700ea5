"""The pages on the app: their routers, their stylesheet, ``/`` leading to them, and errors
under ``/ui`` answered as pages (no session: the sign-in page) while the API's stay JSON."""

from __future__ import annotations

import inspect
from importlib.resources import files

from fastapi import FastAPI, Request, Response
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from costsvc.pages import budgets, downloads, explore, finance, fleet, overview, session, team
from costsvc.pages.render import PREFIX, PageError, page

STATIC = f"{PREFIX}/static"


def _ours(request: Request) -> bool:
    path = request.url.path
    return path == PREFIX or path.startswith(PREFIX + "/")


async def _viewer_or_none(request: Request) -> session.Viewer | None:
    try:
        return await session.viewer(request)
    except HTTPException:
        return None


async def _error_page(request: Request, status: int, message: str) -> Response:
    if status == 401:
        return RedirectResponse(f"{PREFIX}/signin", status_code=303)
    context = {"status": status, "message": message}
    return page(request, "error.html", context, status, await _viewer_or_none(request))


def install(app: FastAPI) -> None:
    """Add the pages to ``app`` (after the API's exception handlers: they are wrapped)."""
    app.state.signins = session.SignInLimits.of(app.state.settings)
    for module in (session, overview, team, budgets, finance, fleet, explore, downloads):
        app.include_router(module.router)
    app.mount(STATIC, StaticFiles(directory=str(files("costsvc.pages") / "static")), "pages")
    api_validation = app.exception_handlers.get(RequestValidationError)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if not _ours(request):
            return await http_exception_handler(request, exc)
        return await _error_page(request, exc.status_code, str(exc.detail))

    async def validation_error(request: Request, exc: Exception) -> Response:
        if not _ours(request) and api_validation is not None:
            answer = api_validation(request, exc)
            return await answer if inspect.isawaitable(answer) else answer
        return await _error_page(request, 400, "a field of the form or the address is wrong")

    async def page_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, PageError)
        return await _error_page(request, exc.status, str(exc))

    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(PageError, page_error)

    @app.get("/", include_in_schema=False)
    def root() -> Response:
        return RedirectResponse(f"{PREFIX}/", status_code=303)
