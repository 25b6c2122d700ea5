"""The alerts active now (firing or pending) in the configured Prometheus-compatible query API,
read from its ``GET /api/v1/alerts`` with the headers and parameters the ingest sends
(costsvc/fleet/query_api.py: one short timeout and deadline, the answer dropped past its size
cap). Bounded: at most :data:`MAX_ALERTS` alerts kept, every label and annotation cut. Any
failure (no URL, unreachable, an HTTP error, an answer that is not the alerts JSON) is returned
as a one-line reason, never raised. No SQL."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from costsvc.fleet.query_api import Unreadable, read, source, text
from costsvc.kit.settings import Settings
from costsvc.kit.times import parse_utc

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


class NotAlerts(Unreadable):
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
        name=text(labels.get("alertname", "")),
        state=state,
        severity=text(labels.get("severity", "")),
        where=tuple((k, text(labels[k])) for k in WHERE if k in labels),
        since=since,
        summary=text(notes.get("summary", ""), SUMMARY_CHARS),
    )


def parse(data: Any) -> tuple[list[Alert], int]:
    """The alerts of a ``/api/v1/alerts`` answer's ``data``, firing first, then by severity,
    name and since when, at most :data:`MAX_ALERTS`, and how many there were;
    :class:`NotAlerts` when it is not that JSON.

    The form: https://prometheus.io/docs/prometheus/latest/querying/api/#alerts —
    ``{"status": "success", "data": {"alerts": [{"labels": {…}, "annotations": {…},
    "state": "firing", "activeAt": "…", "value": "…"}]}}``."""
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


def active_alerts(settings: Settings) -> Alerts:
    """The alerts active now in the query API of ``settings``, or why they could not be
    read."""
    out = Alerts(source=source(settings.prometheus_url.strip()))
    try:
        out.alerts, out.total = parse(read(settings, "/api/v1/alerts"))
    except Unreadable as exc:
        out.trouble = str(exc)
    return out
