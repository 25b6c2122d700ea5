"""OpenCost's ``/allocation`` query parameters, parsed as OpenCost parses them. Pure.

Forms and messages follow opencost/opencost (read at the commit named in docs/api.md):

- ``window``: parsed by costsvc/kit/windows.py (``parse_window``), where every window form is.
- ``step``: ``pkg/costmodel/aggregation.go`` ``resolveStepFromQuery`` — ``hour``, ``day``,
  ``week`` (``month``, ``quarter``: daily sets) or a Go duration with OpenCost's ``d``/``w``
  units (``timeutil.ParseDuration``); default: the window, or what the accumulation needs
  (``resolveDefaultStepFromAccumulate``, ``resolveStepForAccumulate``). gpu-costsvc keeps
  hours, so a step given must be a whole number of hours (the window as its own step may be
  any length); weekly steps start on the Sunday before (``step_align.go``
  ``alignStepStart``).
- ``accumulate`` / ``accumulateBy``: ``resolveAccumulateFromQuery`` and
  ``resolveAccumulateOption`` — ``all``, a Go bool, or a calendar period (``hour``, ``day``,
  ``week``, ``month``, ``quarter``): the window widened to whole periods
  (``resolveQueryWindowForAccumulate``, window.go ``GetAccumulateWindows``; UTC, weeks from
  Sunday), the sets summed per period (``AllocationSetRange.Accumulate``), periods outside the
  window dropped (``trimAllocationSetRangeToRequestWindow``).
- ``includeIdle``, ``shareIdle``, ``idleByNode``: ``strconv.ParseBool``
  (``1 t T TRUE true True 0 f F FALSE false False``); anything else is the default, false,
  as OpenCost's ``GetBool`` has it.
- ``aggregate``: a comma list (``GetList``: split on ``,``, blanks trimmed:
  costsvc/kit/lists.py ``comma_list``);
  ``ParseAggregationProperties``: none given = cluster, node, namespace, pod, container.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from costsvc.kit.times import (
    DAY,
    HOUR,
    day_floor,
    hour_floor,
    month_floor,
    months_after,
    quarter_floor,
    week_floor,
)
from costsvc.kit.windows import MAX_SPAN, SUNDAY, WEEK, BadParameter, Window

GO_DURATION = re.compile(r"^(?:(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h|d|w))+$")
GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h|d|w)")
NS = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9}
NS |= {"m": 60 * NS["s"], "h": 3600 * NS["s"], "d": 86400 * NS["s"], "w": 604800 * NS["s"]}
HOUR_NS = NS["h"]
# OpenCost: month and quarter steps are daily sets (resolveStepFromQuery)
KEYWORD_STEPS = {"hour": HOUR, "day": DAY, "week": WEEK, "month": DAY, "quarter": DAY}
# accumulation: none (every set), all (one), or one set per calendar period (UTC)
NONE, ALL = "", "all"
PERIODS = ("hour", "day", "week", "month", "quarter")
# the sets an accumulation is made of without a step (resolveDefaultStepFromAccumulate)
DEFAULT_STEPS = {"hour": HOUR, "day": DAY, "week": WEEK, "month": DAY, "quarter": DAY}
MAX_SETS = 1000  # allocation sets in one answer (window / step)
TRUE = {"1", "t", "T", "TRUE", "true", "True"}
FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def parse_step(text: str | None, window: Window, accumulate: str = NONE) -> timedelta:
    """The duration of each allocation set, as OpenCost's ``resolveStepFromQuery`` resolves
    it for the accumulation asked (``resolveStepForAccumulate``): hourly sets for ``hour``
    (and for ``day`` unless the step is a day), daily sets for ``week`` (unless the step is a
    week), ``month`` and ``quarter``; without a step, the default of the accumulation
    (``resolveDefaultStepFromAccumulate``) or the window itself. A step given must be a whole
    number of hours; the window as its own step may be any length (one set)."""
    raw = (text or "").strip().lower()
    if not raw:
        step = _for_accumulate(DEFAULT_STEPS.get(accumulate, window.duration), accumulate)
        if step == window.duration:  # one set, whatever its length (window=month, 30m...)
            return step if step > timedelta(0) else HOUR
    elif raw in KEYWORD_STEPS:
        step = _for_accumulate(KEYWORD_STEPS[raw], accumulate)
    else:
        if not GO_DURATION.match(raw):
            raise BadParameter(
                f'Invalid step parameter: invalid step "{raw}": must be a Go duration or one '
                "of hour, day, week, month, quarter"
            )
        ns = sum(Decimal(number) * NS[unit] for number, unit in GO_PART.findall(raw))
        if ns <= 0 or ns % HOUR_NS:
            raise _not_hours(raw)
        if ns > int(MAX_SPAN.total_seconds()) * NS["s"]:
            raise BadParameter(f"Invalid step parameter: {raw}: longer than {MAX_SPAN.days} days")
        step = _for_accumulate(HOUR * int(ns // HOUR_NS), accumulate)
    if step <= timedelta(0):  # an empty window
        return HOUR
    if step % HOUR:
        raise _not_hours(raw or "window")
    return step


def _for_accumulate(step: timedelta, accumulate: str) -> timedelta:
    """OpenCost's ``resolveStepForAccumulate``: the sets an accumulation is made of."""
    if accumulate == "hour":
        return HOUR
    if accumulate == "day":
        return DAY if step == DAY else HOUR
    if accumulate in ("week", "month", "quarter"):
        return WEEK if accumulate == "week" and step == WEEK else DAY
    return step


