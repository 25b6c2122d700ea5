"""The rows OpenCost's ``/allocation`` is made of (costsvc/opencost/routes.py): the chargeback
summed per allocation set and per the columns asked for, which of them held a shared GPU, and
the pod and namespace label sets in force over the window; and ``/assets``' (:func:`gpu_rows`):
each GPU of the fleet over the window, with what the chargeback charged for it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, DateTime, and_, func, literal_column, select, true, type_coerce

from costsvc.costs.queries import source
from costsvc.db.models import Chargeback, GpuPresence, NamespaceLabels, PodLabels, UsageFact
from costsvc.kit.sql_times import step_index
from costsvc.kit.times import as_utc
from costsvc.labels.history import in_force_during
from costsvc.opencost.assets import GpuRow
from costsvc.opencost.podlabels import Labelled
from costsvc.opencost.shape import Row


def allocation_rows(
    conn: Connection,
    start: datetime,
    end: datetime,
    step: timedelta,
    columns: set[str],
    team: str | None,
) -> tuple[list[Row], set[str]]:
    """The chargeback of the hours in [start, end) summed per allocation set (``step`` long
    from ``start``) and per combination of ``columns`` (with cluster and team always), only
    ``team``'s rows when given; and the currencies met."""
    dims = sorted(columns | {"cluster", "team"})
    t = source(set(dims))
    one_set = step >= end - start
    idx = literal_column("0") if one_set else step_index(conn, t.hour, start, step)
    cols = [getattr(t, d) for d in dims]
    money_sums = (t.allocated, t.used, t.waste, t.idle, t.gpu_hours)  # Row's, in its order
    q = select(
        idx,
        *cols,
        t.currency,
        *(func.sum(m) for m in money_sums),
        type_coerce(func.min(t.hour), DateTime(timezone=True)),
        type_coerce(func.max(t.hour), DateTime(timezone=True)),
    ).where(t.hour >= start, t.hour < end)
    if team is not None:
        q = q.where(t.team == team)
    q = q.group_by(*([] if one_set else [idx]), *cols, t.currency)
    shared = _shared_keys(conn, start, end, step, dims, team)
    rows, currencies = [], set()
    n = len(dims)
    for r in conn.execute(q):
        key = (int(r[0]), *r[1 : n + 1])
        currencies.add(r[n + 1])
        allocated, used, waste, idle, gpu_hours = (int(v or 0) for v in r[n + 2 : n + 7])
        rows.append(
            Row(
                int(r[0]),
                dict(zip(dims, r[1 : n + 1], strict=True)),
                allocated,
                used,
                waste,
                idle,
                gpu_hours,
                first=as_utc(r[n + 7]),
                last=as_utc(r[n + 8]),
                shared=key in shared,
            )
        )
    return rows, currencies


def _shared_keys(
    conn: Connection,
    start: datetime,
    end: datetime,
    step: timedelta,
    dims: list[str],
    team: str | None,
) -> set[tuple[Any, ...]]:
    """(set, columns...) of the lines with a holding on a shared (time-sliced, MPS) GPU: the
    few shared holdings of the window, joined to their lines (never a probe per line)."""
    c, u = Chargeback, UsageFact
    held = (
        select(u.hour, u.cluster, u.namespace, u.pod)
        .where(u.shared == true(), u.hour >= start, u.hour < end)
        .distinct()
        .subquery()
    )
    on = and_(
        held.c.hour == c.hour,
        held.c.cluster == c.cluster,
        held.c.namespace == c.namespace,
        held.c.pod == c.pod,
    )
    idx = step_index(conn, c.hour, start, step)
    cols = [getattr(c, d) for d in dims]
    q = select(idx, *cols).select_from(c).join(held, on).where(c.hour >= start, c.hour < end)
    if team is not None:
        q = q.where(c.team == team)
    return {(int(r[0]), *r[1:]) for r in conn.execute(q.distinct())}


def label_history(conn: Connection, start: datetime, end: datetime) -> list[Labelled]:
    """Pod and namespace label sets in force at some time in [start, end)."""
    p, n = PodLabels, NamespaceLabels
    pods = select(p.cluster, p.namespace, p.name, p.labels, p.valid_from, p.valid_to).where(
        in_force_during(p, start, end)
    )
    spaces = select(n.cluster, n.name, n.labels, n.valid_from, n.valid_to).where(
        in_force_during(n, start, end)
    )

    def aware(t: datetime | None) -> datetime | None:
        return None if t is None else as_utc(t)

    out = [Labelled(r[0], r[1], r[2], r[3], as_utc(r[4]), aware(r[5])) for r in conn.execute(pods)]
    out += [
        Labelled(r[0], r[1], None, r[2], as_utc(r[3]), aware(r[4])) for r in conn.execute(spaces)
    ]
    return out


def gpu_rows(conn: Connection, start: datetime, end: datetime) -> list[GpuRow]:
    """Each GPU present in [start, end): its node, model, time present and what it was charged
    (``gpu_hours.cost``: its price x the time present, what the chargeback splits among its
    holders and idle capacity), and its first and last hour."""
    g = GpuPresence
    q = (
        select(
            g.cluster,
            g.node,
            g.gpu_uuid,
            func.max(g.model),
            func.sum(g.present_us),
            func.sum(g.cost),
            type_coerce(func.min(g.hour), DateTime(timezone=True)),
            type_coerce(func.max(g.hour), DateTime(timezone=True)),
        )
        .where(g.hour >= start, g.hour < end)
        .group_by(g.cluster, g.node, g.gpu_uuid)
    )
    return [
        GpuRow(
            r[0], r[1], r[2], r[3] or "", int(r[4] or 0), int(r[5] or 0), as_utc(r[6]), as_utc(r[7])
        )
        for r in conn.execute(q)
    ]
