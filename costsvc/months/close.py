"""Month close: freeze a billing month and record the SHA-256 of its reports.

Only a month that has ended can be closed, and only once. From then on its chargeback rows
never change (later data and back-dated prices become corrections in the next open month:
costsvc/db/lines.py), so its reports are byte-identical on every export; the hashes recorded
here are what every later export gives.

A month is complete when every hour of it, from the hour each cluster's ingestion began, has
been ingested. While some hour of it failed (its latest ingest run failed) or is missing (never
ingested), the close is refused naming those hours (:class:`MonthIncomplete`), unless forced;
a forced close records the hours it skipped in the audit log. A month with not one hour
ingested (:class:`MonthEmpty`) is refused even so, unless forced with a reason, which the
audit entry records.

A close is one transaction (:func:`close_month`): killed at any step, it leaves the month
open, and the next close does the whole of it.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError

from costsvc.db.runs import done_hours, failed_hour_states, first_hours
from costsvc.kit.times import iso_z, parse_month
from costsvc.months.repository import (
    Closed,
    close_state,
    lock_for_close,
    mark_closed,
    month_close,
    record_hashes,
)
from costsvc.reports.monthly import chargeback_csv, focus_csv, sha256_of

HOUR = timedelta(hours=1)


class MonthError(ValueError):
    """A month that cannot be closed (yet): the message says why."""


@dataclass(frozen=True, slots=True)
class Span:
    """Consecutive hours of one cluster in one state: [first, last] inclusive."""

    cluster: str
    state: str  # failed | missing
    first: datetime
    last: datetime

    @property
    def hours(self) -> int:
        return int((self.last - self.first) / HOUR) + 1

    def text(self) -> str:
        if self.first == self.last:
            return f"{self.cluster} {iso_z(self.first)}"
        return f"{self.cluster} {iso_z(self.first)}..{iso_z(self.last)} ({self.hours} hours)"

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "state": self.state,
            "first": iso_z(self.first),
            "last": iso_z(self.last),
            "hours": self.hours,
        }


class MonthIncomplete(MonthError):
    """The month has failed or missing hours; ``spans`` names them."""

    def __init__(self, month: str, spans: list[Span]) -> None:
        self.spans = spans
        parts = []
        for state in ("failed", "missing"):
            mine = [s for s in spans if s.state == state]
            if mine:
                n = sum(s.hours for s in mine)
                parts.append(f"{n} {state} hour(s): " + ", ".join(s.text() for s in mine))
        super().__init__(
            f"month {month} is incomplete: " + "; ".join(parts) + " (ingest them, or force the "
            "close: the skipped hours are recorded in the audit log)"
        )


class MonthEmpty(MonthError):
    """Not one hour of the month was ingested: closing it would freeze an empty bill."""

    def __init__(self, month: str) -> None:
        super().__init__(
            f"month {month} is empty: not one of its hours was ingested (ingest it, or close "
            "it anyway with a reason: the reason is recorded in the audit log)"
        )


MAX_REASON = 500  # characters of a forced close's reason


def ingested_hours(source: Engine | Connection, month: str) -> tuple[int, int]:
    """(hours of ``month`` ingested, hours it has): cluster-hours, every cluster's hours of
    the month counted (the month's hours once when no cluster was ever ingested)."""
    start, end = parse_month(month)
    done = done_hours(source, start, end)
    clusters = set(first_hours(source)) | set(done)
    return sum(len(h) for h in done.values()), int((end - start) / HOUR) * max(len(clusters), 1)


def _spans(cluster: str, state: str, hours: list[datetime]) -> list[Span]:
    out: list[Span] = []
    for h in sorted(hours):
        if out and out[-1].last + HOUR == h:
            out[-1] = Span(cluster, state, out[-1].first, h)
        else:
            out.append(Span(cluster, state, h, h))
    return out


def month_gaps(engine: Engine | Connection, month: str) -> list[Span]:
    """The month's failed and missing hours per cluster, as spans. An hour is missing when
    no ingest of it is done and none failed, from the first hour the cluster's ingestion ever
    tried (hours before a cluster was ingested at all are not its history)."""
    start, end = parse_month(month)
    done = done_hours(engine, start, end)
    failed: dict[str, list[datetime]] = {}
    for f in failed_hour_states(engine):
        if start <= f.hour < end:
            failed.setdefault(f.cluster, []).append(f.hour)
    spans: list[Span] = []
    for cluster, first in sorted(first_hours(engine).items()):
        bad = set(failed.get(cluster, []))
        missing = []
        h = max(first, start)
        while h < end:
            if h not in bad and h not in done.get(cluster, set()):
                missing.append(h)
            h += HOUR
        spans += _spans(cluster, "failed", sorted(bad))
        spans += _spans(cluster, "missing", missing)
    return spans


def close_month(
    engine: Engine,
    month: str,
    actor: str,
    now: datetime,
    force: bool = False,
    reason: str = "",
) -> Closed:
    """Close ``month``. Refused (:class:`MonthIncomplete`) while it has failed or missing
    hours, unless ``force``: then the hours skipped are recorded with the close. Refused
    (:class:`MonthEmpty`) when not one of its hours was ingested, unless ``force`` with a
    ``reason``; a reason given is recorded with the close.

    One transaction, under the writers' lock: the closed state, both reports' hashes (read in
    that transaction, so they are the bytes every later export gives) and the audit entry
    commit together or not at all. A close stopped anywhere — killed, the database gone —
    leaves the month open, and the next close does it all."""
    _, end = parse_month(month)
    reason = reason.strip()
    if len(reason) > MAX_REASON:
        raise MonthError(f"reason: at most {MAX_REASON} characters")
    if end > now:
        raise MonthError(f"month {month} has not ended yet (it ends {iso_z(end)})")
    if (found := month_close(engine, month)) is not None and found.csv_sha256:
        raise MonthError(f"month {month} is already closed")
    try:
        _close(engine, month, actor, now, force, reason)
    except IntegrityError:  # another close of it committed first (SQLite: no writers' lock)
        raise MonthError(f"month {month} is already closed") from None
    closed = month_close(engine, month)
    assert closed is not None
    return closed


def _close(engine: Engine, month: str, actor: str, now: datetime, force: bool, reason: str) -> None:
    with engine.begin() as conn:
        lock_for_close(conn)
        _reached("locked")
        state = close_state(conn, month)
        if state == "closed":
            raise MonthError(f"month {month} is already closed")
        gaps = month_gaps(conn, month)
        if ingested_hours(conn, month)[0] == 0 and not (force and reason):
            raise MonthEmpty(month)
        if gaps and not force:
            raise MonthIncomplete(month, gaps)
        if state is None:
            mark_closed(conn, month, now, actor)
        _reached("marked")
        # its rows are frozen from here on: hash the reports as every later export gives them
        csv_hash = sha256_of(chargeback_csv(conn, month))
        _reached("csv")
        focus_hash = sha256_of(focus_csv(conn, month))
        _reached("focus")
        extra: dict[str, Any] = {}
        if force:
            extra = {"forced": True, "skipped": [s.as_dict() for s in gaps]}
        if reason:
            extra["reason"] = reason
        if state == "unhashed":  # left half-done by an older version: completed now
            extra["completed"] = True
        record_hashes(conn, month, csv_hash, focus_hash, actor, extra)
        _reached("recorded")


# tests only: SIGKILL this process when the close has reached that step (tests/costsvc/
# test_close_killed.py kills it at each)
FAULT = "COSTSVC_TEST_KILL_CLOSE_AT"
STEPS = ("locked", "marked", "csv", "focus", "recorded")


def _reached(step: str) -> None:
    """A step of the close is done (tests kill the process here: ``FAULT``)."""
    assert step in STEPS
    if os.environ.get(FAULT) == step:
        os.kill(os.getpid(), signal.SIGKILL)
