"""Synthetic history for the ground truth: money at sample resolution (our exporter's
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

hour 2026-11-14 10:00 UTC (test_dcgm_source.py): NVIDIA dcgm-exporter 4.x + kube-state-metrics
only (no series of our exporter), label sets as upstream writes them (costsvc/ingest/gauges/dcgm.py)
dgx-a     (`Hostname`, releases) 2 H100, capacity nvidia_com_gpu 2
  GPU-DA0 train/t1 (pod labels on dcgm-exporter's series) all hour, GR_ENGINE_ACTIVE 0.7 (and
          GPU_UTIL 60: the profiling field wins); relabelled team red -> blue at 10:30
          -> blue: allocated 2.500000, used 1.750000, waste 0.750000
  GPU-DA1 batch/job until it completes at 10:30 (labels gone, phase Succeeded), util 100 %
          -> job: allocated 1.250000, used 1.250000; idle 1.250000 (0.5 GPU-hours)
mig-node  (`hostname`, dcgm-exporter main) GPU-DM H100 80GB as 3g.40gb (GI 1, mig/m3) + 2g.20gb
          (GI 5, mig/m2) + 1g.10gb (GI 13, mig/m1) + 1g.10gb (GI 14, unheld), each at 0.5:
          allocated round(2.5 x 6/7) = 2142857 split 3:2:1 by largest remainder
          -> m3 1071428 / m2 714286 / m1 357143; used 535714 / 357143 / 178572 (half to
             even); idle 357143
ts-node   (`Hostname`) GPU-DT0, GPU-DT1 time-sliced x 4 (capacity nvidia_com_gpu 8); dcgm-exporter
          names only ts/b on both (it keeps one sharing pod per device): not used.
          Requests: ts/a 1 replica, ts/b 2, ts/c 1 but Pending all hour (never Running).
          -> a 1/8 of each GPU: 2 x 0.312500 = 0.625000; b 2 x 0.625000 = 1.250000; c nothing;
             efficiency unknown (no per-container usage): used = waste = 0; idle 3.125000.
             Documented approximation: our exporter knows the replica's GPU; the team totals
             are the same, the per-GPU split is the pool's
plain-node GPU-DP, no pod labels (Kubernetes mapping off): plain/q requests 1 GPU, Running all
          hour, util 40 % -> allocated 2.500000, used 1.000000 (from the requests)
vgpu-node (`--kubernetes-virtual-gpus`) GPU-DV time-sliced x 4 (capacity 4): a copy of each series
          per sharing pod with its `vgpu` replica; DCGM_FI_DEV_GPU_UTIL of the copy is the pod's
          own (per-process) utilisation: v/x 30 %, v/y 10 %
          -> 0.625000 each; x: busy min(900, 1080) -> used 0.625000; y: 360 of 900 share-s ->
             used 0.250000, waste 0.375000; idle 1.250000
dra-node  GPU-DD in one DRA claim (`dra_*` labels) shared by dra/p1 and dra/p2 all hour: an
          equal half each, 1.250000; efficiency unknown (who used it is not known)
old-node  dcgm-exporter --use-old-namespace: `uuid`, `pod_name`, `pod_namespace`, `container_name`;
          GPU-DO held by old/o all hour at 100 % -> allocated 2.500000, used 2.500000
fleet = 9 x 2.50 = 22.500000
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


DCGM_HOUR = datetime(2026, 11, 14, 10, tzinfo=UTC)
TD = int(DCGM_HOUR.timestamp())
DRIVER = {"DCGM_FI_DRIVER_VERSION": "570.133.20"}


def dcgm_gpu(uuid: str, index: int, node: str, host_label: str = "Hostname") -> dict[str, str]:
    """dcgm-exporter's labels of a GPU's series (render_metrics.go), in its order."""
    return {
        "gpu": str(index),
        "UUID": uuid,
        "pci_bus_id": f"00000000:{index + 0x18:02X}:00.0",
        "device": f"nvidia{index}",
        "modelName": H100,
        host_label: node,
        **DRIVER,
    }


def on_pod(labels: dict[str, str], ns: str, pod: str) -> dict[str, str]:
    """What its Kubernetes mapping adds to the series of a device a container holds."""
    return {**labels, "pod": pod, "namespace": ns, "container": "main"}


def ksm_pod(h: History, ns: str, pod: str, node: str, resource: str, q: int, running: list) -> None:
    """kube-state-metrics' series of a pod: its GPU request, phase and info."""
    uid = f"uid-{ns}-{pod}"
    pod_labels = {"namespace": ns, "pod": pod, "uid": uid}
    req = {**pod_labels, "container": "main", "node": node, "resource": resource, "unit": "integer"}
    h.add("kube_pod_container_resource_requests", req, q, TD - 60, TD + 3600)
    h.add(
        "kube_pod_info", {**pod_labels, "host_ip": "10.0.0.1", "node": node}, 1, TD - 60, TD + 3600
    )
    for start, stop, phase in running:
        for name in ("Pending", "Succeeded", "Failed", "Unknown", "Running"):
            h.add(
                "kube_pod_status_phase",
                {**pod_labels, "phase": name},
                int(name == phase),
                start,
                stop,
            )


