"""Times as the cost service keeps them: aware UTC (SQLite hands back naive UTC, PostgreSQL
aware), written as ``YYYY-MM-DDTHH:MM:SSZ`` everywhere it shows them (:func:`iso_z`) and read
back from ISO 8601 text by one parser (:func:`parse_utc`).

The one home of the time rule (docs/architecture.md, "Rules"): the UTC hour, day, week, month
and quarter floors, the month after a month, Go's ``Time.Truncate``, the count of whole hours
in a span, billing months (``YYYY-MM``: :data:`MONTH`, :func:`month_of`, :func:`parse_month`,
:func:`next_month`) and ISO text are written here and nowhere else (tests/test_rules_homes.py
keeps it so; their SQL twins: costsvc/kit/sql_times.py). Pure."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

from costsvc.kit.quoting import shown

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def iso_z(value: datetime) -> str:
    """``value`` as ``YYYY-MM-DDTHH:MM:SSZ`` (UTC, whole seconds)."""
    v = as_utc(value)  # the year by hand: strftime's %Y writes year 1 as "1" on glibc
    return f"{v.year:04d}-{v:%m-%dT%H:%M:%S}Z"


def parse_utc(text: str) -> datetime:
    """ISO 8601 text as an aware UTC time: ``2026-11-10T05:00:00Z``, any offset
    (``+02:00``), or no zone at all (read as UTC, never as the machine's local time). Raises
    ``ValueError`` for anything else."""
    return as_utc(datetime.fromisoformat(text.replace("Z", "+00:00")))


def hour_floor(t: datetime) -> datetime:
    """The first instant of ``t``'s UTC hour."""
    return as_utc(t).replace(minute=0, second=0, microsecond=0)


def day_floor(t: datetime) -> datetime:
    """The first instant of ``t``'s UTC day."""
    return as_utc(t).replace(hour=0, minute=0, second=0, microsecond=0)


def week_floor(t: datetime, first: int) -> datetime:
    """The first instant of ``t``'s UTC week, weeks starting on weekday ``first`` (Python's
    numbering: Monday 0 .. Sunday 6)."""
    day = day_floor(t)
    return day - ((day.weekday() - first) % 7) * DAY


def month_floor(t: datetime) -> datetime:
    """The first instant of ``t``'s UTC month."""
    return as_utc(t).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def truncate(t: datetime, unit: timedelta) -> datetime:
    """``t`` truncated to a multiple of ``unit`` since the epoch (Go's ``Time.Truncate``)."""
    return EPOCH + ((as_utc(t) - EPOCH) // unit) * unit


def whole_hours(span: timedelta) -> int:
    """How many whole hours ``span`` holds (rounded down)."""
    return int(span.total_seconds() // 3600)


def quarter_floor(t: datetime) -> datetime:
    """The first instant of ``t``'s UTC calendar quarter (January, April, July, October)."""
    first = month_floor(t)
    return first.replace(month=(first.month - 1) // 3 * 3 + 1)


def months_after(t: datetime, months: int = 1) -> datetime:
    """The first instant of the UTC month ``months`` after ``t``'s (3: the next quarter's
    start, when ``t`` is a quarter's)."""
    first = month_floor(t)
    index = first.month - 1 + months
    return first.replace(year=first.year + index // 12, month=index % 12 + 1)


STEP_LENGTHS = {"hour": HOUR, "day": DAY, "week": 7 * DAY}


def step_starts(start: datetime, end: datetime, step: str) -> list[datetime]:
    """The first instant of every ``step`` (``hour``, ``day``, ``week`` from Monday,
    ``month``) that meets [start, end): the buckets :func:`costsvc.kit.sql_times.bucket`
    gives the hours of that span."""
    first = {
        "hour": hour_floor,
        "day": day_floor,
        "week": lambda t: week_floor(t, 0),
        "month": month_floor,
    }[step](start)
    out = []
    t = first
    while t < end:
        out.append(t)
        t = months_after(t) if step == "month" else t + STEP_LENGTHS[step]
    return out


# a billing month: YYYY-MM, UTC, 1970-01 .. 2999-12
MONTH = re.compile(r"^(19[7-9]\d|2\d{3})-(0[1-9]|1[0-2])$")


def month_of(t: datetime) -> str:
    """The billing month (``YYYY-MM``, UTC) ``t`` belongs to."""
    return f"{as_utc(t):%Y-%m}"


def parse_month(text: str) -> tuple[datetime, datetime]:
    """``YYYY-MM`` -> [first instant, first instant of the next month), UTC."""
    m = MONTH.match(text)
    if not m:
        raise ValueError(f"month {shown(text)}: expected YYYY-MM, e.g. 2026-11")
    start = datetime(int(m[1]), int(m[2]), 1, tzinfo=UTC)
    return start, months_after(start)


DAY_TEXT = re.compile(r"^(19[7-9]\d|2\d{3})-\d\d-\d\d$")  # as MONTH: 1970 .. 2999


def parse_day(text: str) -> date:
    """``YYYY-MM-DD`` (1970 .. 2999) -> that day (a UTC calendar day); ValueError otherwise."""
    if not DAY_TEXT.match(text):
        raise ValueError(f"day {shown(text)}: expected YYYY-MM-DD, e.g. 2026-11-30")
    return date.fromisoformat(text)


def next_month(month: str) -> str:
    """The billing month after ``month`` (``YYYY-MM``)."""
    return month_of(parse_month(month)[1])


def same_span_before(month: str, now: datetime) -> tuple[tuple[datetime, datetime], datetime]:
    """What a month's figures are compared with: ((the previous month's span), the cut).

    The cut is where ``month`` stands at ``now``: its end once ended (then the whole previous
    month), else ``now``'s hour (the hours before it). Before its end, the previous month's
    span runs from its first hour for as long as ``month`` has run up to the cut, never past
    its own end: 2026-12 at 2026-12-03 12:30 is [2026-12-01, 2026-12-03 12:00) against
    [2026-11-01, 2026-11-03 12:00); 2026-03 at 2026-03-31 15:10 runs 30 days 15 hours,
    longer than February: all of 2026-02."""
    start, end = parse_month(month)
    cut = min(end, max(start, hour_floor(now)))
    before = months_after(start, -1)
    if cut == end:
        return (before, start), cut
    return (before, min(start, before + (cut - start))), cut
