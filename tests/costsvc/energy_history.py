"""Synthetic Prometheus history for the energy and carbon ground-truth tests
(test_energy_scenarios.py), loaded into its own real Prometheus. Every GPU is an H100 priced
2.50 per GPU-hour with ``idle_watts: 70``; carbon 400 gCO2e/kWh x PUE 1.2 = 480 g/kWh from
2026-10-01. The energy counter is dcgm-exporter's ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``
(mJ), scraped every 15 s. Hand-computed energy (1 kWh = 3.6e9 mJ):

hour 2026-11-20 10:00 (E1)
GPU-EW  whole GPU, 400 W all hour (1 440 000 000 mJ); energy/green holds it 10:00-10:30
        idle part 70 W x 3600 s = 252e6 by allocation: green 126e6, unheld 126e6 (idle);
        active 1188e6, all green's (the only activity) -> green 1 314 000 000, idle 126 000 000
GPU-EM  MIG 3g+2g+1g+1g (teams ma mb mc md), GR engine active 0.5, 1, 0.2, 0; 500 W
        (1 800 000 000): idle 252e6 by slices 108e6 72e6 36e6 36e6; active 1548e6 by the
        instances' ∫ share x activity dt
GPU-ET  time-sliced x4 (teams tw tx ty tz), SM 0.4, 0.2, 0.1, 0; 300 W (1 080 000 000):
        idle 252e6 = 63e6 each; active 828e6 by 4 : 2 : 1 : 0 = 473142857.14, 236571428.57,
        118285714.29 -> tx +1 -> tw 536 142 857, tx 299 571 429, ty 181 285 714, tz 63 000 000
GPU-ER  energy/r (team reset) all hour, 400 W; the driver reloads at 10:29:50, the counter
        restarts from 0: 10:29:45-10:29:50 is unknown -> 1 440e6 - 2e6 = 1 438 000 000, all reset's
GPU-EG  energy/g (team gap) all hour, 350 W (1 260 000 000); every series silent 10:19:45-10:40
        (the exporter down): the counter's rise across the gap, 350 W x 1215 s = 425 250 000, is
        measured but nobody's (idle); idle part 70 W x 2385 s = 166 950 000 and the active rest
        667 800 000 are gap's -> gap 834 750 000, idle 425 250 000

hour 2026-11-20 11:00 (E2): GPU-EW held all hour by green at 400 W -> green 1 440 000 000
hour 2026-10-31 23:00 (E0): the same, in October (a month that gets closed)
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy import create_engine, func, select

from costsvc.db.models import Chargeback, CostHour, GpuPresence
from costsvc.rules.cost_model import CostModel, parse

E0 = datetime(2026, 10, 31, 23, tzinfo=UTC)
E1 = datetime(2026, 11, 20, 10, tzinfo=UTC)
E2 = datetime(2026, 11, 20, 11, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"
CARBON = {"effective_from": "2026-10-01T00:00:00Z", "grams_per_kwh": "400", "pue": "1.2"}
PRICES = {
    "effective_from": "2026-10-01T00:00:00Z",
    "prices": [{"model": H100, "hourly": "2.50", "idle_watts": "70"}],
}


def energy_model(*carbon: dict[str, str], **policies: str) -> CostModel:
    return parse(
        {"policies": policies, "versions": [PRICES], "carbon": [CARBON, *carbon]},
        "energy model",
    )


MODEL = energy_model()


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


class _History:
    def __init__(self) -> None:
        self.fam: dict[str, list[str]] = {}

    def add(self, name: str, labels: dict[str, str], value: object, start: int, stop: int) -> None:
        text = _labels(labels)
        self.fam.setdefault(name, []).extend(
            f"{name}{{{text}}} {value} {t}" for t in range(start, stop, 15)
        )

    def counter(
        self, labels: dict[str, str], watts: int, start: int, stop: int, since: int, base: int = 0
    ) -> None:
        """An energy counter (mJ, exact integers) drawing ``watts`` since ``since``."""
        name = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
        text = _labels(labels)
        self.fam.setdefault(name, []).extend(
            f"{name}{{{text}}} {base + watts * 1000 * (t - since)} {t}"
            for t in range(start, stop, 15)
        )

    def text(self) -> str:
        out = []
        for name, lines in self.fam.items():
            out.append(f"# TYPE {name} gauge")
            out.extend(lines)
        out.append("# EOF")
        return "\n".join(out) + "\n"


def gpu(uuid: str) -> dict[str, str]:
    return {"gpu": "0", "UUID": uuid, "modelName": H100, "Hostname": "node-e"}


def _whole(
    h: _History, uuid: str, team: str, t: int, until: int, held: list[tuple[int, int]], watts: int
) -> None:
    """A whole GPU drawing ``watts`` over [t, until), held by energy/<team> in ``held``."""
    g = gpu(uuid)
    h.add("gpu_device_up", g, 1, t - 60, until)
    h.add("DCGM_FI_DEV_POWER_USAGE", g, watts, t - 60, until)
    h.counter(g, watts, t - 60, until + 15, since=t - 7200, base=5 * 10**9)
    holder = {**g, "namespace": "energy", "pod": team, "container": "main"}
    for start, stop in held:
        h.add("gpu_allocation_share", {**holder, "resource": "nvidia.com/gpu"}, 1, start, stop)
        h.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", g, 0.8, start, stop)
        labels = {"namespace": "energy", "pod": team, "label_team": team}
        h.add("kube_pod_labels", labels, 1, start, stop)


def history() -> str:
    h = _History()
    e0, e1, e2 = (int(x.timestamp()) for x in (E0, E1, E2))
    _whole(h, "GPU-EW", "green", e0, e0 + 3600, [(e0, e0 + 3600)], 400)
    _whole(h, "GPU-EW", "green", e1, e2 + 3600, [(e1, e1 + 1800), (e2, e2 + 3600)], 400)

    # MIG 3g+2g+1g+1g, every slice held, different activity
    m = gpu("GPU-EM")
    h.add("gpu_device_up", m, 1, e1 - 60, e1 + 3600)
    h.add("DCGM_FI_DEV_POWER_USAGE", m, 500, e1 - 60, e1 + 3600)
    h.counter(m, 500, e1 - 60, e1 + 3615, since=e1 - 60)
    layout = (("1", "3g.40gb", 3, 4, "ma", 0.5), ("2", "2g.20gb", 2, 2, "mb", 1))
    layout += (("3", "1g.10gb", 1, 1, "mc", 0.2), ("4", "1g.10gb", 1, 1, "md", 0))
    for gi, profile, compute, memory, team, active in layout:
        inst = {**m, "GPU_I_ID": gi, "GPU_I_PROFILE": profile}
        info = {**inst, "compute_slices": str(compute), "memory_slices": str(memory)}
        h.add("gpu_mig_instance_info", info, 1, e1, e1 + 3600)
        holder = {**inst, "namespace": "energy", "pod": team, "container": "main"}
        share = {**holder, "resource": f"nvidia.com/mig-{profile}"}
        h.add("gpu_allocation_share", share, compute / 7, e1 - 60, e1 + 3600)
        h.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", inst, active, e1 - 60, e1 + 3600)
        labels = {"namespace": "energy", "pod": team, "label_team": team}
        h.add("kube_pod_labels", labels, 1, e1, e1 + 3600)

    # time-sliced x4, different SM usage
    ts = gpu("GPU-ET")
    h.add("gpu_device_up", ts, 1, e1 - 60, e1 + 3600)
    h.add("DCGM_FI_DEV_POWER_USAGE", ts, 300, e1 - 60, e1 + 3600)
    h.counter(ts, 300, e1 - 60, e1 + 3615, since=e1 - 60)
    for team, sm in (("tw", 0.4), ("tx", 0.2), ("ty", 0.1), ("tz", 0)):
        holder = {**ts, "namespace": "energy", "pod": team, "container": "main"}
        share = {**holder, "resource": "nvidia.com/gpu.shared"}
        h.add("gpu_allocation_share", share, 0.25, e1 - 60, e1 + 3600)
        h.add("gpu_container_sm_utilization_ratio", holder, sm, e1 - 60, e1 + 3600)
        labels = {"namespace": "energy", "pod": team, "label_team": team}
        h.add("kube_pod_labels", labels, 1, e1, e1 + 3600)

    # a counter reset mid-hour: the driver reloads at 10:29:50
    r = gpu("GPU-ER")
    h.add("gpu_device_up", r, 1, e1 - 60, e1 + 3600)
    holder = {**r, "namespace": "energy", "pod": "r", "container": "main"}
    h.add("gpu_allocation_share", {**holder, "resource": "nvidia.com/gpu"}, 1, e1 - 60, e1 + 3600)
    h.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", r, 1, e1 - 60, e1 + 3600)
    h.counter(r, 400, e1 - 60, e1 + 1800, since=e1 - 60, base=7 * 10**12)
    h.counter(r, 400, e1 + 1800, e1 + 3615, since=e1 + 1790)
    h.add(
        "kube_pod_labels",
        {"namespace": "energy", "pod": "r", "label_team": "reset"},
        1,
        e1,
        e1 + 3600,
    )

    # a 20-minute gap: every series of the GPU silent 10:19:45 - 10:40
    g = gpu("GPU-EG")
    holder = {**g, "namespace": "energy", "pod": "g", "container": "main"}
    for start, stop in ((e1 - 60, e1 + 1200), (e1 + 2400, e1 + 3600)):
        h.add("gpu_device_up", g, 1, start, stop)
        h.add("gpu_allocation_share", {**holder, "resource": "nvidia.com/gpu"}, 1, start, stop)
        h.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", g, 0.9, start, stop)
        h.add("DCGM_FI_DEV_POWER_USAGE", g, 350, start, stop)
        h.counter(g, 350, start, stop + (15 if stop > e1 + 3000 else 0), since=e1, base=10**9)
    h.add(
        "kube_pod_labels",
        {"namespace": "energy", "pod": "g", "label_team": "gap"},
        1,
        e1,
        e1 + 3600,
    )
    return h.text()


def kwh_of(mj: int) -> Decimal:
    return Decimal(mj) / 3_600_000_000


def _utc(value: object) -> object:
    if isinstance(value, datetime):  # SQLite gives naive UTC, PostgreSQL aware
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value


def assert_energy_adds_up(url: str) -> int:
    """Σ lines' energy and CO2e = Σ GPUs' energy and CO2e, every hour and cluster; the rollup
    holds the same per owner."""
    engine = create_engine(url)
    c, g, o = Chargeback, GpuPresence, CostHour
    with engine.connect() as conn:
        lines = {
            (_utc(h), cl): (int(e), int(m))
            for h, cl, e, m in conn.execute(
                select(
                    c.hour,
                    c.cluster,
                    func.sum(c.energy_mj + c.idle_energy_mj),
                    func.sum(c.co2e_mg + c.idle_co2e_mg),
                ).group_by(c.hour, c.cluster)
            )
        }
        gpus = {
            (_utc(h), cl): (int(e), int(m))
            for h, cl, e, m in conn.execute(
                select(g.hour, g.cluster, func.sum(g.energy_mj), func.sum(g.co2e_mg)).group_by(
                    g.hour, g.cluster
                )
            )
        }
        owner = (c.hour, c.cluster, c.team, c.project, c.stage)
        amounts = (c.energy_mj, c.idle_energy_mj, c.co2e_mg, c.idle_co2e_mg)
        detail = {
            tuple(_utc(v) for v in r[:5]): tuple(int(v) for v in r[5:])
            for r in conn.execute(select(*owner, *(func.sum(a) for a in amounts)).group_by(*owner))
        }
        rollup_cols = (o.hour, o.cluster, o.team, o.project, o.stage)
        rollup_amounts = (o.energy_mj, o.idle_energy_mj, o.co2e_mg, o.idle_co2e_mg)
        rollup = {
            tuple(_utc(v) for v in r[:5]): tuple(int(v) for v in r[5:])
            for r in conn.execute(select(*rollup_cols, *rollup_amounts))
        }
    engine.dispose()
    nonzero = {k: v for k, v in gpus.items() if any(v)}
    assert {k: v for k, v in lines.items() if any(v)} == nonzero, (lines, gpus)
    assert rollup == detail
    return len(gpus)
