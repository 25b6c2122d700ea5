"""Billing months as finance sees them (the finance page): each month's state — open (not
ended), closable, incomplete (its failed and missing hours, which refuse a close:
costsvc/months/close.py) or closed (when, by whom, its reports' SHA-256) — and the corrections
billed in each month for hours of months closed before them (costsvc/db/lines.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, func, select, true

from costsvc.db.models import Chargeback
from costsvc.db.runs import first_hours
from costsvc.kit.sql_times import bucket
from costsvc.kit.times import month_of, next_month, parse_month
from costsvc.months.close import Span, ingested_hours, month_gaps
from costsvc.months.repository import Closed, closed_month_names, month_close

Billed = dict[str, dict[str, int]]  # month -> currency -> micro-units


@dataclass(frozen=True, slots=True)
class MonthState:
    month: str
    state: str  # open | closable | incomplete | closed
    closed: Closed | None = None
    gaps: list[Span] = field(default_factory=list)  # incomplete: the failed and missing hours

    def hours(self, state: str) -> int:
        """How many of its hours are ``state`` (failed or missing)."""
        return sum(s.hours for s in self.gaps if s.state == state)


def month_state(engine: Engine, month: str, now: datetime) -> MonthState:
    """``month``'s state at ``now`` (the month is ``YYYY-MM``: ValueError otherwise)."""
    _, end = parse_month(month)
    closed = month_close(engine, month)
    if closed is not None:
        return MonthState(month, "closed", closed)
    if end > now:
        return MonthState(month, "open")
    gaps = month_gaps(engine, month)
    return MonthState(month, "incomplete" if gaps else "closable", gaps=gaps)


@dataclass(frozen=True, slots=True)
class CloseFacts:
    """What a close confirms: the month's hours ingested of its hours (cluster-hours:
    costsvc/months/close.py ``ingested_hours``) and what it bills, per currency in
    micro-units (its chargeback rows, corrections billed in it included: what the close
    freezes)."""

    ingested: int
    hours: int
    totals: dict[str, int]


def close_facts(engine: Engine, month: str) -> CloseFacts:
    c = Chargeback
    query = (
        select(c.currency, func.sum(c.allocated + c.idle))
        .where(c.billing_month == month)
        .group_by(c.currency)
        .order_by(c.currency)
    )
    with engine.connect() as conn:
        ingested, hours = ingested_hours(conn, month)
        totals = {r[0]: int(r[1] or 0) for r in conn.execute(query)}
    return CloseFacts(ingested, hours, totals)


def billed(engine: Engine, month: str | None = None, before: datetime | None = None) -> Billed:
    """What each month bills (or ``month`` alone), per currency in micro-units: its
    chargeback rows, corrections billed in it included (as :func:`close_facts`); with
    ``before``, only the rows of hours before it."""
    c = Chargeback
    query = select(c.billing_month, c.currency, func.sum(c.allocated + c.idle))
    if month is not None:
        query = query.where(c.billing_month == month)
    if before is not None:
        query = query.where(c.hour < before)
    query = query.group_by(c.billing_month, c.currency)
    out: Billed = {}
    with engine.connect() as conn:
        for m, currency, total in conn.execute(query):
            out.setdefault(m, {})[currency] = int(total or 0)
    return out


def billing_months(engine: Engine, now: datetime) -> list[str]:
    """The months with a history, newest first: from the first hour any cluster's ingestion
    tried (or the first closed month) to ``now``'s month; ``now``'s month alone when there
    is none."""
    firsts = [month_of(h) for h in first_hours(engine).values()]
    firsts += closed_month_names(engine)
    with engine.connect() as conn:
        billed = conn.execute(select(func.min(Chargeback.billing_month))).scalar()
    if billed:
        firsts.append(billed)
    current = month_of(now)
    month = min([*firsts, current])
    out = []
    while month <= current:
        out.append(month)
        month = next_month(month)
    return out[::-1]


def month_states(engine: Engine, now: datetime) -> list[MonthState]:
    return [month_state(engine, m, now) for m in billing_months(engine, now)]


def corrections(engine: Engine) -> list[dict[str, Any]]:
    """Correction rows summed per billing month, the month of the hours they correct, team
    and currency (money in micro-units), newest billing month first."""
    c = Chargeback
    with engine.connect() as conn:
        of = bucket(conn, "month", c.hour)
        key = (c.billing_month, of, c.team, c.currency)
        query = (
            select(*key, func.sum(c.allocated + c.idle), func.count())
            .where(c.correction == true())
            .group_by(*key)
            .order_by(c.billing_month.desc(), of, c.team)
        )
        return [
            {
                "billing_month": r[0],
                "hours_of": str(r[1])[:7],
                "team": r[2],
                "currency": r[3],
                "total": int(r[4] or 0),
                "rows": int(r[5]),
            }
            for r in conn.execute(query)
        ]
