"""The HTTP server under the API: uvicorn with time-outs on a request's headers, on a client
that stops reading an answer, and on shutdown. :func:`config` builds it for ``serve`` and for
the demo alike; :func:`options` gives the same settings to ``serve --workers N``.

- **Headers** (slowloris): uvicorn times out an idle keep-alive connection but not a client
  that sends its headers a byte at a time: each such connection would be held for ever. Here a
  connection that has not finished a request's headers within ``header_timeout_seconds`` of
  connecting, or of starting that request, is closed; and a request line and headers longer
  than ``MAX_HEADER_BYTES`` together are a 400 (httptools itself sets no limit).
- **A client that stops reading** (a stalled download): when the answer's bytes wait in the
  connection's buffer, the socket refusing more (asyncio pauses writing), for
  ``send_timeout_seconds``, the connection is aborted (reset, its buffer dropped): the
  answer's task ends, and with it whatever the answer held (an export's spool file and slot,
  costsvc/api/exports.py). A client that reads, however slowly, resumes writing and keeps it.
- **Shutdown** (SIGTERM, SIGINT): answers in progress get ``shutdown_timeout_seconds`` to
  finish; then their connections are aborted and their tasks cancelled, so a stalled client
  never holds the process.

The body's own time-out and size limit are in costsvc/api/limits.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from costsvc.kit.settings import Settings

MAX_HEADER_BYTES = 64 * 1024
PROTOCOL = "costsvc.api.server:HeaderTimeoutProtocol"  # by name, for worker processes
log = logging.getLogger("gpu-costsvc")


class HeadersTooLarge(Exception):
    pass


def _env_seconds(name: str, default: float) -> float:
    """A time-out of the worker processes of ``serve --workers N`` (they import the protocol
    class by name): the ``COSTSVC_*`` variable, already validated by ``Settings``."""
    return float(os.environ.get(name, default))


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing connections whose headers are late and aborting
    those whose client stops reading. The time-outs are the class's (:func:`protocol_for`),
    or the ``COSTSVC_*`` variables for the worker processes of ``serve --workers N``."""

    header_timeout = _env_seconds("COSTSVC_HEADER_TIMEOUT_SECONDS", 10)
    send_timeout = _env_seconds("COSTSVC_SEND_TIMEOUT_SECONDS", 10)
    shutdown_timeout = _env_seconds("COSTSVC_SHUTDOWN_TIMEOUT_SECONDS", 3)
    _header_timer: asyncio.TimerHandle | None = None
    _stall_timer: asyncio.TimerHandle | None = None
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

    def pause_writing(self) -> None:
        """The client reads nothing more for now: it has ``send_timeout`` to start again."""
        super().pause_writing()
        if self._stall_timer is None:
            self._stall_timer = self.loop.call_later(self.send_timeout, self._stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._calm()

    def shutdown(self) -> None:
        """The server stops: an answer in progress has ``shutdown_timeout`` to finish."""
        super().shutdown()
        self.loop.call_later(self.shutdown_timeout, self._abort)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._calm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _calm(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _late(self) -> None:
        self._header_timer = None
        self.transport.close()

    def _stalled(self) -> None:
        self._stall_timer = None
        log.info("a client read nothing for %g s: connection aborted", self.send_timeout)
        self._abort()

    def _abort(self) -> None:
        """Drop the connection and its unsent bytes (``close()`` would wait for them to be
        read); uvicorn then tells the answer's task the client is gone."""
        self.transport.abort()


def protocol_for(settings: Settings) -> type[HeaderTimeoutProtocol]:
    """The protocol class with the time-outs of ``settings``."""
    return type(
        "HeaderTimeout",
        (HeaderTimeoutProtocol,),
        {
            "header_timeout": settings.header_timeout_seconds,
            "send_timeout": settings.send_timeout_seconds,
            "shutdown_timeout": settings.shutdown_timeout_seconds,
        },
    )


def options(settings: Settings, by_name: bool = False) -> dict[str, Any]:
    """uvicorn's settings for the API: the protocol with its time-outs (``by_name``: the class
    by import path, for worker processes, whose time-outs come from the same ``COSTSVC_*``
    variables), the graceful-shutdown time-out, and no access log."""
    return {
        "http": PROTOCOL if by_name else protocol_for(settings),
        "access_log": False,
        "timeout_graceful_shutdown": settings.shutdown_timeout_seconds,
    }


def config(app: Any, settings: Settings, host: str, port: int, **kwargs: Any) -> uvicorn.Config:
    """uvicorn's configuration for the API (``serve``, the demo and the tests' servers)."""
    kwargs.setdefault("log_level", "info")
    return uvicorn.Config(app, host=host, port=port, **options(settings), **kwargs)
