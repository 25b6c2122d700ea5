"""OpenCost's ``/allocation`` query parameters, parsed as OpenCost parses them. Pure.

Forms and messages follow opencost/opencost (read at the commit named in docs/api.md):

- ``window``: ``core/pkg/opencost/window.go`` ``parseWindow`` — the keywords ``today``,
  ``yesterday``, ``week`` (since Sunday 00:00), ``lastweek``, ``month``, ``lastmonth``;
  durations ``^(\\d+)(m|h|d|w)$`` (the end rounded up to the next whole unit: ``7d`` is today
  and the 6 days before, ``24h`` ends at the next full hour); ``<d> offset <d>``; unix pairs
  ``^(\\d+)[,|-](\\d+)$``; RFC 3339 pairs ``YYYY-MM-DDTHH:MM:SSZ,YYYY-MM-DDTHH:MM:SSZ``.
  Anything else: ``illegal window: <w>``. The time zone is UTC (OpenCost's default offset).
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
- ``aggregate``: a comma list (``GetList``: split on ``,``, blanks trimmed);
  ``ParseAggregationProperties``: none given = cluster, node, namespace, pod, container.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

DAY = timedelta(days=1)
WEEK = timedelta(days=7)
UNITS = {"m": timedelta(minutes=1), "h": timedelta(hours=1), "d": DAY, "w": WEEK}
DURATION = re.compile(r"^(\d+)(m|h|d|w)$")
DURATION_OFFSET = re.compile(r"^(\d+)(m|h|d|w) offset (\d+)(m|h|d|w)$")
RFC3339 = r"\d\d\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ"
RFC_PAIR = re.compile(f"({RFC3339}),({RFC3339})")
UNIX_PAIR = re.compile(r"^(\d+)[,|-](\d+)$")
GO_DURATION = re.compile(r"^(?:(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h|d|w))+$")
GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h|d|w)")
NS = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9}
NS |= {"m": 60 * NS["s"], "h": 3600 * NS["s"], "d": 86400 * NS["s"], "w": 604800 * NS["s"]}
HOUR_NS = NS["h"]
HOUR = timedelta(hours=1)
# OpenCost: month and quarter steps are daily sets (resolveStepFromQuery)
KEYWORD_STEPS = {"hour": HOUR, "day": DAY, "week": WEEK, "month": DAY, "quarter": DAY}
# accumulation: none (every set), all (one), or one set per calendar period (UTC)
NONE, ALL = "", "all"
PERIODS = ("hour", "day", "week", "month", "quarter")
# the sets an accumulation is made of without a step (resolveDefaultStepFromAccumulate)
DEFAULT_STEPS = {"hour": HOUR, "day": DAY, "week": WEEK, "month": DAY, "quarter": DAY}
MAX_SPAN = timedelta(days=800)  # as /v1/costs: no question reads more than this
MAX_SETS = 1000  # allocation sets in one answer (window / step)
TRUE = {"1", "t", "T", "TRUE", "true", "True"}
FALSE = {"0", "f", "F", "FALSE", "false", "False"}


class BadParameter(ValueError):
    """A parameter OpenCost would refuse (400). ``plain``: OpenCost answers it as text
    (``http.Error``), else as its JSON error (``proto.WriteError``: code and message)."""

    def __init__(self, message: str, plain: bool = False) -> None:
        super().__init__(message)
        self.plain = plain


@dataclass(frozen=True, slots=True)
class Window:
    start: datetime
    end: datetime

    @property
    def duration(self) -> timedelta:
        return self.end - self.start


def _midnight(now: datetime) -> datetime:
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def _floor(now: datetime, unit: timedelta) -> datetime:
    """``now`` truncated to a multiple of ``unit`` since the epoch (Go's Time.Truncate)."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return epoch + ((now - epoch) // unit) * unit


def parse_window(text: str, now: datetime) -> Window:
    """OpenCost's ``parseWindow`` in UTC. Raises :class:`BadParameter` as OpenCost does; a
    window outside the years 1970-2999 (or past what a clock can hold) is illegal too."""
    try:
        return _checked(_parse_window(text, now.astimezone(UTC)), text)
    except (OverflowError, ValueError) as exc:
        if isinstance(exc, BadParameter):
            raise
        raise _illegal(text) from None


def _parse_window(text: str, now: datetime) -> Window:
    day = _midnight(now)
    if text == "today":
        return Window(day, day + DAY)
    if text == "yesterday":
        return Window(day - DAY, day)
    # Go's Weekday: Sunday = 0; Python's weekday(): Monday = 0
    since_sunday = (day.weekday() + 1) % 7
    if text == "week":
        return Window(day - since_sunday * DAY, now)
    if text == "lastweek":
        start = day - (since_sunday + 7) * DAY
        return Window(start, start + WEEK)
    first = day.replace(day=1)
    if text == "month":
        return Window(first, now)
    if text == "lastmonth":
        return Window((first - DAY).replace(day=1), first)
    m = DURATION.match(text)
    if m:
        n, unit = int(m[1]), UNITS[m[2]]
        if m[2] == "w":  # the week ends today
            end = _floor(now, DAY) + DAY
            start = _floor(now - n * unit, DAY) + DAY
        else:
            end = _floor(now, unit) + unit
            start = end - n * unit
        return Window(start, end)
    m = DURATION_OFFSET.match(text)
    if m:
        end = now - int(m[3]) * UNITS[m[4]]
        return Window(end - int(m[1]) * UNITS[m[2]], end)
    m = UNIX_PAIR.match(text)
    if m:
        return Window(_unix(m[1], text), _unix(m[2], text))
    m = RFC_PAIR.search(text)  # OpenCost's pattern is not anchored
    if m:
        return Window(_rfc3339(m[1]), _rfc3339(m[2]))
    raise _illegal(text)


def _illegal(text: str) -> BadParameter:
    return BadParameter(f"Invalid 'window' parameter: illegal window: {text}", plain=True)


def _unix(digits: str, text: str) -> datetime:
    if len(digits) > 11:  # past year 5000: out of range for any clock
        raise _illegal(text)
    return datetime.fromtimestamp(int(digits), UTC)


def _rfc3339(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _checked(window: Window, text: str) -> Window:
    if window.end < window.start:  # OpenCost: "illegal window" (window.IsNegative)
        raise _illegal(text)
    if window.start.year < 1970 or window.end.year > 2999:
        raise _illegal(text)
    if window.duration > MAX_SPAN:
        raise BadParameter(
            f"Invalid 'window' parameter: {text}: longer than {MAX_SPAN.days} days", plain=True
        )
    return window


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


def split_list(values: list[str] | None) -> list[str]:
    """OpenCost's ``GetList(key, ",")`` over every occurrence of the parameter."""
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


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
        query = Window(_sunday(query.start), query.end)
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


def _sunday(t: datetime) -> datetime:
    """00:00 UTC of the Sunday on or before ``t`` (Go's weeks start on Sunday)."""
    day = _midnight(t)
    return day - ((day.weekday() + 1) % 7) * DAY


def _period_start(t: datetime, period: str) -> datetime:
    if period == "hour":
        return t.replace(minute=0, second=0, microsecond=0)
    if period == "day":
        return _midnight(t)
    if period == "week":
        return _sunday(t)
    first = _midnight(t).replace(day=1)
    if period == "month":
        return first
    return first.replace(month=(t.month - 1) // 3 * 3 + 1)  # quarter


def _next_period(t: datetime, period: str) -> datetime:
    """The start of the period after the one starting at ``t``."""
    if period in ("hour", "day", "week"):
        return t + {"hour": HOUR, "day": DAY, "week": WEEK}[period]
    months = 1 if period == "month" else 3
    month = t.month - 1 + months
    return t.replace(year=t.year + month // 12, month=month % 12 + 1)


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
