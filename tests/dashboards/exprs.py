"""The dashboards' PromQL, ready to run: Grafana variables replaced by values Prometheus accepts.

`all_expressions()` is what an end-to-end test evaluates against a real Prometheus.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DASHBOARDS_DIR = Path(__file__).resolve().parents[2] / "dashboards"
DASHBOARD_FILES = (
    "gpu-fleet.json",
    "gpu-mig.json",
    "gpu-workloads.json",
    "gpu-finops.json",
    "gpu-rightsizing.json",
)

# Grafana's global variables: durations a test Prometheus (scraping every second or so) can fill.
BUILTINS = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
    "__range_s": "3600",
    "__interval_ms": "15000",
}
# Dashboard variables are only ever used as `label=~"$var"`; "All" is the regex `.*`.
DEFAULT_VALUE = ".*"

_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DASHBOARDS_DIR / name).read_text(encoding="utf-8"))
    return data


def dashboards() -> dict[str, dict[str, Any]]:
    return {name: load(name) for name in DASHBOARD_FILES}


def iter_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, rows and the panels nested in (collapsed) rows included."""
    for panel in panels:
        yield panel
        yield from iter_panels(panel.get("panels", []))


def variables_used(expr: str) -> set[str]:
    return {a or b or c for a, b, c in _VAR.findall(expr)}


def substitute(expr: str, values: dict[str, str] | None = None) -> str:
    """Replace `$var`, `${var}`, `${var:fmt}` and `[[var]]` by test values."""
    table = {**BUILTINS, **(values or {})}

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        return table.get(name, DEFAULT_VALUE)

    return _VAR.sub(value, expr)


def all_expressions(values: dict[str, str] | None = None) -> list[tuple[str, str, str]]:
    """(dashboard file, panel title, expression with variables substituted) for every target."""
    out = []
    for name, dashboard in dashboards().items():
        for panel in iter_panels(dashboard["panels"]):
            for t in panel.get("targets", []):
                out.append((name, panel["title"], substitute(t["expr"], values)))
    return out
