"""The alerts active now (firing or pending) in the configured Prometheus-compatible query API,
read from its ``GET /api/v1/alerts`` with the headers and parameters the ingest sends. Bounded:
one short timeout and deadline, the answer read as a stream and dropped past
:data:`MAX_BYTES`, at most :data:`MAX_ALERTS` alerts kept, every label and annotation cut. Any
failure (no URL, unreachable, an HTTP error, an answer that is not the alerts JSON) is returned
as a one-line reason, never raised. No SQL."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from costsvc.kit.quoting import cut
from costsvc.kit.settings import Settings
from costsvc.kit.times import parse_utc

TIMEOUT_S = 2.0  # seconds for the connection, each read, and the whole answer
MAX_BYTES = 2**20  # an answer past this is dropped, unread
MAX_ALERTS = 200  # alerts shown at most (firing first, then by severity)
SUMMARY_CHARS = 200  # a summary annotation is cut to this; label values to quoting.SHOWN
# the labels that say where an alert is, in the order shown
WHERE = (
    "cluster",
    "node",
    "Hostname",
    "instance",
    "gpu",
    "UUID",
    "GPU_I_ID",
    "GPU_I_PROFILE",
    "namespace",
    "pod",
    "container",
    "team",
    "project",
    "job",
)
SEVERITY_ORDER = {"critical": 0, "error": 1, "warning": 2, "info": 3}


class NotAlerts(Exception):
    """Why an answer is not Prometheus' alerts JSON (one line)."""


@dataclass(frozen=True)
class Alert:
    name: str
    state: str  # "firing" or "pending"
    severity: str
    where: tuple[tuple[str, str], ...]  # (label, value) of WHERE present
    since: datetime | None  # activeAt
    summary: str


@dataclass
class Alerts:
    """The alerts read (at most :data:`MAX_ALERTS` of ``total``), or ``trouble``: why none
    could be read."""

    source: str  # the API read, without credentials or parameters
    alerts: list[Alert] = field(default_factory=list)
    total: int = 0
    trouble: str | None = None

    @property
    def firing(self) -> int:
        return sum(a.state == "firing" for a in self.alerts)


def _source(url: str) -> str:
    """``url``'s scheme, host, port and path: never its user info or query."""
    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return cut(url)
    port = f":{u.port}" if u.port else ""
    return cut(f"{u.scheme}://{u.host}{port}{u.path.rstrip('/')}", 200)


def _text(value: Any, limit: int | None = None) -> str:
    if not isinstance(value, str):
        raise NotAlerts("a label or annotation that is not a string")
    return cut(value, limit) if limit else cut(value)


def _alert(raw: Any) -> Alert | None:
    """One entry of ``data.alerts`` (None for a state other than firing or pending)."""
    if not isinstance(raw, dict):
        raise NotAlerts("an alert that is not an object")
    labels, notes = raw.get("labels"), raw.get("annotations") or {}
    if not isinstance(labels, dict) or not isinstance(notes, dict):
        raise NotAlerts("an alert without labels")
    state = raw.get("state")
    if state not in ("firing", "pending"):
        return None
    since = None
    if isinstance(raw.get("activeAt"), str):
        try:
            since = parse_utc(raw["activeAt"])
        except ValueError:
            since = None
    return Alert(
        name=_text(labels.get("alertname", "")),
        state=state,
        severity=_text(labels.get("severity", "")),
        where=tuple((k, _text(labels[k])) for k in WHERE if k in labels),
        since=since,
        summary=_text(notes.get("summary", ""), SUMMARY_CHARS),
    )


def parse(body: bytes) -> tuple[list[Alert], int]:
    """The alerts of a ``/api/v1/alerts`` answer, firing first, then by severity, name and
    since when, at most :data:`MAX_ALERTS`, and how many there were; :class:`NotAlerts` when
    ``body`` is not that JSON.

    The form: https://prometheus.io/docs/prometheus/latest/querying/api/#alerts —
    ``{"status": "success", "data": {"alerts": [{"labels": {…}, "annotations": {…},
    "state": "firing", "activeAt": "…", "value": "…"}]}}``."""
    try:
        answer = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise NotAlerts("it answered something that is not JSON") from None
    if not isinstance(answer, dict) or answer.get("status") != "success":
        status = answer.get("status") if isinstance(answer, dict) else None
        raise NotAlerts(f"it answered status {_text(status) if status else 'none'}")
    data = answer.get("data")
    raw = data.get("alerts") if isinstance(data, dict) else None
    if not isinstance(raw, list):
        raise NotAlerts("its answer holds no list of alerts")
    alerts = [a for a in map(_alert, raw) if a is not None]
    alerts.sort(
        key=lambda a: (
            a.state != "firing",
            SEVERITY_ORDER.get(a.severity, len(SEVERITY_ORDER)),
            a.name,
            a.since.timestamp() if a.since else 0.0,
        )
    )
    return alerts[:MAX_ALERTS], len(alerts)


def _body(client: httpx.Client, url: str, params: dict[str, str]) -> bytes:
    """The answer's body, read as a stream: :class:`NotAlerts` for an HTTP error, an answer
    past :data:`MAX_BYTES` or past the deadline."""
    deadline = time.monotonic() + TIMEOUT_S
    with client.stream("GET", url, params=params) as resp:
        if resp.status_code != 200:
            raise NotAlerts(f"it answered HTTP {resp.status_code}")
        chunks, size = [], 0
        for chunk in resp.iter_bytes():
            size += len(chunk)
            if size > MAX_BYTES:
                raise NotAlerts(f"its answer is over {MAX_BYTES // 2**20} MiB")
            if time.monotonic() > deadline:
                raise NotAlerts(f"its answer took over {TIMEOUT_S:g} s")
            chunks.append(chunk)
    return b"".join(chunks)


def active_alerts(settings: Settings) -> Alerts:
    """The alerts active now in the query API of ``settings``, or why they could not be
    read."""
    url = settings.prometheus_url.strip()
    out = Alerts(source=_source(url))
    if not url:
        out.trouble = "no Prometheus query API is configured (COSTSVC_PROMETHEUS_URL)"
        return out
    try:
        headers = settings.prometheus_request_headers()
    except (OSError, ValueError) as exc:
        out.trouble = f"COSTSVC_PROMETHEUS_BEARER_TOKEN_FILE: {cut(str(exc), 200)}"
        return out
    try:
        with httpx.Client(headers=headers, timeout=TIMEOUT_S) as client:
            body = _body(client, url.rstrip("/") + "/api/v1/alerts", settings.prometheus_params)
        out.alerts, out.total = parse(body)
    except NotAlerts as exc:
        out.trouble = str(exc)
    except httpx.TimeoutException:
        out.trouble = f"it did not answer within {TIMEOUT_S:g} s"
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, OSError, ValueError) as exc:
        out.trouble = f"it could not be reached ({type(exc).__name__})"
    return out
