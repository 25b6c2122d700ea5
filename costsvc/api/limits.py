"""What every request must respect before a route sees it (docs/security.md, "Limits").

One ASGI middleware, so every route — today's and those added later — inherits it:

- the path at most 2 KiB and the query string at most 8 KiB (414);
- no control character (NUL, CR, LF, …) and nothing but UTF-8 in the path or in any query
  value (400) — PostgreSQL refuses NUL in text, and a CR/LF must never reach a header;
- a body larger than ``max_body_bytes`` is refused with 413 *before* it is read (its
  ``Content-Length``; a chunked body is counted as it arrives and refused at the limit);
- the whole body must arrive within ``body_timeout_seconds`` (408) — a slow client cannot
  hold a worker; the request line and headers have their own time-out in
  costsvc/api/server.py;
- a JSON body whose text holds a NUL or an unpaired surrogate (``"\\u0000"``, ``"\\ud800"``),
  or that nests deeper than the JSON decoder can follow, is refused with 400.

Answers are short and never echo the input: JSON ``{"detail": …}`` under ``/v1`` (the
API's error form), plain text elsewhere (``/allocation`` answers its 400s as OpenCost does,
with Go's ``http.Error`` text; ``/metrics`` is read by Prometheus).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_PATH = 2048
MAX_QUERY = 8192
_CONTROL = re.compile(rb"[\x00-\x1f\x7f]")


class _TooLarge(Exception):
    pass


class _Gone(Exception):
    pass


def url_problem(scope: Scope) -> tuple[int, str] | None:
    """(status, why) when the path or query string breaks a rule, else None."""
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8", "surrogateescape")
    query: bytes = scope.get("query_string", b"")
    if len(raw_path) > MAX_PATH:
        return 414, f"the path is longer than {MAX_PATH} bytes"
    if len(query) > MAX_QUERY:
        return 414, f"the query string is longer than {MAX_QUERY} bytes"
    for what, raw in (("path", raw_path), ("query", query.replace(b"+", b" "))):
        decoded = unquote_to_bytes(raw)
        if _CONTROL.search(decoded):
            return 400, f"the {what} holds a control character (NUL, CR, LF, …)"
        try:
            decoded.decode("utf-8")
        except UnicodeDecodeError:
            return 400, f"the {what} is not UTF-8"
    return None


def bad_text(value: Any) -> bool:
    """Whether any string of a decoded JSON document (keys included) holds a NUL or an
    unpaired surrogate — text no database column can take."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str):
            if "\x00" in v:
                return True
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return True
    return False


async def refuse(scope: Scope, send: Send, status: int, detail: str) -> None:
    if scope["path"].startswith("/v1/"):
        body, kind = json.dumps({"detail": detail}).encode(), b"application/json"
    else:
        body, kind = f"{detail}\n".encode(), b"text/plain; charset=utf-8"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", kind),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),  # the unread rest of a body is not worth reading
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class Limits:
    def __init__(self, app: ASGIApp, max_body_bytes: int, body_timeout_seconds: float) -> None:
        self.app = app
        self.max_body = max_body_bytes
        self.body_timeout = body_timeout_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problem = url_problem(scope)
        if problem is not None:
            await refuse(scope, send, *problem)
            return
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name, value)
        length = headers.get(b"content-length")
        if length is None and b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)  # no body
            return
        if length is not None:
            if not length.isdigit() or len(length) > 18:
                await refuse(scope, send, 400, "Content-Length is not a number")
                return
            if int(length) > self.max_body:
                await refuse(scope, send, 413, f"the body is larger than {self.max_body} bytes")
                return
        try:
            body = await asyncio.wait_for(self._read(receive), self.body_timeout)
        except TimeoutError:
            late = f"the body did not arrive within {self.body_timeout:g} s"
            await refuse(scope, send, 408, late)
            return
        except _TooLarge:
            await refuse(scope, send, 413, f"the body is larger than {self.max_body} bytes")
            return
        except _Gone:
            return
        if body and b"json" in headers.get(b"content-type", b""):
            try:
                document = json.loads(body)
            except RecursionError:
                await refuse(scope, send, 400, "the JSON body nests too deeply")
                return
            except ValueError:
                document = None  # the route answers 422, naming the decoding error
            if bad_text(document):
                bad = "text in the body holds a NUL or an unpaired surrogate"
                await refuse(scope, send, 400, bad)
                return
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Gone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # a disconnect, as the server tells it

    return replay
