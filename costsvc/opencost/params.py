"""OpenCost's ``/allocation`` query parameters, parsed as OpenCost parses them. Pure.

Forms and messages follow opencost/opencost (read at the commit named in docs/api.md):

- ``window``: ``core/pkg/opencost/window.go`` ``parseWindow`` — the keywords ``today``,
  ``yesterday``, ``week`` (since Sunday 00:00), ``lastweek``, ``month``, ``lastmonth``;
  durations ``^(\\d+)(m|h|d|w)$`` (the end rounded up to the next whole unit: ``7d`` is today
  and the 6 days before, ``24h`` ends at the next full hour); ``<d> offset <d>``; unix pairs
  ``^(\\d+)[,|-](\\d+)$``; RFC 3339 pairs ``YYYY-MM-DDTHH:MM:SSZ,YYYY-MM-DDTHH:MM:SSZ``.
  Anything else: ``illegal window: <w>``. The time zone is UTC (OpenCost's default offset).
- ``step``: ``pkg/costmodel/aggregation.go`` ``resolveStepFromQuery`` — ``hour``, ``day``,
  ``week`` or a Go duration with OpenCost's ``d``/``w`` units (``timeutil.ParseDuration``);
  default: the window. gpu-costsvc keeps hours, so a step must be a whole number of hours.
- ``accumulate``, ``includeIdle``, ``shareIdle``, ``idleByNode``: ``strconv.ParseBool``
  (``1 t T TRUE true True 0 f F FALSE false False``); anything else is the default, false,
  as OpenCost's ``GetBool`` has it; ``accumulate=all`` is true.
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


def parse_step(text: str | None, window: Window) -> timedelta:
    """The duration of each allocation set: the window when not given."""
    raw = (text or "").strip().lower()
    if not raw:
        step = window.duration
    elif raw in KEYWORD_STEPS:
        step = KEYWORD_STEPS[raw]
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
        step = HOUR * int(ns // HOUR_NS)
    if step <= timedelta(0):  # an empty window
        return HOUR
    if step % HOUR:
        raise _not_hours(raw or "window")
    sets = -(-window.duration // step)
    if sets > MAX_SETS:
        raise BadParameter(
            f"Invalid step parameter: {raw}: {sets} sets over this window, at most {MAX_SETS}"
        )
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


def parse_accumulate(text: str | None, by: str | None = None) -> bool:
    """``accumulate``: a bool, or ``all`` (sum every set into one); ``accumulateBy``, when
    given, decides instead: ``all`` or ``none`` (OpenCost's ``resolveAccumulateOption``)."""
    for name, value in (("accumulateBy", by), ("accumulate", text)):
        raw = (value or "").strip().lower()
        if raw in ("hour", "day", "week", "month", "quarter"):
            raise BadParameter(
                f"Invalid '{name}' parameter: {raw}: gpu-costsvc accumulates all sets "
                "(accumulate=true); for per-day sets use step=1d"
            )
    chosen = (by or "").strip().lower()
    if chosen in ("all", "none"):
        return chosen == "all"
    if chosen:
        raise BadParameter(f"Invalid 'accumulateBy' parameter: invalid accumulateBy option: {by}")
    raw = (text or "").strip()
    return raw.lower() == "all" or parse_bool(raw)


def split_list(values: list[str] | None) -> list[str]:
    """OpenCost's ``GetList(key, ",")`` over every occurrence of the parameter."""
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


def set_windows(window: Window, step: timedelta) -> list[Window]:
    """The allocation sets: [start, start + step), ... while the window goes on (OpenCost's
    loop: the last set may end after the window; an empty window has none)."""
    out = []
    at = window.start
    while at < window.end:
        out.append(Window(at, at + step))
        at += step
    return out
