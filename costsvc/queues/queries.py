"""Reads of ``queue_hours``: quota against use and the borrowing money summed over any span
and grouping (``/v1/queues``, the team page). Sums of whole resource-seconds and micro-units;
each figure's value in money at the price in force of its hour is worked out per price, so a
price change within the span counts each hour at its own (costsvc/rules/queues.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, func, select

from costsvc.db.models import QueueHourRow
from costsvc.kit.money import money, round_micro
from costsvc.kit.sql_times import bucket

# what ``group_by`` and the filters may name, in the order the API documents them
DIMENSIONS = ("cluster", "team", "cohort", "cluster_queue", "flavor", "resource")
DEFAULT_GROUP_BY = ("cluster_queue", "flavor", "resource")
FIGURES = ("nominal", "used", "within", "borrowed", "lent", "idle")  # resource-seconds
SECONDS_PER_HOUR = 3600


def queue_totals(
    conn: Connection,
    start: datetime,
    end: datetime,
    group_by: Sequence[str],
    filters: Mapping[str, Sequence[str]],
    step: str | None = None,
) -> list[dict[str, Any]]:
    """One row per group and currency (and ``step``: hour, day, week, month) over [start,
    end): each figure in resource-hours and its value at the prices in force, the borrowing
    charges and credits, and their net."""
    t = QueueHourRow
    dims: list[Any] = [getattr(t, g) for g in group_by]
    if step:
        dims.insert(0, bucket(conn, step, t.hour).label("start"))
    seconds = [func.sum(getattr(t, f"{f}_s")) for f in FIGURES]
    query = (
        select(*dims, t.currency, t.price, *seconds, func.sum(t.charge), func.sum(t.credit))
        .where(t.hour >= start, t.hour < end)
        .group_by(*dims, t.currency, t.price)
    )
    for name, values in filters.items():
        query = query.where(getattr(t, name).in_(values))
    sums: dict[tuple[Any, ...], dict[str, int]] = {}
    for r in conn.execute(query):
        n = len(dims)
        key = (*r[:n], r[n])
        price = r[n + 1]
        found = sums.setdefault(key, dict.fromkeys((*FIGURES, *_money_names()), 0))
        for i, f in enumerate(FIGURES):
            s = int(r[n + 2 + i] or 0)
            found[f] += s
            if price is not None:
                found[f"{f}_cost"] += round_micro(Decimal(s) * int(price) / SECONDS_PER_HOUR)
        found["charge"] += int(r[n + 8] or 0)
        found["credit"] += int(r[n + 9] or 0)
    names = ["start", *group_by] if step else list(group_by)
    return [_row(names, key, found) for key, found in sorted(sums.items(), key=str)]


def _money_names() -> tuple[str, ...]:
    return (*(f"{f}_cost" for f in FIGURES), "charge", "credit")


def _row(names: Sequence[str], key: tuple[Any, ...], found: dict[str, int]) -> dict[str, Any]:
    group = dict(zip(names, key[:-1], strict=True))
    out: dict[str, Any] = {"start": group.pop("start", None), "group": group}
    out["currency"] = key[-1]
    for f in FIGURES:
        out[f"{f}_hours"] = money(round_micro(Decimal(found[f]) * 1_000_000 / SECONDS_PER_HOUR))
        out[f"{f}_cost"] = money(found[f"{f}_cost"])
    out["borrowing_charge"] = money(found["charge"])
    out["lending_credit"] = money(found["credit"])
    out["borrowing_net"] = money(found["charge"] - found["credit"])
    return out
