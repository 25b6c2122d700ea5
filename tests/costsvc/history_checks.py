"""Checks over a database an ingest wrote (tests/costsvc/history.py's hours, or any): money per
team, every hour adding up (attributed + idle = the fleet's cost, the rollups Σ of the
chargeback), the rollups recomputed from the hourly tables, every row of the money and fact
tables."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import create_engine, func, select

from costsvc.db.models import (
    Chargeback,
    CostDay,
    CostHour,
    CostMonth,
    CostPodDay,
    GpuPresence,
    UsageFact,
)
from tests.costsvc.energy_history import assert_energy_adds_up


def by_team(url: str, cluster: str | None = None) -> dict[str, tuple[int, int, int, int]]:
    """(allocated, used, waste, idle) per team, summed over the database's hours."""
    engine = create_engine(url)
    with engine.connect() as conn:
        c = Chargeback
        query = select(
            c.team, func.sum(c.allocated), func.sum(c.used), func.sum(c.waste), func.sum(c.idle)
        ).group_by(c.team)
        if cluster is not None:
            query = query.where(c.cluster == cluster)
        rows = conn.execute(query).all()
    engine.dispose()
    return {r[0]: (int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows}


def assert_every_hour_adds_up(url: str) -> int:
    """Σ attributed + idle = fleet cost (Σ gpu_hours.cost) for every hour and cluster in the
    database, to the micro-unit; returns how many (hour, cluster) pairs were checked."""
    engine = create_engine(url)
    with engine.connect() as conn:
        c, g = Chargeback, GpuPresence
        charged = {
            (as_utc(h), cl): int(v)
            for h, cl, v in conn.execute(
                select(c.hour, c.cluster, func.sum(c.allocated + c.idle)).group_by(
                    c.hour, c.cluster
                )
            )
        }
        fleet = {
            (as_utc(h), cl): int(v)
            for h, cl, v in conn.execute(
                select(g.hour, g.cluster, func.sum(g.cost)).group_by(g.hour, g.cluster)
            )
        }
        # the per-owner rollup the API reads holds the same money, owner by owner
        owner = (c.hour, c.cluster, c.team, c.project, c.stage, c.currency)
        money = (c.allocated, c.used, c.waste, c.idle, c.gpu_hours)
        detail = {
            tuple(as_utc(v) for v in r[:6]): tuple(int(v) for v in r[6:])
            for r in conn.execute(select(*owner, *(func.sum(m) for m in money)).group_by(*owner))
        }
        o = CostHour
        rollup = {
            tuple(as_utc(v) for v in r[:6]): tuple(int(v) for v in r[6:])
            for r in conn.execute(
                select(
                    o.hour,
                    o.cluster,
                    o.team,
                    o.project,
                    o.stage,
                    o.currency,
                    o.allocated,
                    o.used,
                    o.waste,
                    o.idle,
                    o.gpu_hours,
                )
            )
        }
        # and the daily rollup is Σ of its UTC day's hours, owner by owner, every amount
        days = rollup_days(conn)
        pod_days = rollup_pod_days(conn)
        months = rollup_months(conn)
    engine.dispose()
    assert charged == {k: v for k, v in fleet.items() if v}, (charged, fleet)
    assert rollup == detail
    assert days[0] == days[1]
    assert pod_days[0] == pod_days[1]
    assert months[0] == months[1]
    assert_energy_adds_up(url)  # and the same for energy and CO2e
    return len(fleet)


def rollup_days(conn: Any) -> tuple[dict[tuple[Any, ...], list[int]], dict[Any, list[int]]]:
    """(count and Σ of the chargeback per UTC day, cluster, owner and currency, computed
    here; cost_days as stored)."""
    return _by_day(conn, CostDay, ("cluster", "team", "project", "stage", "currency"))


def rollup_pod_days(conn: Any) -> tuple[dict[tuple[Any, ...], list[int]], dict[Any, list[int]]]:
    """(count and Σ of the chargeback per UTC day, cluster, owner, namespace, pod and
    currency, computed here; cost_pod_days as stored)."""
    key = ("cluster", "team", "project", "stage", "namespace", "pod", "currency")
    return _by_day(conn, CostPodDay, key)


def rollup_months(conn: Any) -> tuple[dict[tuple[Any, ...], list[int]], dict[Any, list[int]]]:
    """(count and Σ of the chargeback per UTC month, cluster, owner and currency, computed
    here; cost_months as stored)."""
    key = ("cluster", "team", "project", "stage", "currency")
    return _by_day(conn, CostMonth, key, month=True)


def _by_day(
    conn: Any, table: Any, key: tuple[str, ...], month: bool = False
) -> tuple[dict[tuple[Any, ...], list[int]], dict[Any, list[int]]]:
    c, n = Chargeback, len(key)
    period = table.month if month else table.day
    want: dict[tuple[Any, ...], list[int]] = {}
    for r in conn.execute(select(c.hour, *(getattr(c, k) for k in key), *_amounts(c))):
        h = as_utc(r[0])
        at = datetime(h.year, h.month, 1 if month else h.day, tzinfo=UTC)
        k = (at, *r[1 : n + 1])
        got = want.setdefault(k, [0] * (len(r) - n))  # lines, then the amounts
        got[0] += 1
        for i, v in enumerate(r[n + 1 :]):
            got[i + 1] += int(v)
    stored = {
        (as_utc(r[0]), *r[1 : n + 1]): [int(v) for v in r[n + 1 :]]
        for r in conn.execute(
            select(period, *(getattr(table, k) for k in key), table.lines, *_amounts(table))
        )
    }
    return want, stored


def _amounts(t: Any) -> list[Any]:
    from costsvc.rules.chargeback import AMOUNTS

    return [getattr(t, a) for a in AMOUNTS]


def as_utc(value: Any) -> Any:
    if isinstance(value, datetime):  # SQLite gives naive UTC, PostgreSQL aware
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value


def tables(url: str) -> list[Any]:
    """Every row of the money and fact tables, without ids, in a stable order (a GPU-hour
    without the rule it was read by, ``reads``: read by either rule, its figures compare)."""
    engine = create_engine(url)
    with engine.connect() as conn:
        out = [
            sorted(
                tuple(as_utc(v) for v in tuple(r))
                for r in conn.execute(
                    select(*(c for c in t.__table__.columns if c.name not in ("id", "reads")))
                ).all()
            )
            for t in (Chargeback, UsageFact, GpuPresence)
        ]
    engine.dispose()
    return out
