"""Chargeback reports of a billing month: CSV for finance and FinOps FOCUS 1.2.

Both are streamed from the database in constant memory, rows in a fixed order, money as plain
decimal strings (never floats), UTF-8. A closed month's rows never change, so its reports are
byte-identical on every export; their SHA-256 is recorded when the month is closed.

CSV columns, in order (``group_by`` replaces the owner/placement columns by the chosen ones):
billing_month, charge_period_start, charge_period_end, charge_class (regular | correction),
cluster, team, project, stage, namespace, pod, node, gpu_model, mig_profile, currency,
gpu_hours, allocated_cost, used_cost, allocated_idle_cost, idle_cost, total_cost.
Text cells from labels are spreadsheet-safe: one starting with ``=``, ``+``, ``-``, ``@``, tab
or CR gets a leading ``'``; the numeric columns are never altered.
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, func, select

from costsvc.db.models import Chargeback
from costsvc.focus import COLUMNS as FOCUS_COLUMNS
from costsvc.focus import ChargeRow, focus_row, safe_cell
from costsvc.months import parse_month
from costsvc.queries import DIMENSIONS, money

PLACEMENT = ("cluster", "team", "project", "stage", "namespace", "pod", "node", "gpu_model",
             "mig_profile")  # fmt: skip
AMOUNTS = ("gpu_hours", "allocated_cost", "used_cost", "allocated_idle_cost", "idle_cost",
           "total_cost")  # fmt: skip
CHUNK = 2000  # rows per database fetch and per streamed piece


def csv_columns(group_by: list[str] | None) -> list[str]:
    if group_by:
        return ["billing_month", "charge_class", *group_by, "currency", *AMOUNTS]
    return ["billing_month", "charge_period_start", "charge_period_end", "charge_class",
            *PLACEMENT, "currency", *AMOUNTS]  # fmt: skip


def _iso(t: datetime) -> str:
    t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    return f"{t:%Y-%m-%dT%H:%M:%SZ}"


class _Lines:
    """CSV rows as text, taken back piece by piece. QUOTE_MINIMAL with ``\n`` line ends, but
    a cell holding a CR is quoted too: such a row (rare: labels are untrusted) is formatted
    with a ``\r\n`` terminator, which makes the csv module quote either character, and its
    line end swapped back. A label with a bare CR must not split the row for any reader."""

    def __init__(self) -> None:
        self._buf = io.StringIO()
        self._fast = csv.writer(self._buf, lineterminator="\n")
        self._cr = io.StringIO()
        self._careful = csv.writer(self._cr, lineterminator="\r\n")

    def row(self, cells: Sequence[object]) -> None:
        if any(isinstance(c, str) and "\r" in c for c in cells):
            self._careful.writerow(cells)
            self._buf.write(self._cr.getvalue()[:-2] + "\n")
            self._cr.seek(0)
            self._cr.truncate()
        else:
            self._fast.writerow(cells)

    def take(self) -> str:
        text = self._buf.getvalue()
        self._buf.seek(0)
        self._buf.truncate()
        return text


def chargeback_csv(
    engine: Engine, month: str, group_by: list[str] | None = None, team: str | None = None
) -> Iterator[str]:
    """The month's chargeback CSV, piece by piece (``team``: that team's rows only)."""
    parse_month(month)  # raises ValueError for a bad month
    for g in group_by or []:
        if g not in DIMENSIONS:
            raise ValueError(f"group_by {g!r}: use any of {', '.join(DIMENSIONS)}")
    out = _Lines()
    out.row(csv_columns(group_by))
    yield out.take()
    c = Chargeback
    if group_by:
        cols = [getattr(c, g) for g in group_by]
        q = (select(c.correction, *cols, c.currency, func.sum(c.gpu_hours), func.sum(c.allocated),
                    func.sum(c.used), func.sum(c.waste), func.sum(c.idle))
             .where(c.billing_month == month)
             .group_by(c.correction, *cols, c.currency)
             .order_by(c.correction, *cols, c.currency))  # fmt: skip
    else:
        q = (select(c.hour, c.correction, *(getattr(c, p) for p in PLACEMENT), c.currency,
                    c.gpu_hours, c.allocated, c.used, c.waste, c.idle)
             .where(c.billing_month == month)
             .order_by(c.hour, *(getattr(c, p) for p in PLACEMENT), c.correction))  # fmt: skip
    if team is not None:
        q = q.where(c.team == team)
    last_hour, bounds = None, ("", "")
    with engine.connect() as conn:
        result = conn.execution_options(stream_results=True, yield_per=CHUNK).execute(q)
        for part in result.partitions():
            for r in part:
                gpu_h, alloc, used, waste, idle = (int(v or 0) for v in r[-5:])
                amounts = [money(gpu_h), money(alloc), money(used), money(waste), money(idle),
                           money(alloc + idle)]  # fmt: skip
                if group_by:
                    labels = [safe_cell(str(v)) for v in r[1 : 1 + len(group_by)]]
                    cls = "correction" if r[0] else "regular"
                    out.row([month, cls, *labels, r[1 + len(group_by)], *amounts])
                else:
                    hour = r[0]
                    if hour != last_hour:  # rows come by hour: format its bounds once
                        last_hour, bounds = hour, (_iso(hour), _iso(hour + timedelta(hours=1)))
                    labels = [safe_cell(v) for v in r[2 : 2 + len(PLACEMENT)]]
                    out.row([month, *bounds, "correction" if r[1] else "regular", *labels,
                             r[2 + len(PLACEMENT)], *amounts])  # fmt: skip
            yield out.take()


def focus_csv(engine: Engine, month: str, team: str | None = None) -> Iterator[str]:
    """The month's FOCUS 1.2 CSV, piece by piece (``team``: that team's rows only)."""
    parse_month(month)
    out = _Lines()
    out.row(FOCUS_COLUMNS)
    yield out.take()
    c = Chargeback
    q = (select(c.hour, c.billing_month, *(getattr(c, p) for p in PLACEMENT), c.correction,
                c.currency, c.allocated, c.used, c.waste, c.idle, c.gpu_hours)
         .where(c.billing_month == month)
         .order_by(c.hour, *(getattr(c, p) for p in PLACEMENT), c.correction))  # fmt: skip
    if team is not None:
        q = q.where(c.team == team)
    with engine.connect() as conn:
        result = conn.execution_options(stream_results=True, yield_per=CHUNK).execute(q)
        for part in result.partitions():
            for r in part:
                hour = r[0].replace(tzinfo=UTC) if r[0].tzinfo is None else r[0]
                row = ChargeRow(
                    hour=hour,
                    billing_month=r[1],
                    **dict(zip(PLACEMENT, r[2:11], strict=True)),
                    correction=bool(r[11]),
                    currency=r[12],
                    allocated=int(r[13]),
                    used=int(r[14]),
                    waste=int(r[15]),
                    idle=int(r[16]),
                    gpu_hours=int(r[17]),
                )
                out.row(focus_row(row))
            yield out.take()


def sha256_of(pieces: Iterator[str]) -> str:
    h = hashlib.sha256()
    for piece in pieces:
        h.update(piece.encode())
    return h.hexdigest()
