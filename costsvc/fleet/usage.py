"""The fleet's GPUs over a time range: hours each physical GPU was present, held (allocated),
idle and unavailable (reported lost), from the facts each ingested hour stored — the same
hours the money was computed from (docs/cost-model.md).

Per GPU: *present* is the time it was reported in the hours; *unavailable* the part of it
``gpu_device_up`` said 0 (never charged to a holder); *allocated* the time held, weighted by
the share held (a MIG instance of 3 of 7 compute slices held for an hour is 3/7 of a
GPU-hour; the ingest already cut lost time out of the holdings), at most present less
unavailable; *idle* the rest; *from the integrals* the part of present whose hours were read
from our exporter's integrals (the rest from the gauges: docs/cost-model.md, "Two rules, one per
source"). Units: micro-seconds (GPU-micro-seconds for held time).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, TypeVar

from sqlalchemy import Connection, case, func, select

from costsvc.db.models import GpuPresence, UsageFact
from costsvc.rules.attribution import INTEGRALS

HOUR_US = 3_600_000_000
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class GpuUse:
    cluster: str
    node: str
    gpu_uuid: str
    model: str
    present_us: int
    held_us: int  # Σ share x time of its holdings (may exceed present on bad data: capped)
    lost_us: int
    integral_us: int = 0  # of present, the hours read from the integrals

    @property
    def unavailable_us(self) -> int:
        return min(self.lost_us, self.present_us)

    @property
    def allocated_us(self) -> int:
        return min(self.held_us, self.present_us - self.unavailable_us)

    @property
    def idle_us(self) -> int:
        return self.present_us - self.unavailable_us - self.allocated_us

    @property
    def idle_ratio(self) -> Decimal:
        return Decimal(self.idle_us) / self.present_us if self.present_us else Decimal(0)


@dataclass(slots=True)
class UseTotals:
    """Several GPUs' hours added up."""

    gpus: int = 0
    present_us: int = 0
    allocated_us: int = 0
    idle_us: int = 0
    unavailable_us: int = 0
    integral_us: int = 0

    def add(self, g: GpuUse) -> None:
        self.gpus += 1
        self.present_us += g.present_us
        self.allocated_us += g.allocated_us
        self.idle_us += g.idle_us
        self.unavailable_us += g.unavailable_us
        self.integral_us += g.integral_us


def gpu_columns() -> tuple[Any, Any, Any, Any]:
    """A GPU's identity in ``gpu_hours``: cluster, node, UUID and model, in that order."""
    p = GpuPresence
    return (p.cluster, p.node, p.gpu_uuid, p.model)


def gpu_use(conn: Connection, start: datetime, end: datetime) -> list[GpuUse]:
    """Every GPU present in [start, end), by cluster, node and UUID."""
    p, u = GpuPresence, UsageFact
    gpu = gpu_columns()
    present = (
        select(
            *gpu,
            func.sum(p.present_us),
            func.sum(p.lost_us),
            func.sum(case((p.reads == INTEGRALS, p.present_us), else_=0)),
        )
        .where(p.hour >= start, p.hour < end)
        .group_by(*gpu)
        .order_by(*gpu)
    )
    held_query = (
        select(u.cluster, u.gpu_uuid, func.sum(u.share_us))
        .where(u.hour >= start, u.hour < end)
        .group_by(u.cluster, u.gpu_uuid)
    )
    held = {(c, g): int(s or 0) for c, g, s in conn.execute(held_query)}
    rows = list(conn.execute(present))
    # a GPU that moved node or model within the range: its holdings go with its first row
    seen: set[tuple[str, str]] = set()
    out = []
    for cluster, node, uuid, model, present_us, lost_us, integral_us in rows:
        key = (cluster, uuid)
        mine = 0 if key in seen else held.get(key, 0)
        seen.add(key)
        out.append(
            GpuUse(
                cluster,
                node,
                uuid,
                model,
                int(present_us),
                mine,
                int(lost_us or 0),
                int(integral_us or 0),
            )
        )
    return out


def totals_by(gpus: Iterable[GpuUse], key: Callable[[GpuUse], K]) -> list[tuple[K, UseTotals]]:
    """The GPUs' hours summed per ``key`` (e.g. the model, or (cluster, node)), by key."""
    found: dict[K, UseTotals] = {}
    for g in gpus:
        found.setdefault(key(g), UseTotals()).add(g)
    return sorted(found.items(), key=lambda kv: str(kv[0]))


def idlest(gpus: Iterable[GpuUse], n: int = 10) -> list[GpuUse]:
    """The ``n`` GPUs with the most idle time (ties: the larger idle share, then by name)."""
    return sorted(gpus, key=lambda g: (-g.idle_us, -g.idle_ratio, g.cluster, g.gpu_uuid))[:n]


def hours(us: int) -> str:
    """Micro-seconds as hours with one decimal (half to even): 5_400_000_000 -> '1.5'."""
    return f"{Decimal(us) / HOUR_US:.1f}"
