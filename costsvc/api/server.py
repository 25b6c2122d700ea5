"""The HTTP server under the API: uvicorn with a time-out on the request line and headers.

uvicorn times out an idle keep-alive connection but not a client that sends its headers a
byte at a time (slowloris): each such connection would be held for ever. Here a connection
that has not finished a request's headers within ``header_timeout_seconds`` of connecting,
or of starting that request, is closed; and a request line and headers longer than
``MAX_HEADER_BYTES`` together are a 400 (httptools itself sets no limit). The body's own
time-out and size limit are in costsvc/api/limits.py.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from costsvc.settings import Settings

MAX_HEADER_BYTES = 64 * 1024


class HeadersTooLarge(Exception):
    pass


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing connections whose headers are late. The
    time-out is the class's (``timeout_for``), or ``COSTSVC_HEADER_TIMEOUT_SECONDS`` for the
    worker processes of ``serve --workers N``, which import this class by name."""

    header_timeout = float(os.environ.get("COSTSVC_HEADER_TIMEOUT_SECONDS", "10"))
    _header_timer: asyncio.TimerHandle | None = None
    _header_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = 0
        self._arm()

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def _count(self, n: int) -> None:
        """Raised in a parser callback, this ends as uvicorn's 400 and a closed connection."""
        self._header_bytes += n
        if self._header_bytes > MAX_HEADER_BYTES:
            raise HeadersTooLarge

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _late(self) -> None:
        self._header_timer = None
        self.transport.close()


def timeout_for(seconds: float) -> type[HeaderTimeoutProtocol]:
    """The protocol class with its header time-out set to ``seconds``."""
    return type("HeaderTimeout", (HeaderTimeoutProtocol,), {"header_timeout": seconds})


def config(app: Any, settings: Settings, host: str, port: int, **kwargs: Any) -> uvicorn.Config:
    """uvicorn's configuration for the API: the header time-out, and no access log."""
    kwargs.setdefault("log_level", "info")
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=timeout_for(settings.header_timeout_seconds),
        access_log=False,
        **kwargs,
    )
