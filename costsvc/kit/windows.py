"""Every time-window form a question may give, parsed in one place: ``/v1``'s (``start`` /
``end`` as whole UTC hours, or a named ``window``: docs/api.md) and OpenCost's ``window``
(``/allocation``, ``/inferenceCost/total``). Pure: a refused window raises ``ValueError``
(OpenCost's forms: :class:`BadParameter`, a ``ValueError``) whose message the routes answer
with a 400. :data:`MAX_SPAN` bounds every question, whichever its form.

OpenCost's forms follow ``core/pkg/opencost/window.go`` ``parseWindow`` (opencost/opencost at
the commit named in docs/api.md) — the keywords ``today``, ``yesterday``, ``week`` (since
Sunday 00:00), ``lastweek``, ``month``, ``lastmonth``; durations ``^(\\d+)(m|h|d|w)$`` (the
end rounded up to the next whole unit: ``7d`` is today and the 6 days before, ``24h`` ends at
the next full hour); ``<d> offset <d>``; unix pairs ``^(\\d+)[,|-](\\d+)$``; RFC 3339 pairs
``YYYY-MM-DDTHH:MM:SSZ,YYYY-MM-DDTHH:MM:SSZ``. Anything else: ``illegal window: <w>``. The
time zone is UTC (OpenCost's default offset)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from costsvc.kit.quoting import shown
from costsvc.kit.times import (
    DAY,
    HOUR,
    day_floor,
    hour_floor,
    month_floor,
    parse_utc,
    truncate,
    week_floor,
)

WEEK = timedelta(days=7)
MAX_SPAN = timedelta(days=800)  # no question reads more than this, whichever its form
MONDAY, SUNDAY = 0, 6  # Python's weekday(): /v1's weeks start on Monday, OpenCost's on Sunday

# /v1 (docs/api.md)
V1_WINDOW = re.compile(r"(today|yesterday|week|month|lastmonth|(\d{1,4})([hd]))")  # fullmatch
YEARS = (1970, 2999)  # as billing months (costsvc/kit/times.py MONTH)

# OpenCost's
UNITS = {"m": timedelta(minutes=1), "h": HOUR, "d": DAY, "w": WEEK}
DURATION = re.compile(r"^(\d+)(m|h|d|w)$")
DURATION_OFFSET = re.compile(r"^(\d+)(m|h|d|w) offset (\d+)(m|h|d|w)$")
RFC3339 = r"\d\d\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ"
RFC_PAIR = re.compile(f"({RFC3339}),({RFC3339})")
UNIX_PAIR = re.compile(r"^(\d+)[,|-](\d+)$")


@dataclass(frozen=True, slots=True)
class Window:
    """A span of time [start, end), UTC."""

    start: datetime
    end: datetime

    @property
    def duration(self) -> timedelta:
        return self.end - self.start


class BadParameter(ValueError):
    """A parameter OpenCost would refuse (400). ``plain``: OpenCost answers it as text
    (``http.Error``), else as its JSON error (``proto.WriteError``: code and message)."""

    def __init__(self, message: str, plain: bool = False) -> None:
        super().__init__(message)
        self.plain = plain


# --- /v1 ---------------------------------------------------------------------------------


def _hour_after(now: datetime) -> datetime:
    """The end of the hour ``now`` is in: live windows end there, so an answer is the same
    for the whole hour (and cached for it); the current hour has no rows until ingested."""
    return hour_floor(now) + HOUR


def window_bounds(window: str, now: datetime) -> Window:
    """A named window as whole UTC hours [start, end) (docs/api.md)."""
    m = V1_WINDOW.fullmatch(window)
    if not m:
        raise ValueError(
            f"window {shown(window)}: use today, yesterday, week, month, "
            "lastmonth or a span like 24h / 7d"
        )
    end = _hour_after(now)
    day = day_floor(now)
    if window == "today":
        return Window(day, end)
    if window == "yesterday":
        return Window(day - DAY, day)
    if window == "week":
        return Window(week_floor(day, MONDAY), end)
    if window == "month":
        return Window(month_floor(now), end)
    if window == "lastmonth":
        start = month_floor(now)
        return Window(month_floor(start - HOUR), start)
    n, unit = int(m[2]), m[3]
    span = timedelta(hours=n) if unit == "h" else timedelta(days=n)
    if n == 0 or span > MAX_SPAN:
        raise ValueError(f"window {shown(window)}: between 1h and {MAX_SPAN.days}d")
    return Window(end - span, end)


def _utc_hour(value: datetime, name: str) -> datetime:
    """A given ``start``/``end`` in UTC; it must have a zone, a year in :data:`YEARS` and fall
    on a whole UTC hour (the data is hourly: a part of an hour is refused, never widened)."""
    if value.tzinfo is None:
        raise ValueError(f"{name}: give a time zone, e.g. 2026-11-01T00:00:00Z")
    if not YEARS[0] <= value.year <= YEARS[1]:
        raise ValueError(f"{name}: a year from {YEARS[0]} to {YEARS[1]}")
    try:
        utc = value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise ValueError(f"{name}: out of range") from None
    if not YEARS[0] <= utc.year <= YEARS[1]:
        raise ValueError(f"{name}: a year from {YEARS[0]} to {YEARS[1]}")
    if utc.minute or utc.second or utc.microsecond:
        raise ValueError(
            f"{name}: costs are hourly; give a whole UTC hour, e.g. 2026-11-01T06:00:00Z"
        )
    return utc


def time_range(
    now: datetime, start: datetime | None, end: datetime | None, window: str | None
) -> Window:
    """/v1's [start, end) in whole UTC hours from its parameters (docs/api.md)."""
    if window and (start or end):
        raise ValueError("give either window or start/end, not both")
    if end and not start:
        raise ValueError("end needs a start (or use window)")
    if window or not start:
        named = window_bounds(window or "month", now)
        lo, hi = named.start, named.end
    else:
        lo = _utc_hour(start, "start")
        hi = _utc_hour(end, "end") if end else _hour_after(now)
    if hi <= lo:
        raise ValueError("end must be after start")
    if hi - lo > MAX_SPAN:
        raise ValueError(f"the range is longer than {MAX_SPAN.days} days")
    return Window(lo, hi)


# --- OpenCost's ----------------------------------------------------------------------------


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
    day = day_floor(now)
    if text == "today":
        return Window(day, day + DAY)
    if text == "yesterday":
        return Window(day - DAY, day)
    if text == "week":
        return Window(week_floor(day, SUNDAY), now)
    if text == "lastweek":
        start = week_floor(day, SUNDAY) - WEEK
        return Window(start, start + WEEK)
    first = month_floor(day)
    if text == "month":
        return Window(first, now)
    if text == "lastmonth":
        return Window(month_floor(first - DAY), first)
    m = DURATION.match(text)
    if m:
        n, unit = int(m[1]), UNITS[m[2]]
        if m[2] == "w":  # the week ends today
            end = truncate(now, DAY) + DAY
            start = truncate(now - n * unit, DAY) + DAY
        else:
            end = truncate(now, unit) + unit
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
        return Window(parse_utc(m[1]), parse_utc(m[2]))
    raise _illegal(text)


def _illegal(text: str) -> BadParameter:
    return BadParameter(f"Invalid 'window' parameter: illegal window: {text}", plain=True)


def _unix(digits: str, text: str) -> datetime:
    if len(digits) > 11:  # past year 5000: out of range for any clock
        raise _illegal(text)
    return datetime.fromtimestamp(int(digits), UTC)


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
