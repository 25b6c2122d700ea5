"""History of 2026-11-16 10:00 UTC for the DRA and fractional-GPU ground truth
(test_fractional.py), added to history.py's Prometheus. H100 at 2.50 per GPU-hour, every
holding the whole hour, pod labels give the teams. Hand-computed money:

GPU-DRA1  dra/solo holds it through claim dra/solo (share 1)            -> solo 2.500000
GPU-DRA3  claim dra/trio used by dra/s0, s1, s2 (share 1/3 each, as the exporter splits it;
          SM 0.6, 0.3, 0.0 of the GPU)
          equal: 2.50 / 3 = 833333.33 each; the spare micro-unit to the first in canonical
          order -> s0 833334, s1 833333, s2 833333
          usage: 2.50 x 2:1:0 -> s0 1666667, s1 833333, s2 0
GPU-HAMI  HAMi: hami/h30 30 % cores + 4000 MiB, hami/h50 50 % + 8000 MiB of 20000 MiB
          compute basis: h30 0.750000, h50 1.250000, idle 0.500000
          memory basis:  h30 0.500000 (0.2), h50 1.000000 (0.4), idle 1.000000
          max basis:     as compute (each holding's compute share is the larger)
GPU-OVER  HAMi over-subscribed: hami/o1 and hami/o2 each 60 % cores + 6000 MiB of 20000
          compute basis: 1.2 of the GPU, scaled to its cost -> 1.250000 each, idle 0
          memory basis:  0.750000 each, idle 1.000000
GPU-PART  over-subscribed for half the hour: hami/o3 60 % (3000 MiB) all hour, hami/o4 60 %
          (3000 MiB) 10:00-10:30; scaled at each instant, not by the hour's sum:
          compute basis: 10:00-10:30 each 0.6 / 1.2 = 0.5, then o3 0.6
                         -> o3 (900 + 1080) s = 1.375000, o4 900 s = 0.625000, idle 0.500000
                         (the hour's sums, 2160 + 1080 s < 3600 s, would have scaled nothing)
          memory basis:  0.15 + 0.15 never exceeds the GPU -> o3 0.375000, o4 0.187500,
                         idle 1.937500
          max basis:     as compute
          usage policy:  both shared, no SM series: the held 2880 s split equally -> 1.000000
                         each
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

SIXTEENTH = datetime(2026, 11, 16, 10, tzinfo=UTC)
T16 = int(SIXTEENTH.timestamp())
H100 = "NVIDIA H100 80GB HBM3"

Add = Callable[[str, dict[str, str], float, int, int], None]


def add_history(add: Add) -> None:
    before, end = T16 - 60, T16 + 3600
    for uuid in ("GPU-DRA1", "GPU-DRA3", "GPU-HAMI", "GPU-OVER", "GPU-PART"):
        gpu = {"gpu": "0", "UUID": uuid, "modelName": H100, "Hostname": f"node-{uuid[4:]}"}
        add("gpu_device_up", gpu, 1, before, end)
    holdings = [  # GPU, namespace, pod, compute, memory, SM, claim
        ("GPU-DRA1", "dra", "solo", 1.0, 1.0, None, "solo"),
        ("GPU-DRA3", "dra", "s0", 1 / 3, 1 / 3, 0.6, "trio"),
        ("GPU-DRA3", "dra", "s1", 1 / 3, 1 / 3, 0.3, "trio"),
        ("GPU-DRA3", "dra", "s2", 1 / 3, 1 / 3, 0.0, "trio"),
        ("GPU-HAMI", "hami", "h30", 0.3, 0.2, None, None),
        ("GPU-HAMI", "hami", "h50", 0.5, 0.4, None, None),
        ("GPU-OVER", "hami", "o1", 0.6, 0.3, None, None),
        ("GPU-OVER", "hami", "o2", 0.6, 0.3, None, None),
        ("GPU-PART", "hami", "o3", 0.6, 0.15, None, None),
        ("GPU-PART", "hami", "o4", 0.6, 0.15, None, None),
    ]
    for uuid, ns, pod, compute, memory, sm, claim in holdings:
        stop = T16 + 1800 if pod == "o4" else end
        gpu = {"gpu": "0", "UUID": uuid, "modelName": H100, "Hostname": f"node-{uuid[4:]}"}
        holder = {**gpu, "namespace": ns, "pod": pod, "container": "main"}
        if claim is not None:
            holder.update(claim_namespace=ns, claim=claim, pod_uid=f"uid-{pod}")
        resource = "gpu.nvidia.com" if claim is not None else "nvidia.com/gpu"
        add("gpu_allocation_share", {**holder, "resource": resource}, compute, before, stop)
        add("gpu_allocation_memory_share", {**holder, "resource": resource}, memory, before, stop)
        if sm is not None:
            add("gpu_container_sm_utilization_ratio", holder, sm, before, stop)
        add("kube_pod_labels", {"namespace": ns, "pod": pod, "label_team": pod}, 1, before, stop)
