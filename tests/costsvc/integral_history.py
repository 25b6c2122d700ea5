"""Our exporter as a test history publishes it (tests/costsvc/test_integral_reads.py,
tests/costsvc/test_integral_upgrade.py): each node's exporter collected at every scrape, its
gauges and their integrals by the exporter's rule (exporter/integrals.py: an instant's reading
holds until the next collection, an ended series stays at its final total for 600 s, a restart
starts again at 0), in the form Prometheus stores scraped data; and what an ingested hour's
tables say per pod and per GPU."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import create_engine, select

from costsvc.db.models import Chargeback, GpuPresence, UsageFact
from costsvc.rules.energy import ENERGY
from exporter.integrals import KEEP, SHARE_LABEL, STARTED
from exporter.render.exposition import format_value
from tests.costsvc.history import H100
from tests.costsvc.scraped import Families, exporter_gpu

T0 = int(datetime(2026, 11, 20, 14, tzinfo=UTC).timestamp())  # an hour the cost model prices
HOURS = [datetime.fromtimestamp(T0 + 3600 * h, UTC) for h in range(2)]
BIG = 3 * 2**40  # mJ: an energy counter since boot of a GPU up for weeks (exact in a float64)
SHARE_S = "gpu_allocation_share_seconds_total"
UNMEASURED_S = "gpu_allocation_unmeasured_share_seconds_total"
MEASURED_S = "gpu_allocation_measured_share_seconds_total"  # (an exporter's before started)
COUNTERS = frozenset(
    {
        "gpu_device_seconds_total",
        SHARE_S,
        "gpu_allocation_memory_share_seconds_total",
        "gpu_allocation_busy_share_seconds_total",
        UNMEASURED_S,
        MEASURED_S,
        "gpu_container_sm_seconds_total",
    }
)


class Node:
    """One node's exporter, collected at each scrape: its gauges, and its integrals."""

    def __init__(self, history: Families, name: str, uuid: str, started: bool = True) -> None:
        self.history, self.name, self.uuid = history, name, uuid
        self.started = started  # its series tell their start (exporters before: not)
        self.counters = True  # it publishes its integrals (exporters before them: not)
        self.since: dict[tuple[str, str], int] = {}  # when each total started at 0
        self.totals: dict[tuple[str, str], float] = {}
        self.seen: dict[tuple[str, str], int] = {}
        self.ahead: dict[tuple[str, str], float] = {}
        self.last: int | None = None

    def labels(self, extra: str = "") -> str:
        return exporter_gpu(self.uuid, self.name, H100, extra)

    def scrape(
        self,
        t: int,
        up: bool,
        holders: dict[str, float],
        util: float | None,
        sm: dict[str, float] | None = None,
        restarted: bool = False,
        scraped: bool = True,
        energy: int | None = None,
    ) -> None:
        """A scrape at ``t`` of a collection at ``t``: the GPU ``up``, held by ``holders``
        (pod -> share) at ``util`` (0..1), the pods' SM use ``sm`` since the last one. Not
        ``scraped``: the collection happens, the scrape fails (``up`` 0, nothing else).
        ``energy``: the GPU's energy counter (mJ), read at the collection."""
        target = f'job="gpu-exporter",instance="{self.name}:9400"'
        self.history.add("up", target, 1 if scraped else 0, t)
        add = self.history.add if scraped else lambda *_: None
        if restarted:  # a new exporter process: every total from 0
            self.totals, self.seen, self.ahead, self.last, self.since = {}, {}, {}, None, {}
        held = 60 if self.last is not None else 0  # every collection 60 s after the last
        for key, rate in self.ahead.items():
            self.totals[key] += rate * held
        ahead: dict[tuple[str, str], float] = {}
        add("gpu_device_up", self.labels(), 1 if up else 0, t)
        if energy is not None:
            add(ENERGY, self.labels(',DCGM_FI_DRIVER_VERSION="580.95"'), energy, t)
        ahead[("gpu_device_seconds_total", self.labels(',state="up"'))] = 1.0 if up else 0.0
        ahead[("gpu_device_seconds_total", self.labels(',state="down"'))] = 0.0 if up else 1.0
        if up and util is not None:
            add("DCGM_FI_DEV_GPU_UTIL", self.labels(), round(util * 100), t)
        for pod, share in holders.items():
            lab = self.labels(f',namespace="ml",pod="{pod}",container="main",resource="r"')
            add("gpu_allocation_share", lab, share, t)
            add("gpu_allocation_memory_share", lab, share, t)
            on = share if up else 0.0
            measured = on if up and util is not None else 0.0
            ahead[("gpu_allocation_memory_share_seconds_total", lab)] = on
            if self.started:  # the share in the labels; the unmeasured part from its first
                ahead[(SHARE_S, f'{lab},{SHARE_LABEL}="{format_value(share)}"')] = on
                if on - measured or (UNMEASURED_S, lab) in self.totals:
                    ahead[(UNMEASURED_S, lab)] = on - measured
            else:  # an exporter before: the measured part, and the share only in the gauge
                ahead[(SHARE_S, lab)] = on
                ahead[(MEASURED_S, lab)] = measured
            busy = measured * round(util * 100) / 100 if util is not None else 0.0
            ahead[("gpu_allocation_busy_share_seconds_total", lab)] = busy
        for pod, used in (sm or {}).items():
            lab = self.labels(f',namespace="ml",pod="{pod}",container="main"')
            add("gpu_container_sm_utilization_ratio", lab, used, t)
            key = ("gpu_container_sm_seconds_total", lab)
            self.totals[key] = self.totals.get(key, 0.0) + used * held
            self.seen[key] = t
        for key in ahead:
            self.totals.setdefault(key, 0.0)
            self.seen[key] = t
        for key in [k for k, at in self.seen.items() if t - at > KEEP]:
            del self.totals[key], self.seen[key]
            self.since.pop(key, None)
        for (name, lab), total in self.totals.items() if self.counters else ():
            since = self.since.setdefault((name, lab), t)
            start = f'{lab},{STARTED}="{since}.000"'
            add(name, start if self.started else lab, repr(total), t)
        self.ahead, self.last = ahead, t


def pod_seconds(url: str) -> dict[tuple[str, datetime], int]:
    """Each pod's GPU-seconds held, per hour."""
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(UsageFact.pod, UsageFact.hour, UsageFact.share_us)).all()
    engine.dispose()
    return {(pod, utc(hour)): share // 10**6 for pod, hour, share in rows}


def utc(hour: datetime) -> datetime:
    return hour.replace(tzinfo=UTC) if hour.tzinfo is None else hour.astimezone(UTC)


def per_gpu(url: str, column: Any) -> dict[tuple[str, datetime], Any]:
    """Each GPU's ``column`` of gpu_hours, per hour."""
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(GpuPresence.gpu_uuid, GpuPresence.hour, column)).all()
    engine.dispose()
    return {(uuid, utc(hour)): value for uuid, hour, value in rows}


def pod_money(url: str) -> dict[tuple[str, datetime], Decimal]:
    """Each pod's allocated money, per hour."""
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(Chargeback.pod, Chargeback.hour, Chargeback.allocated)).all()
    engine.dispose()
    return {(pod, utc(hour)): Decimal(allocated) / 10**6 for pod, hour, allocated in rows if pod}
