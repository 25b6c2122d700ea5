"""Times in SQL, the twin of costsvc/kit/times.py: an hour column floored to its UTC hour, day
or month as ISO text (:func:`bucket`), a time as ``YYYY-MM-DDTHH:MM:SSZ``
(:func:`iso_z_sql`, the CSV's COPY path), and the step since an origin a time falls in
(:func:`step_index`). PostgreSQL and SQLite each their own way; both give the text
:func:`costsvc.kit.times.iso_z` writes. Every ``date_trunc``/``to_char``/``strftime`` of the
cost service is here (tests/test_rules_homes.py keeps it so). Builds expressions; runs
nothing."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import BigInteger, ColumnElement, Connection, Integer, cast, func

# a floor's ISO text, per step: PostgreSQL's to_char patterns and SQLite's strftime formats
PG_FLOORS = {
    "hour": 'YYYY-MM-DD"T"HH24:00:00"Z"',
    "day": 'YYYY-MM-DD"T"00:00:00"Z"',
    "month": 'YYYY-MM-01"T"00:00:00"Z"',
}
SQLITE_FLOORS = {
    "hour": "%Y-%m-%dT%H:00:00Z",
    "day": "%Y-%m-%dT00:00:00Z",
    "month": "%Y-%m-01T00:00:00Z",
}
PG_ISO_Z = 'YYYY-MM-DD"T"HH24:MI:SS"Z"'


def bucket(conn: Connection, step: str, h: Any) -> ColumnElement[Any]:
    """The hour column ``h`` truncated to ``step`` (``hour``, ``day``, ``week`` — from
    Monday 00:00, ISO 8601's and /v1's week —, ``month``), as ISO text (UTC)."""
    if conn.dialect.name == "postgresql":
        utc = func.timezone("UTC", h)
        if step == "week":
            return func.to_char(func.date_trunc("week", utc), PG_FLOORS["day"])
        return func.to_char(utc, PG_FLOORS[step])
    if step == "week":  # back six days, then on to a Monday: the Monday on or before h
        return func.strftime(SQLITE_FLOORS["day"], h, "-6 days", "weekday 1")
    return func.strftime(SQLITE_FLOORS[step], h)


def iso_z_sql(column: Any) -> Any:
    """:func:`costsvc.kit.times.iso_z` as a SQL expression over a time column (PostgreSQL)."""
    return func.to_char(func.timezone("UTC", column), PG_ISO_Z)


def step_index(conn: Connection, h: Any, origin: datetime, step: timedelta) -> Any:
    """Which ``step``-long span from ``origin`` the time column ``h`` is in:
    ``(h - origin) // step``, in SQL."""
    seconds, since = int(step.total_seconds()), int(origin.timestamp())
    if conn.dialect.name == "postgresql":
        epoch = func.extract("epoch", h)
        return cast(func.floor((epoch - since) / seconds), BigInteger)
    return (cast(func.strftime("%s", h), Integer) - since) / seconds
