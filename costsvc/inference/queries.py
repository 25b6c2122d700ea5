"""Reads of ``inference_hours``: sums over any grouping and step (``/v1/inference``, its CSV,
OpenCost's ``/inferenceCost/total``) and the figures ``/metrics`` publishes per model.

Rates are never summed or averaged: every answer sums the rows' tokens and money and the
rates are worked out from the sums (:class:`costsvc.inference.split.Totals`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, select

from costsvc.db.models import InferenceHour
from costsvc.inference.split import ADDITIVE, Totals
from costsvc.kit.sql_times import bucket

# what ``group_by`` and the filters may name, in the order the API documents them; and the
# grouping when none is asked (costsvc/rules/chargeback.py parse_group_by reads it)
DIMENSIONS = ("model", "team", "project", "stage", "namespace", "pod", "cluster", "engine", "role")
DEFAULT_GROUP_BY = ("model",)
WEEK = timedelta(days=7)


@dataclass(slots=True)
class Group:
    start: str | None  # the step's first hour (ISO), None without a step
    group: dict[str, str]
    currency: str
    totals: Totals


def served_totals(
    conn: Connection,
    start: datetime,
    end: datetime,
    group_by: Sequence[str],
    step: str | None,
    filters: Mapping[str, Sequence[str]],
) -> list[Group]:
    """Σ of the rows of the hours in [start, end) per group (and ``step`` bucket: hour, day,
    month), filtered (each dimension: any of its values), sorted."""
    t = InferenceHour
    keys: list[Any] = [getattr(t, d) for d in group_by]
    if step:
        keys.insert(0, bucket(conn, step, t.hour).label("start"))
    keys += [t.currency, t.rule]
    q = select(*keys, *(func.sum(getattr(t, a)) for a in ADDITIVE)).where(
        t.hour >= start, t.hour < end
    )
    for name, values in filters.items():
        q = q.where(getattr(t, name).in_(list(values)))
    q = q.group_by(*keys)
    found: dict[tuple[Any, ...], Group] = {}
    lead = 1 if step else 0
    n = lead + len(group_by)
    for r in conn.execute(q):
        head = (*r[:n], r[n])
        totals = Totals(rules={r[n + 1]})
        for a, v in zip(ADDITIVE, r[n + 2 :], strict=True):
            setattr(totals, a, int(v or 0))
        g = found.get(head)
        if g is None:
            group = {d: r[lead + i] for i, d in enumerate(group_by)}
            found[head] = Group(r[0] if step else None, group, r[n], totals)
        else:
            g.totals.add(totals)
    return [found[k] for k in sorted(found, key=lambda k: tuple(str(v) for v in k))]


def answer_rows(groups: Iterable[Group]) -> list[dict[str, Any]]:
    """``/v1/inference``'s rows from :func:`served_totals`' groups: each group's figures as the
    answer writes them (the API and the pages alike)."""
    return [
        {"start": g.start, "group": g.group, "currency": g.currency, **g.totals.figures()}
        for g in groups
    ]


@dataclass(frozen=True, slots=True)
class ModelFigures:
    """One model of a team and namespace in a cluster, for ``/metrics``: the last ingested
    hour's totals, and the last 7 days' and the 7 days before's (the week-over-week alert)."""

    cluster: str
    team: str
    namespace: str
    model: str
    currency: str
    hour: Totals
    week: Totals
    previous_week: Totals


def model_figures(conn: Connection, last_hour: datetime) -> list[ModelFigures]:
    """Per (cluster, team, namespace, model): the hour starting ``last_hour``, the 7 days
    ending with it, and the 7 days before those."""
    end = last_hour + timedelta(hours=1)
    dims = ["cluster", "team", "namespace", "model"]
    spans = {
        "hour": (last_hour, end),
        "week": (end - WEEK, end),
        "previous_week": (end - 2 * WEEK, end - WEEK),
    }
    by_key: dict[tuple[str, str, str, str, str], dict[str, Totals]] = {}
    for name, (lo, hi) in spans.items():
        for g in served_totals(conn, lo, hi, dims, None, {}):
            cluster, team, namespace, model = (g.group[d] for d in dims)
            key = (cluster, team, namespace, model, g.currency)
            by_key.setdefault(key, {})[name] = g.totals
    return [
        ModelFigures(
            *key,
            hour=spans_.get("hour", Totals()),
            week=spans_.get("week", Totals()),
            previous_week=spans_.get("previous_week", Totals()),
        )
        for key, spans_ in sorted(by_key.items())
    ]
