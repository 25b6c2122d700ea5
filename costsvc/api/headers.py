"""The security headers of every answer, in one place: an ASGI middleware outside every other
one (the request limits' refusals, Starlette's redirects and its 500 included), so a route or
an error added later is covered without more code (docs/security.md, docs/pages.md).

- every answer: ``X-Content-Type-Options: nosniff``;
- every answer but static files (``/ui/static``, the API docs' assets): ``Cache-Control:
  no-store`` — answers hold money, tenants' names or a session's pages;
- the pages and their errors (``/ui``, not its static files): :data:`PAGE_HEADERS` — a
  Content-Security-Policy that allows nothing from another origin, no framing, no referrer
  to another site;
- a redirect's ``Location`` is relative (its path and query): never built from the request's
  ``Host`` header, and never ``//…`` (which a browser would read as another host).

A header an answer already carries is kept (a download's own ``Cache-Control``)."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

PAGES = "/ui"
STATIC = ("/ui/static/", "/docs-assets/")
CSP = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
EVERY = {"X-Content-Type-Options": "nosniff"}
NOT_STORED = {"Cache-Control": "no-store"}
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    **EVERY,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    **NOT_STORED,
}


def headers_for(path: str) -> dict[str, str]:
    """The security headers an answer to ``path`` carries."""
    if path.startswith(STATIC):
        return EVERY
    if path == PAGES or path.startswith(PAGES + "/"):
        return PAGE_HEADERS
    return {**EVERY, **NOT_STORED}


def relative(location: str) -> str:
    """``location`` without scheme and host; a leading ``//`` (another host, to a browser)
    made one ``/``."""
    parts = urlsplit(location)
    path = "/" + parts.path.lstrip("/")
    query = f"?{parts.query}" if parts.query else ""
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    return path + query + fragment


def secured(raw: list[tuple[bytes, bytes]], path: str) -> list[tuple[bytes, bytes]]:
    """``raw`` (an answer's headers) with the security headers of ``path`` it lacks, and its
    ``Location`` made relative."""
    kept = [
        (name, relative(value.decode("latin-1")).encode("latin-1"))
        if name.lower() == b"location"
        else (name, value)
        for name, value in raw
    ]
    present = {name.lower() for name, _ in kept}
    for name, value in headers_for(path).items():
        key = name.lower().encode("latin-1")
        if key not in present:
            kept.append((key, value.encode("latin-1")))
    return kept


class SecurityHeaders:
    """Adds :func:`headers_for` to every HTTP answer and makes ``Location`` relative."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": secured(list(message.get("headers", [])), path)}
            await send(message)

        await self.app(scope, receive, send_secured)