def dcgm_exporter(h: History) -> None:
    s, half, e = TD, TD + 1800, TD + 3600
    cap = "kube_node_status_capacity"

    def node_capacity(node: str, resource: str, units: int) -> None:
        h.add(cap, {"node": node, "resource": resource, "unit": "integer"}, units, s - 60, e)

    def team(ns: str, pod: str, name: str, start: int = s, stop: int = e) -> None:
        labels = {"namespace": ns, "pod": pod, "uid": f"uid-{ns}-{pod}", "label_team": name}
        h.add("kube_pod_labels", labels, 1, start, stop)

    # dgx-a: two whole GPUs, pod labels on dcgm-exporter's series
    node_capacity("dgx-a", "nvidia_com_gpu", 2)
    a0, a1 = dcgm_gpu("GPU-DA0", 0, "dgx-a"), dcgm_gpu("GPU-DA1", 1, "dgx-a")
    t1 = on_pod(a0, "train", "t1")
    for name, value in (("DCGM_FI_DEV_FB_USED", 40000), ("DCGM_FI_DEV_GPU_UTIL", 60)):
        h.add(name, t1, value, s - 60, e)
    h.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", t1, 0.7, s - 60, e)
    ksm_pod(h, "train", "t1", "dgx-a", "nvidia_com_gpu", 1, [(s - 60, e, "Running")])
    team("train", "t1", "red", s, half)
    team("train", "t1", "blue", half, e)
    job = on_pod(a1, "batch", "job")
    h.add("DCGM_FI_DEV_FB_USED", job, 30000, s - 60, half)
    h.add("DCGM_FI_DEV_GPU_UTIL", job, 100, s - 60, half)
    h.add("DCGM_FI_DEV_FB_USED", a1, 0, half, e)  # the device-level series again
    h.add("DCGM_FI_DEV_GPU_UTIL", a1, 0, half, e)
    ksm_pod(
        h,
        "batch",
        "job",
        "dgx-a",
        "nvidia_com_gpu",
        1,
        [(s - 60, half, "Running"), (half, e, "Succeeded")],
    )
    team("batch", "job", "job")
    # its owners as kube-state-metrics exports them: a Job of the CronJob nightly
    owner = {"namespace": "batch", "pod": "job", "uid": "uid-batch-job", "owner_kind": "Job"}
    owner |= {"owner_name": "nightly-29387520", "owner_is_controller": "true"}
    h.add("kube_pod_owner", owner, 1, s, e)
    job = {"namespace": "batch", "job_name": "nightly-29387520", "owner_kind": "CronJob"}
    job |= {"owner_name": "nightly", "owner_is_controller": "true"}
    h.add("kube_job_owner", job, 1, s, e)

    # mig-node: 3g + 2g + 1g + 1g, dcgm-exporter main's lower-case hostname label
    m = dcgm_gpu("GPU-DM", 0, "mig-node", "hostname")
    layout = (
        ("1", "3g.40gb", "m3"),
        ("5", "2g.20gb", "m2"),
        ("13", "1g.10gb", "m1"),
        ("14", "1g.10gb", None),
    )
    for gi, profile, pod in layout:
        inst = {**m, "GPU_I_PROFILE": profile, "GPU_I_ID": gi}
        labels = on_pod(inst, "mig", pod) if pod else inst
        h.add("DCGM_FI_DEV_FB_USED", labels, 1000, s - 60, e)
        h.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, 0.5 if pod else 0, s - 60, e)
        if pod:
            resource = "nvidia_com_mig_" + profile.replace(".", "_")
            ksm_pod(h, "mig", pod, "mig-node", resource, 1, [(s - 60, e, "Running")])
            team("mig", pod, pod)
    # the GPU's own series: dcgm-exporter labels them with one of its instances' pods
    h.add("DCGM_FI_DEV_FB_USED", on_pod(m, "mig", "m1"), 4000, s - 60, e)
    for resource, units in (
        ("nvidia_com_mig_3g_40gb", 1),
        ("nvidia_com_mig_2g_20gb", 1),
        ("nvidia_com_mig_1g_10gb", 2),
    ):
        node_capacity("mig-node", resource, units)

    # ts-node: two GPUs time-sliced x 4; dcgm-exporter names one sharing pod per GPU
    node_capacity("ts-node", "nvidia_com_gpu", 8)
    for i, uuid in enumerate(("GPU-DT0", "GPU-DT1")):
        g = on_pod(dcgm_gpu(uuid, i, "ts-node"), "ts", "b")
        h.add("DCGM_FI_DEV_FB_USED", g, 20000, s - 60, e)
        h.add("DCGM_FI_DEV_GPU_UTIL", g, 50, s - 60, e)
    for pod, q, phase in (("a", 1, "Running"), ("b", 2, "Running"), ("c", 1, "Pending")):
        ksm_pod(h, "ts", pod, "ts-node", "nvidia_com_gpu", q, [(s - 60, e, phase)])
        team("ts", pod, pod)

    # plain-node: the Kubernetes mapping off: no pod labels, the request says who
    node_capacity("plain-node", "nvidia_com_gpu", 1)
    p = dcgm_gpu("GPU-DP", 0, "plain-node")
    h.add("DCGM_FI_DEV_FB_USED", p, 10000, s - 60, e)
    h.add("DCGM_FI_DEV_GPU_UTIL", p, 40, s - 60, e)
    ksm_pod(h, "plain", "q", "plain-node", "nvidia_com_gpu", 1, [(s - 60, e, "Running")])
    team("plain", "q", "q")

    # vgpu-node: --kubernetes-virtual-gpus, one copy per sharing pod with its replica
    node_capacity("vgpu-node", "nvidia_com_gpu", 4)
    v = dcgm_gpu("GPU-DV", 0, "vgpu-node")
    h.add("DCGM_FI_DEV_GPU_UTIL", v, 40, s - 60, e)  # the device-level series stays
    for pod, replica, own in (("x", "0", 30), ("y", "1", 10)):
        copy = {**on_pod(v, "v", pod), "vgpu": replica}
        h.add("DCGM_FI_DEV_FB_USED", copy, 5000, s - 60, e)
        h.add("DCGM_FI_DEV_GPU_UTIL", copy, own, s - 60, e)
        ksm_pod(h, "v", pod, "vgpu-node", "nvidia_com_gpu", 1, [(s - 60, e, "Running")])
        team("v", pod, pod)

    # old-node: --use-old-namespace's label names
    o = {k if k != "UUID" else "uuid": v for k, v in dcgm_gpu("GPU-DO", 0, "old-node").items()}
    held = {**o, "pod_name": "o", "pod_namespace": "old", "container_name": "main"}
    h.add("DCGM_FI_DEV_FB_USED", held, 5000, s - 60, e)
    h.add("DCGM_FI_DEV_GPU_UTIL", held, 100, s - 60, e)
    team("old", "o", "o")

    # dra-node: one GPU in a DRA claim two pods share
    dd = dcgm_gpu("GPU-DD", 0, "dra-node")
    claim = {
        "dra_claim_name": "shared-gpu",
        "dra_claim_namespace": "dra",
        "dra_driver_name": "gpu.nvidia.com",
        "dra_pool_name": "dra-node",
        "dra_device_name": "gpu-0",
    }
    for pod in ("p1", "p2"):
        copy = {**on_pod(dd, "dra", pod), **claim}
        h.add("DCGM_FI_DEV_FB_USED", copy, 5000, s - 60, e)
        h.add("DCGM_FI_DEV_GPU_UTIL", copy, 80, s - 60, e)
        team("dra", pod, pod)


def history14() -> str:
    h = History()
    sample_resolution(h)
    dcgm_exporter(h)
    return h.text()
