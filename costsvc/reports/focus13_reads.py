"""What the FOCUS 1.3 export reads (costsvc/reports/focus13.py writes it): a billing month's
chargeback rows hour by hour, how each holder line held its GPUs (``usage_facts``: MIG
instance and slices, DRA claim, replica, fraction) and the policies its hour was priced under
(the cost model of the hour's last finished run; the defaults for an hour without one). One
connection, one read per hour: a month is read in as many small steps as it has hours."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, case, func, select

from costsvc.db.models import Chargeback, CostModelVersion, IngestRun, UsageFact
from costsvc.kit.csv_cells import CsvLines
from costsvc.kit.times import as_utc, parse_month
from costsvc.reports import queue_lines
from costsvc.reports.focus import ChargeRow
from costsvc.reports.focus13 import Held13, focus13_lines, focus13_row
from costsvc.reports.monthly import Source, _connection
from costsvc.reports.split import Held
from costsvc.rules.chargeback import KEY
from costsvc.rules.cost_model import Policies, parse

FactKey = tuple[Any, ...]  # cluster, node, namespace, pod, container, MIG profile


def _month_hours(conn: Connection, month: str) -> list[datetime]:
    c = Chargeback
    q = select(c.hour).where(c.billing_month == month).distinct().order_by(c.hour)
    return [r[0] for r in conn.execute(q)]


def _rows(conn: Connection, month: str, hour: datetime) -> list[ChargeRow]:
    c = Chargeback
    key = [getattr(c, k) for k in KEY]
    q = (
        select(
            *key,
            c.container,
            c.controller_kind,
            c.controller,
            c.correction,
            c.currency,
            c.allocated,
            c.used,
            c.waste,
            c.idle,
            c.gpu_hours,
            c.energy_mj,
            c.idle_energy_mj,
            c.co2e_mg,
            c.idle_co2e_mg,
            c.unavailable,
            c.unavailable_gpu_hours,
            c.unit_price,
            c.owner_from,
        )
        .where(c.billing_month == month, c.hour == hour)
        .order_by(*key, c.container, c.correction)
    )
    out = []
    n = len(KEY)
    for r in conn.execute(q):
        amounts = [int(v) for v in r[n + 5 : n + 16]]
        out.append(
            ChargeRow(
                hour=as_utc(hour),
                billing_month=month,
                **dict(zip(KEY, r[:n], strict=True)),
                container=r[n],
                controller_kind=r[n + 1],
                controller=r[n + 2],
                correction=bool(r[n + 3]),
                currency=r[n + 4],
                allocated=amounts[0],
                used=amounts[1],
                waste=amounts[2],
                idle=amounts[3],
                gpu_hours=amounts[4],
                energy_mj=amounts[5],
                idle_energy_mj=amounts[6],
                co2e_mg=amounts[7],
                idle_co2e_mg=amounts[8],
                unavailable=amounts[9],
                unavailable_gpu_hours=amounts[10],
                unit_price=None if r[n + 16] is None else int(r[n + 16]),
                owner_from=r[n + 17],
            )
        )
    return out


def _held(conn: Connection, hour: datetime) -> dict[FactKey, Held]:
    """How each (cluster, node, namespace, pod, container, MIG profile) held GPUs in ``hour``."""
    u = UsageFact
    fraction = case((u.memory_share_us != u.share_us, 1), else_=0)
    q = (
        select(
            u.cluster,
            u.node,
            u.namespace,
            u.pod,
            u.container,
            u.mig_profile,
            func.max(u.gi_id),
            func.max(u.compute_slices),
            func.max(u.memory_slices),
            func.max(u.claim),
            func.max(case((u.shared, 1), else_=0)),
            func.max(fraction),
            func.sum(u.share_us),
            func.sum(u.memory_share_us),
            func.sum(u.sm_us),
        )
        .where(u.hour == hour)
        .group_by(u.cluster, u.node, u.namespace, u.pod, u.container, u.mig_profile)
    )
    found = {}
    for r in conn.execute(q):
        found[tuple(r[:6])] = Held(
            mig=int(r[6]) >= 0,
            compute_slices=int(r[7] or 0),
            memory_slices=int(r[8] or 0),
            claim=r[9] or "",
            shared=bool(r[10]),
            fraction=bool(r[11]),
            share_us=int(r[12] or 0),
            memory_share_us=None if r[13] is None else int(r[13]),
            sm_us=int(r[14] or 0),
        )
    return found


class _Policies:
    """The policies each (cluster, hour) was priced under, read an hour at a time."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.documents: dict[int, Policies] = {}
        self.by_cluster: dict[str, Policies] = {}

    def load(self, hour: datetime) -> None:
        """Read ``hour``'s runs: what :meth:`__call__` answers until the next hour."""
        r = IngestRun
        q = (
            select(r.cluster, r.cost_model_id)
            .where(r.hour == hour, r.status == "done", r.cost_model_id.is_not(None))
            .order_by(r.id)
        )
        self.by_cluster = {}
        for cluster, model_id in self.conn.execute(q):  # the hour's last run wins
            self.by_cluster[cluster] = self._policies(model_id or 0)

    def _policies(self, model_id: int) -> Policies:
        if model_id not in self.documents:
            doc = self.conn.execute(
                select(CostModelVersion.document).where(CostModelVersion.id == model_id)
            ).scalar_one()
            self.documents[model_id] = parse(doc).policies
        return self.documents[model_id]

    def __call__(self, cluster: str, hour: datetime) -> Policies:
        return self.by_cluster.get(cluster, Policies())


def _hours(conn: Connection, month: str, policies: _Policies) -> Iterator[list[Held13]]:
    for hour in _month_hours(conn, month):
        held = _held(conn, hour)
        policies.load(hour)
        rows = _rows(conn, month, hour)
        yield [
            (
                row,
                held.get(
                    (row.cluster, row.node, row.namespace, row.pod, row.container, row.mig_profile)
                ),
            )
            for row in rows
        ]


def focus13_csv(engine: Source, month: str, team: str | None = None) -> Iterator[str]:
    """The month's FOCUS 1.3 CSV (costsvc/reports/focus13.py), piece by piece; ``team``: that
    team's allocated charges only (their ratios still of the whole origin)."""
    parse_month(month)
    with _connection(engine) as conn:
        policies = _Policies(conn)
        yield from focus13_lines(_hours(conn, month, policies), policies, team)
        out = CsvLines()  # the borrowing policy's lines: stand-alone charges, after the rows
        rows = queue_lines.queue_lines(conn, month, team)
        out.rows([focus13_row(queue_lines.focus13_cells(ln)) for ln in rows])
        if text := out.take():
            yield text
