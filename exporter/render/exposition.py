"""Prometheus text (0.0.4) and OpenMetrics (1.0.0) rendering of metric families.

Rendering happens once per collection, never on the scrape path; a scrape only picks one of the
byte strings prepared here. We render ourselves rather than through prometheus_client because
the DCGM-compatible counters keep dcgm-exporter's names, which lack the ``_total`` suffix:
prometheus_client would announce them as ``NAME_total`` in the text format. In OpenMetrics,
where a counter's samples must end in ``_total``, such a counter is typed ``unknown`` so its
series name is unchanged — the point of those series is that existing dashboards keep working.
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["gauge", "counter", "histogram", "untyped"]

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def escape_label_value(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def label_pairs(labels: Iterable[tuple[str, str]]) -> str:
    """``a="x",b="y"`` with values escaped; names are ours and already valid."""
    return ",".join(f'{name}="{escape_label_value(value)}"' for name, value in labels)


def format_value(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isfinite(value):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    if math.isnan(value):
        return "NaN"
    return "+Inf" if value > 0 else "-Inf"


@dataclass(slots=True)
class Family:
    """One metric family: its text-format name, type, help and its sample lines.

    ``lines`` are complete sample lines (name, labels, value), identical in both formats.
    """

    name: str
    kind: Kind
    help: str
    lines: list[str] = field(default_factory=list)

    def add(self, labels: str, value: float, suffix: str = "") -> None:
        if labels:
            self.lines.append(f"{self.name}{suffix}{{{labels}}} {format_value(value)}\n")
        else:
            self.lines.append(f"{self.name}{suffix} {format_value(value)}\n")


def _text_header(f: Family) -> str:
    kind = "untyped" if f.kind == "untyped" else f.kind
    doc = f.help.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {f.name} {doc}\n# TYPE {f.name} {kind}\n"


def _openmetrics_header(f: Family) -> str:
    name, kind = f.name, f.kind
    if kind == "counter":
        if name.endswith("_total"):
            name = name[: -len("_total")]
        else:  # a DCGM counter without _total: keep the series name, type it unknown
            kind = "untyped"
    om_kind = "unknown" if kind == "untyped" else kind
    doc = f.help.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return f"# HELP {name} {doc}\n# TYPE {name} {om_kind}\n"


def _render(families: Iterable[Family], header: Callable[[Family], str], end: str = "") -> bytes:
    parts: list[str] = []
    for f in families:
        if f.lines:
            parts.append(header(f))
            parts.extend(f.lines)
    parts.append(end)
    return "".join(parts).encode("utf-8", errors="replace")


def render_text(families: Iterable[Family]) -> bytes:
    return _render(families, _text_header)


def render_openmetrics(families: Iterable[Family]) -> bytes:
    return _render(families, _openmetrics_header, "# EOF\n")


def from_client_metric(metric: Any) -> Family:
    """A prometheus_client ``Metric`` (e.g. from ProcessCollector) as a :class:`Family`."""
    kind: Kind = metric.type if metric.type in {"gauge", "counter", "histogram"} else "untyped"
    name = metric.name + "_total" if kind == "counter" else metric.name
    family = Family(name, kind, metric.documentation)
    for sample in metric.samples:
        if sample.name.endswith("_created"):
            continue
        suffix = sample.name[len(metric.name) :]
        if kind == "counter":
            suffix = ""
        family.add(label_pairs(_sorted_items(sample.labels)), sample.value, suffix)
    return family


def _sorted_items(labels: Mapping[str, str]) -> list[tuple[str, str]]:
    return sorted(labels.items())


# The four forms a scrape can ask for.
Variant = Literal["text", "text+gzip", "openmetrics", "openmetrics+gzip"]


class Exposition:
    """The rendered output of one collection; immutable once published, except that a form
    nobody had asked for before is rendered (once) on first request."""

    __slots__ = ("_bodies", "_families")

    def __init__(self, families: list[Family], variants: Iterable[Variant] = ("text",)) -> None:
        self._families = families
        self._bodies: dict[Variant, bytes] = {}
        for v in variants:
            self.body(v)

    def body(self, variant: Variant) -> bytes:
        body = self._bodies.get(variant)
        if body is None:
            if variant == "text":
                body = render_text(self._families)
            elif variant == "openmetrics":
                body = render_openmetrics(self._families)
            else:
                plain: Variant = "text" if variant == "text+gzip" else "openmetrics"
                body = gzip.compress(self.body(plain), compresslevel=1, mtime=0)
            self._bodies[variant] = body
        return body
