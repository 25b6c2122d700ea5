"""Charts drawn on the server as SVG geometry (pure): stacked columns (a series per owner
over days) and stacked bars (hours per GPU model). The templates turn a :class:`Chart` into
``<svg>`` (templates/_chart.html): no script, no outside asset, and the numbers behind every
chart are in a table beside it.

Values are integers (micro-units, micro-seconds), ``unit`` what the ticks count in (a
currency unit: 1_000_000; an hour: 3_600_000_000); only the drawing is in floats."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

SERIES = 8  # colours (pages.css .s0 ... .s7); the smaller series beyond are one "other" (.s8)
OTHER = SERIES


@dataclass(frozen=True, slots=True)
class Rect:
    x: float
    y: float
    w: float
    h: float
    series: int  # the colour class
    label: str  # the tooltip: category, series and value


@dataclass(frozen=True, slots=True)
class Tick:
    at: float  # y of a value tick (columns), x of a value tick (bars)
    text: str


@dataclass(frozen=True, slots=True)
class Label:
    at: float  # the middle of a category's column (x) or bar (y)
    text: str


@dataclass(slots=True)
class Chart:
    title: str
    width: int
    height: int
    left: float  # the plot area
    top: float
    right: float
    bottom: float
    rects: list[Rect] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)
    legend: list[tuple[int, str]] = field(default_factory=list)
    horizontal: bool = False
    axis: str = ""  # what the value axis is in (a currency), written at its end


def nice_step(top: int, unit: int = 1, steps: int = 4) -> int:
    """A round step — 1, 2 or 5 x a power of ten of ``unit`` (what the ticks are written
    in: 1_000_000 for money in micro-units, an hour in micro-seconds) — so that ``steps`` of
    it cover ``top``; never less than a millionth of ``unit``, never 0."""
    if top <= 0:
        return unit
    raw = Decimal(top) / unit / steps
    power = Decimal(10) ** raw.adjusted()
    for m in (1, 2, 5, 10):
        if m * power >= raw:
            return max(int(m * power * unit), unit // 1_000_000, 1)
    return int(10 * power * unit)  # pragma: no cover - the loop always returns


def _scale(totals: list[int], unit: int) -> tuple[int, int]:
    """(step, top): the axis' round step and its end, the smallest multiple of the step that
    holds the largest total."""
    biggest = max(totals, default=0)
    step = nice_step(biggest, unit)
    return step, step * max(1, -(-biggest // step))


def _series(
    series: Sequence[tuple[str, Sequence[int]]],
) -> tuple[list[tuple[int, str, list[int]]], list[tuple[int, str]]]:
    """The largest :data:`SERIES` series by total, each with its colour; the rest summed as
    "other"; and the legend."""
    ranked = sorted(series, key=lambda s: (-sum(s[1]), s[0]))
    kept = [(i, name, list(values)) for i, (name, values) in enumerate(ranked[:SERIES])]
    rest = ranked[SERIES:]
    if rest:
        summed = [sum(v) for v in zip(*(values for _, values in rest), strict=True)]
        kept.append((OTHER, f"other ({len(rest)})", summed))
    return kept, [(i, name) for i, name, _ in kept]


Parts = Sequence[tuple[int, str, Sequence[int]]]  # (colour, name, value per category)


def _value_axis(
    chart: Chart,
    parts: Parts,
    n: int,
    text: Callable[[int], str],
    unit: int,
    span: tuple[float, float],
) -> int:
    """The value axis' ticks for the stacks of ``parts`` in ``n`` categories: 0 at ``span``'s
    first coordinate, the axis' end at its second; answers the value at that end."""
    totals = [sum(max(values[i], 0) for _, _, values in parts) for i in range(n)]
    step, top = _scale(totals, unit)
    origin, length = span[0], span[1] - span[0]
    for k in range(0, top + 1, step):
        chart.ticks.append(Tick(origin + length * k / top, text(k)))
    return top


def _pieces(
    parts: Parts, i: int, category: str, text: Callable[[int], str]
) -> Iterator[tuple[int, int, str]]:
    """The parts of category ``i`` drawn (their value above 0), in order: (colour, value,
    tooltip)."""
    for colour, name, values in parts:
        if value := max(values[i], 0):
            yield colour, value, f"{category} {name}: {text(value)}"


def stacked_columns(
    title: str,
    categories: Sequence[str],
    series: Sequence[tuple[str, Sequence[int]]],
    text: Callable[[int], str],
    unit: int,
    width: int = 720,
    height: int = 260,
) -> Chart:
    """A column per category (e.g. a day), the series stacked in it (negative values, e.g.
    a correction, are drawn as 0); ``text`` writes a value for the ticks and tooltips."""
    chart = Chart(title, width, height, left=64, top=24, right=width - 8, bottom=height - 28)
    kept, chart.legend = _series(series)
    span = chart.bottom - chart.top
    top = _value_axis(chart, kept, len(categories), text, unit, (chart.bottom, chart.top))
    slot = (chart.right - chart.left) / max(len(categories), 1)
    bar = slot * 0.7
    every = max(1, len(categories) // 10)  # at most ~10 labels under the columns
    for i, category in enumerate(categories):
        x = chart.left + slot * i + (slot - bar) / 2
        if i % every == 0:
            chart.labels.append(Label(x + bar / 2, category))
        y = chart.bottom
        for colour, value, tooltip in _pieces(kept, i, category, text):
            h = span * value / top
            y -= h
            chart.rects.append(Rect(x, y, bar, h, colour, tooltip))
    return chart


def stacked_bars(
    title: str,
    categories: Sequence[str],
    parts: Sequence[tuple[str, int, Sequence[int]]],
    text: Callable[[int], str],
    unit: int,
    width: int = 720,
) -> Chart:
    """A bar per category (e.g. a GPU model), ``parts`` (name, colour, value per category)
    laid end to end in it: e.g. allocated, idle and unavailable hours."""
    height = 40 + 34 * max(len(categories), 1)
    chart = Chart(title, width, height, left=8, top=8, right=width - 24, bottom=height - 28)
    chart.horizontal = True
    kept = [(colour, name, values) for name, colour, values in parts]
    chart.legend = [(colour, name) for colour, name, _ in kept]
    span = chart.right - chart.left
    top = _value_axis(chart, kept, len(categories), text, unit, (chart.left, chart.right))
    for i, category in enumerate(categories):
        y = chart.top + 34 * i
        chart.labels.append(Label(y + 9, category))
        x = chart.left
        for colour, value, tooltip in _pieces(kept, i, category, text):
            w = span * value / top
            chart.rects.append(Rect(x, y + 13, w, 14, colour, tooltip))
            x += w
    return chart
