"""The fleet's lost GPUs over a time range, from the facts each ingested hour stored: every GPU
with unavailable time (``gpu_device_up`` 0: docs/cost-model.md), its node and model, the first
and the last hour it was reported lost and how long in all (micro-seconds)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, select

from costsvc.db.models import GpuPresence
from costsvc.fleet.usage import gpu_columns
from costsvc.kit.times import as_utc


@dataclass(frozen=True, slots=True)
class LostGpu:
    cluster: str
    node: str
    gpu_uuid: str
    model: str
    since: datetime  # the first hour in the range with lost time
    last: datetime  # the last such hour
    lost_us: int


def lost_gpus(conn: Connection, start: datetime, end: datetime) -> list[LostGpu]:
    """Every GPU reported lost in [start, end), the most recently lost first."""
    p, gpu = GpuPresence, gpu_columns()
    q = (
        select(*gpu, func.min(p.hour), func.max(p.hour), func.sum(p.lost_us))
        .where(p.hour >= start, p.hour < end, p.lost_us > 0)
        .group_by(*gpu)
    )
    found = [
        LostGpu(c, n, g, m, as_utc(lo), as_utc(hi), int(us or 0))
        for c, n, g, m, lo, hi, us in conn.execute(q)
    ]
    return sorted(found, key=lambda x: (-x.last.timestamp(), x.cluster, x.gpu_uuid))
