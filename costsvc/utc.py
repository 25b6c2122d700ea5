"""Times as the cost service keeps them: aware UTC (SQLite hands back naive UTC, PostgreSQL
aware), written as ``YYYY-MM-DDTHH:MM:SSZ`` everywhere it shows them."""

from __future__ import annotations

from datetime import UTC, datetime


def as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def iso_z(value: datetime) -> str:
    v = as_utc(value)  # the year by hand: strftime's %Y writes year 1 as "1" on glibc
    return f"{v.year:04d}-{v:%m-%dT%H:%M:%S}Z"