def _not_hours(raw: str) -> BadParameter:
    return BadParameter(
        f"Invalid step parameter: {raw}: gpu-costsvc keeps hourly figures, "
        "so a step is a whole number of hours (1h, 6h, 1d, 1w)"
    )


def parse_bool(text: str | None, default: bool = False) -> bool:
    """OpenCost's ``GetBool``: ``strconv.ParseBool``, else the default."""
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    return default


def _accumulate_option(text: str) -> str:
    """OpenCost's ``ParseAccumulate``: a period, ``true`` (all), else none."""
    raw = text.lower()
    if raw in PERIODS:
        return raw
    return ALL if raw == "true" else NONE


def parse_accumulate(text: str | None, by: str | None = None) -> str:
    """``accumulate`` and ``accumulateBy`` as OpenCost resolves them
    (``resolveAccumulateFromQuery``, ``resolveAccumulateOption``): ``all`` (one set), a
    period (``hour``, ``day``, ``week``, ``month``, ``quarter``: one set per calendar period,
    UTC) or :data:`NONE` (every set as computed). ``accumulate`` is a period, ``all`` or a
    Go bool (anything else: none); ``accumulateBy``, when given, decides: ``all``, ``none``
    or a period (anything else is OpenCost's 400)."""
    raw = (text or "").strip()
    if raw.lower() == ALL:
        chosen = ALL
    else:
        chosen = _accumulate_option(raw)
        if chosen == NONE and parse_bool(text):
            chosen = ALL
    by_raw = (by or "").strip().lower()
    if not by_raw:
        return chosen
    if by_raw in (ALL, "none"):
        return ALL if by_raw == ALL else NONE
    option = _accumulate_option(by_raw)
    if option == NONE:
        raise BadParameter(f"Invalid 'accumulateBy' parameter: invalid accumulateBy option: {by}")
    return option


@dataclass(frozen=True, slots=True)
class Plan:
    """What an ``/allocation`` question reads and answers: the hours of ``query``, in sets
    ``step`` long from its start (``sets``), summed into the answer's sets (``groups``: the
    window of each and the computed sets it sums)."""

    query: Window
    sets: list[Window]
    groups: list[tuple[Window, tuple[int, ...]]]

    @property
    def step(self) -> timedelta:
        return self.sets[0].duration if self.sets else self.query.duration


def plan(window: Window, step: timedelta, accumulate: str = NONE, stepped: bool = False) -> Plan:
    """OpenCost's sets for ``window``: with a period accumulation the window is first
    rounded out to whole calendar periods (``resolveQueryWindowForAccumulate``, window.go
    ``GetAccumulateWindows``), weekly sets asked for (``stepped``: a ``step`` was given)
    start on the Sunday before (``alignStepStart``; a 7-day window is its own set),
    the computed sets are summed per period (``AllocationSetRange.Accumulate``) and the
    periods that do not meet the window asked are dropped
    (``trimAllocationSetRangeToRequestWindow``)."""
    query = round_out(window, accumulate) if accumulate in PERIODS else window
    if stepped and step == WEEK:
        query = Window(week_floor(query.start, SUNDAY), query.end)
    sets = set_windows(query, step)
    if len(sets) > MAX_SETS:
        raise BadParameter(
            f"Invalid step parameter: {len(sets)} sets of {step} over this window, "
            f"at most {MAX_SETS}"
        )
    groups = _groups(sets, step, accumulate)
    if accumulate in PERIODS:
        groups = [g for g in groups if g[0].start < window.end and g[0].end > window.start]
    return Plan(query, sets, groups)


def _period_start(t: datetime, period: str) -> datetime:
    if period == "hour":
        return hour_floor(t)
    if period == "day":
        return day_floor(t)
    if period == "week":
        return week_floor(t, SUNDAY)  # Go's weeks start on Sunday
    if period == "month":
        return month_floor(t)
    return quarter_floor(t)


def _next_period(t: datetime, period: str) -> datetime:
    """The start of the period after the one starting at ``t``."""
    if period in ("hour", "day", "week"):
        return t + {"hour": HOUR, "day": DAY, "week": WEEK}[period]
    return months_after(t, 1 if period == "month" else 3)


def round_out(window: Window, period: str) -> Window:
    """The window widened to whole calendar periods (UTC): its start back to the start of
    its period, its end on to the next period start unless it is one."""
    start = _period_start(window.start, period)
    end = _period_start(window.end, period)
    if end < window.end:
        end = _next_period(end, period)
    return Window(start, max(end, start))


def _groups(
    sets: list[Window], step: timedelta, accumulate: str
) -> list[tuple[Window, tuple[int, ...]]]:
    if not sets:
        return []
    if accumulate == ALL:
        return [(Window(sets[0].start, sets[-1].end), tuple(range(len(sets))))]
    native = {"hour": HOUR, "day": DAY, "week": WEEK}
    if accumulate not in PERIODS or native.get(accumulate) == step:
        return [(w, (i,)) for i, w in enumerate(sets)]
    by_period: dict[datetime, list[int]] = {}
    for i, w in enumerate(sets):
        by_period.setdefault(_period_start(w.start, accumulate), []).append(i)
    return [(Window(sets[ix[0]].start, sets[ix[-1]].end), tuple(ix)) for ix in by_period.values()]


def set_windows(window: Window, step: timedelta) -> list[Window]:
    """The allocation sets: [start, start + step), ... while the window goes on (OpenCost's
    loop: the last set may end after the window; an empty window has none)."""
    out = []
    at = window.start
    while at < window.end:
        out.append(Window(at, at + step))
        at += step
    return out
