"""Downloads that never hold the database while a client reads (docs/security.md, "Limits").

An export is answered in two steps:

1. **spool** (costsvc/reports/monthly.py :func:`~costsvc.reports.monthly.spool`): the whole report
   read in one short transaction into a temporary file (``COSTSVC_EXPORT_MEMORY_BYTES`` in memory,
   then disk; refused past ``COSTSVC_EXPORT_MAX_BYTES`` with 507, as is a full disk); the
   database connection is back in its pool before a byte is sent;
2. **send** (:class:`SpooledResponse`): the file, with its ``Content-Length``, to the client.
   A client that goes away ends it at once; one that stops reading is disconnected after
   ``COSTSVC_SEND_TIMEOUT_SECONDS`` (costsvc/api/server.py). Either way the file is closed
   and the export's slot given back.

A slot is held from the spool to the last byte: at most ``COSTSVC_EXPORTS_PER_TOKEN`` exports
per token and ``COSTSVC_EXPORTS_MAX`` in all at once, per process; one more is a 429 with
``Retry-After``. Memory is thereby bounded by ``EXPORTS_MAX x EXPORT_MEMORY_BYTES`` and the
spools' disk by ``EXPORTS_MAX x EXPORT_MAX_BYTES``.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import IO

import anyio
from fastapi import HTTPException, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from costsvc.kit.settings import Settings
from costsvc.reports.monthly import ExportTooLarge, spool

RETRY_AFTER = 5  # seconds: an export is spooled in seconds and most are read in a few more
CHUNK = 64 * 1024  # bytes per read of the spool and per write to the client
FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class ExportSlots:
    """How many exports each token, and all tokens together, have in progress."""

    def __init__(self, per_token: int, total: int) -> None:
        self.per_token, self.total = per_token, total
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}

    def take(self, holder: str) -> Callable[[], None]:
        """A slot for ``holder`` (its release, which may be called more than once), or 429."""
        with self._lock:
            mine = self._held.get(holder, 0)
            if mine >= self.per_token:
                why = f"at most {self.per_token} exports per token at once"
            elif sum(self._held.values()) >= self.total:
                why = f"at most {self.total} exports at once"
            else:
                self._held[holder] = mine + 1
                why = ""
        if why:
            headers = {"Retry-After": str(RETRY_AFTER)}
            raise HTTPException(429, f"{why}: try again shortly", headers=headers)
        released = False

        def release() -> None:
            nonlocal released
            with self._lock:
                if released:
                    return
                released = True
                left = self._held[holder] - 1
                if left:
                    self._held[holder] = left
                else:
                    del self._held[holder]

        return release

    def in_progress(self) -> int:
        with self._lock:
            return sum(self._held.values())


def export(
    request: Request,
    holder: str,
    pieces: Iterator[str],
    media_type: str,
    headers: Mapping[str, str],
) -> SpooledResponse:
    """``pieces`` spooled under one of ``holder``'s slots, as a response that gives the slot
    back when it ends. A ``ValueError`` of the report (a bad parameter) is a 400."""
    settings: Settings = request.app.state.settings
    slots: ExportSlots = request.app.state.exports
    release = slots.take(holder)
    try:
        body = spool(pieces, settings.export_memory_bytes, settings.export_max_bytes)
    except ExportTooLarge as exc:
        release()
        raise HTTPException(507, f"{exc} (COSTSVC_EXPORT_MAX_BYTES): ask for less") from None
    except OSError as exc:
        release()
        if exc.errno in FULL:
            raise HTTPException(
                507, "no space left on the disk of the export spool (TMPDIR): try again later"
            ) from None
        raise
    except ValueError as exc:
        release()
        raise HTTPException(400, str(exc)) from None
    except BaseException:
        release()
        raise
    return SpooledResponse(body, release, media_type, headers)


class SpooledResponse(Response):
    """A spooled file sent in pieces; the file is closed and ``release`` called however the
    sending ends (done, the client gone, the connection aborted, the server stopping)."""

    def __init__(
        self,
        body: IO[bytes],
        release: Callable[[], None],
        media_type: str,
        headers: Mapping[str, str],
        status_code: int = 200,  # FastAPI's OpenAPI reads the default status from here
    ) -> None:
        self.file, self.release = body, release
        self.status_code = status_code
        self.media_type = media_type
        self.background = None
        body.seek(0, 2)
        size = body.tell()
        body.seek(0)
        self.init_headers({**headers, "Content-Length": str(size)})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:

                async def gone() -> None:  # uvicorn says so when the connection is lost
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    group.cancel_scope.cancel()

                group.start_soon(gone)
                await self._send(send)
                group.cancel_scope.cancel()
        finally:
            self.file.close()
            self.release()

    async def _send(self, send: Send) -> None:
        start = {
            "type": "http.response.start",
            "status": self.status_code,
            "headers": self.raw_headers,
        }
        await send(start)
        while chunk := await anyio.to_thread.run_sync(self.file.read, CHUNK):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
