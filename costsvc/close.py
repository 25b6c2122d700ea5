"""Month close: freeze a billing month and record the SHA-256 of its reports.

Only a month that has ended can be closed, and only once. From then on its chargeback rows
never change (later data and back-dated prices become corrections in the next open month:
costsvc/db/lines.py), so its reports are byte-identical on every export; the hashes recorded
here are what every later export gives.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine

from costsvc.chargeback import parse_month
from costsvc.db.months import Closed, mark_closed, month_close, record_hashes
from costsvc.reports import chargeback_csv, focus_csv, sha256_of


class MonthError(ValueError):
    """A month that cannot be closed (yet): the message says why."""


def close_month(engine: Engine, month: str, actor: str, now: datetime) -> Closed:
    _, end = parse_month(month)
    if end > now:
        raise MonthError(f"month {month} has not ended yet (it ends {end:%Y-%m-%dT%H:%M:%SZ})")
    if not mark_closed(engine, month, now, actor):
        raise MonthError(f"month {month} is already closed")
    # its rows are frozen from here on: hash the reports as every later export will give them
    csv_hash = sha256_of(chargeback_csv(engine, month))
    focus_hash = sha256_of(focus_csv(engine, month))
    record_hashes(engine, month, csv_hash, focus_hash, actor)
    found = month_close(engine, month)
    assert found is not None
    return found
