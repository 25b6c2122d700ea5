"""One bounded read of the configured Prometheus-compatible query API for a page, with the
headers (bearer token included) and parameters the ingest sends: one short timeout and
deadline, the answer read as a stream and dropped past :data:`MAX_BYTES`. Every failure (no
URL, an unreadable token file, unreachable, too slow, an HTTP error, too big, not the API's
JSON) is raised as :class:`Unreadable` with a one-line reason, for the page to show; nothing
else is raised. Used by costsvc/fleet/alerts.py and costsvc/fleet/xids.py. No SQL."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import httpx

from costsvc.kit.quoting import cut
from costsvc.kit.settings import Settings

TIMEOUT_S = 2.0  # seconds for the connection, each read, and the whole answer
MAX_BYTES = 2**20  # an answer past this is dropped, unread


class Unreadable(Exception):
    """Why the query API could not be read, or why its answer is not what was asked (one
    line)."""


def source(url: str) -> str:
    """``url``'s scheme, host, port and path: never its user info or query."""
    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return cut(url)
    port = f":{u.port}" if u.port else ""
    return cut(f"{u.scheme}://{u.host}{port}{u.path.rstrip('/')}", 200)


def text(value: Any, limit: int | None = None) -> str:
    """A label or annotation value, cut (:class:`Unreadable` when it is not a string)."""
    if not isinstance(value, str):
        raise Unreadable("a label or annotation that is not a string")
    return cut(value, limit) if limit else cut(value)


def _body(client: httpx.Client, url: str, params: Mapping[str, str]) -> bytes:
    """The answer's body, read as a stream: :class:`Unreadable` for an HTTP error, an answer
    past :data:`MAX_BYTES` or past the deadline."""
    deadline = time.monotonic() + TIMEOUT_S
    with client.stream("GET", url, params=dict(params)) as resp:
        if resp.status_code != 200:
            raise Unreadable(f"it answered HTTP {resp.status_code}")
        chunks, size = [], 0
        for chunk in resp.iter_bytes():
            size += len(chunk)
            if size > MAX_BYTES:
                raise Unreadable(f"its answer is over {MAX_BYTES // 2**20} MiB")
            if time.monotonic() > deadline:
                raise Unreadable(f"its answer took over {TIMEOUT_S:g} s")
            chunks.append(chunk)
    return b"".join(chunks)


def read(settings: Settings, path: str, params: Mapping[str, str] | None = None) -> Any:
    """The ``data`` of the answer to ``GET <COSTSVC_PROMETHEUS_URL><path>`` with ``params``
    (after the configured ones), once its ``status`` is ``success``; :class:`Unreadable` with
    the reason otherwise. The form:
    https://prometheus.io/docs/prometheus/latest/querying/api/#format-overview."""
    url = settings.prometheus_url.strip()
    if not url:
        raise Unreadable("no Prometheus query API is configured (COSTSVC_PROMETHEUS_URL)")
    try:
        headers = settings.prometheus_request_headers()
    except (OSError, ValueError) as exc:
        raise Unreadable(f"COSTSVC_PROMETHEUS_BEARER_TOKEN_FILE: {cut(str(exc), 200)}") from None
    sent = {**settings.prometheus_params, **(params or {})}
    try:
        with httpx.Client(headers=headers, timeout=TIMEOUT_S) as client:
            body = _body(client, url.rstrip("/") + path, sent)
    except httpx.TimeoutException:
        raise Unreadable(f"it did not answer within {TIMEOUT_S:g} s") from None
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, OSError, ValueError) as exc:
        raise Unreadable(f"it could not be reached ({type(exc).__name__})") from None
    try:
        answer = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise Unreadable("it answered something that is not JSON") from None
    if not isinstance(answer, dict) or answer.get("status") != "success":
        status = answer.get("status") if isinstance(answer, dict) else None
        raise Unreadable(f"it answered status {text(status) if status else 'none'}")
    return answer.get("data")
