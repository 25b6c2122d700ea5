"""Synthetic history for issue 14's ground truth: money at sample resolution (our exporter's
series), loaded into its own real Prometheus (the ``prometheus14`` fixture, conftest.py).
Prices 2.50 per H100-hour; every figure below is computed by hand.

hour 2026-11-13 10:00 UTC (test_sample_resolution.py)
GPU-S1  ml/leaver holds it 10:00-10:30 at 80 %, then nobody holds it at 0 %
        -> allocated 1.250000, used 1.000000 (80 %, not the hour's 40 %), waste 0.250000;
           idle 1.250000 and 0.5 idle GPU-hours on node-1
GPU-S2  seq/first holds it 10:00-10:30 at 100 %, seq/second 10:30-11:00 at 0 %
        -> first: used 1.250000, waste 0; second: used 0, waste 1.250000 (not 50 % each)
GPU-S3  MIG 3g.40gb (GI 1; 3 of 7 compute, 4 of 8 memory slices; other slices unmade):
        mig/early holds it 10:00-10:30 at 0.9 (DCGM_FI_PROF_GR_ENGINE_ACTIVE), mig/late
        10:30-11:00 at 0.1. compute basis: allocated round(2.5 x 3/7) = 1.071429, split
        535715 / 535714 (ties: the earlier holder); used round(535715 x 0.9) = 482144 (half
        to even), round(535714 x 0.1) = 53571; idle 1.428571.
        memory basis: each holds 0.25 GPU-hours at 2.50 -> 0.625000 each, unit price 2.50
GPU-S4  time-sliced x 4: ts/a holds a replica (0.25) 10:00-10:30 using 20 % of the GPU's SMs,
        ts/b one 10:30-11:00 using none -> allocated 0.312500 each; a: busy min(450 share-s,
        360 SM-s) -> used 0.250000, waste 0.062500; b: used 0, waste 0.312500; idle 1.875000
GPU-S5  lost/p holds it all hour at 50 %; gpu_device_up 0 from 10:20 to 10:40 (no utilisation
        then) -> allocated 2.5 x 40/60 = 1.666667, used round(1666667 x 0.5) = 833334,
        waste 833333; the lost 20 minutes: idle 0.833333, all of it unavailable, 0.333333
        unavailable GPU-hours on node-5
fleet = 5 x 2.50 = 12.500000
"""

from __future__ import annotations

from datetime import UTC, datetime

from tests.costsvc.history import H100, series

SAMPLE_HOUR = datetime(2026, 11, 13, 10, tzinfo=UTC)
TS = int(SAMPLE_HOUR.timestamp())


def gpu(uuid: str, node: str) -> dict[str, str]:
    return {"gpu": "0", "UUID": uuid, "modelName": H100, "Hostname": node}


class History:
    def __init__(self) -> None:
        self.fam: dict[str, list[str]] = {}

    def add(self, name: str, labels: dict[str, str], value: float, start: int, stop: int) -> None:
        self.fam.setdefault(name, []).extend(series(name, labels, value, start, stop))

    def text(self) -> str:
        out = []
        for name, lines in self.fam.items():
            out.append(f"# TYPE {name} gauge")
            out.extend(lines)
        out.append("# EOF")
        return "\n".join(out) + "\n"


def holder(labels: dict[str, str], ns: str, pod: str, resource: str) -> dict[str, str]:
    return {**labels, "namespace": ns, "pod": pod, "container": "main", "resource": resource}


def sample_resolution(h: History) -> None:
    s, half, e = TS, TS + 1800, TS + 3600
    for i in range(1, 6):
        h.add("gpu_device_up", gpu(f"GPU-S{i}", f"node-{i}"), 1, s - 60, e)
    g1 = gpu("GPU-S1", "node-1")
    h.add("gpu_allocation_share", holder(g1, "ml", "leaver", "nvidia.com/gpu"), 1, s, half)
    h.add("DCGM_FI_DEV_GPU_UTIL", g1, 80, s, half)
    h.add("DCGM_FI_DEV_GPU_UTIL", g1, 0, half, e)

    g2 = gpu("GPU-S2", "node-2")
    h.add("gpu_allocation_share", holder(g2, "seq", "first", "nvidia.com/gpu"), 1, s, half)
    h.add("gpu_allocation_share", holder(g2, "seq", "second", "nvidia.com/gpu"), 1, half, e)
    h.add("DCGM_FI_DEV_GPU_UTIL", g2, 100, s, half)
    h.add("DCGM_FI_DEV_GPU_UTIL", g2, 0, half, e)

    inst = {**gpu("GPU-S3", "node-3"), "GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb"}
    h.add("gpu_mig_instance_info", {**inst, "compute_slices": "3", "memory_slices": "4"}, 1, s, e)
    mig = "nvidia.com/mig-3g.40gb"
    h.add("gpu_allocation_share", holder(inst, "mig", "early", mig), 3 / 7, s, half)
    h.add("gpu_allocation_share", holder(inst, "mig", "late", mig), 3 / 7, half, e)
    h.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", inst, 0.9, s, half)
    h.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", inst, 0.1, half, e)

    g4 = gpu("GPU-S4", "node-4")
    shared = "nvidia.com/gpu.shared"
    h.add("gpu_allocation_share", holder(g4, "ts", "a", shared), 0.25, s, half)
    h.add("gpu_allocation_share", holder(g4, "ts", "b", shared), 0.25, half, e)
    a = {**g4, "namespace": "ts", "pod": "a", "container": "main"}
    h.add("gpu_container_sm_utilization_ratio", a, 0.2, s, half)
    h.add("DCGM_FI_DEV_GPU_UTIL", g4, 20, s, half)
    h.add("DCGM_FI_DEV_GPU_UTIL", g4, 0, half, e)

    g5 = gpu("GPU-S5", "node-5")
    lost, back = s + 1200, s + 2400
    h.fam["gpu_device_up"] = [x for x in h.fam["gpu_device_up"] if "GPU-S5" not in x]
    h.add("gpu_device_up", g5, 1, s - 60, lost)
    h.add("gpu_device_up", g5, 0, lost, back)
    h.add("gpu_device_up", g5, 1, back, e)
    h.add("gpu_allocation_share", holder(g5, "lost", "p", "nvidia.com/gpu"), 1, s, e)
    h.add("DCGM_FI_DEV_GPU_UTIL", g5, 50, s, lost)
    h.add("DCGM_FI_DEV_GPU_UTIL", g5, 50, back, e)

    for ns, pod in (
        ("ml", "leaver"),
        ("seq", "first"),
        ("seq", "second"),
        ("mig", "early"),
        ("mig", "late"),
        ("ts", "a"),
        ("ts", "b"),
        ("lost", "p"),
    ):
        h.add("kube_pod_labels", {"namespace": ns, "pod": pod, "label_team": pod}, 1, s, e)


def history14() -> str:
    h = History()
    sample_resolution(h)
    return h.text()
