"""Times as the cost service keeps them: aware UTC (SQLite hands back naive UTC, PostgreSQL
aware), written as ``YYYY-MM-DDTHH:MM:SSZ`` everywhere it shows them.

The one home of the time rule (docs/architecture.md, "Rules"): the UTC hour, day, week and
month floors, Go's ``Time.Truncate`` and the count of whole hours in a span are written here
and nowhere else (tests/test_rules_homes.py keeps it so). Pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def iso_z(value: datetime) -> str:
    v = as_utc(value)  # the year by hand: strftime's %Y writes year 1 as "1" on glibc
    return f"{v.year:04d}-{v:%m-%dT%H:%M:%S}Z"


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
