"""Pod attribution end to end: the real pod-resources gRPC server on a unix socket, the real
client, real /proc cgroup files, and the real collector over the fake NVML."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.catalogue import COLLECTORS, DEVICE_SECONDS, INTEGRALS, MIG_INSTANCE_SERIES
from exporter.collection import Exporter
from exporter.nvml.boundary import Nvml
from exporter.pods.assignments import PodResourcesAssignments
from exporter.pods.kubelet.client import PodResourcesClient
from exporter.pods.proc_owner import ProcOwner
from exporter.selfmetrics import SelfMetrics
from exporter.simulate.fake_nvml import FakeNvml
from exporter.simulate.kubelet import PodAnswer
from exporter.simulate.node import SimulatedNode
from exporter.simulate.spec import parse
from tests.conftest import ManualClock
from tests.exporter.helpers import serve, value

EPOCH = "2026-11-01T00:00:00Z"
EPOCH_TS = 1_793_491_200.0
H100 = {"model": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "power_w": 300}


class Node:
    def __init__(
        self, raw: dict[str, Any], tmp: Path, timeout: float = 2.0, procfs: Path | None = None
    ) -> None:
        self.clock = ManualClock(EPOCH_TS)
        spec = parse({"hostname": "n", "epoch": EPOCH, **raw})
        self.fake = FakeNvml(spec, now=self.clock)
        self.sim = SimulatedNode(spec, self.fake, tmp)
        self.client = PodResourcesClient(self.sim.socket_path, timeout)
        nvml = Nvml(self.fake)
        self.stats = SelfMetrics(nvml.bindings_version(), "test")
        self.exporter = Exporter(
            nvml,
            "n",
            COLLECTORS,
            5.0,
            clock=self.clock,
            monotonic=self.clock,
            stats=self.stats,
            assignments=PodResourcesAssignments(self.client, self.stats.count_error),
            owner=ProcOwner(
                self.sim.directory, procfs or self.sim.proc_root, self.stats.count_error
            ),
            assignments_max_age=0.0,
        )
        self.rig = serve(self.clock, self.fake, self.exporter)

    def collect(self, advance: float = 5.0) -> dict[str, list[Any]]:
        """Advance the clock, collect, and scrape /metrics over HTTP."""
        self.clock.advance(advance)
        m = self.rig.collect()
        check_invariants(m)
        return m

    def close(self) -> None:
        self.client.close()
        self.sim.stop()


PER_INSTANCE = MIG_INSTANCE_SERIES | {
    "gpu_mig_instance_info",
    "gpu_allocation_share",
    "gpu_allocation_memory_share",
    "gpu_container_sm_utilization_ratio",
    "gpu_container_memory_used_bytes",
    # the integrals of the per-holding series
    *(s.name for s in INTEGRALS if s is not DEVICE_SECONDS),
}


def check_invariants(m: dict[str, list[Any]]) -> None:
    """Checked after every collection of every scenario."""
    per_gpu: dict[str, float] = {}
    for s in m.get("gpu_allocation_share", []):
        per_gpu[s.labels["UUID"]] = per_gpu.get(s.labels["UUID"], 0.0) + s.value
    assert all(total <= 1.0 + 1e-9 for total in per_gpu.values()), per_gpu
    for name, series in m.items():
        if name not in PER_INSTANCE:
            assert not any("GPU_I_ID" in s.labels for s in series), name


@pytest.fixture
def make_node(tmp_path: Path) -> Iterator[Any]:
    nodes: list[Node] = []

    def make(raw: dict[str, Any], **kw: Any) -> Node:
        node = Node(raw, tmp_path / f"n{len(nodes)}", **kw)
        nodes.append(node)
        return node

    yield make
    for n in nodes:
        n.close()


def pod(
    name: str,
    ids: list[str],
    resource: str = "nvidia.com/gpu",
    pids: tuple[int, ...] = (),
    **kw: Any,
) -> dict[str, Any]:
    return {
        "namespace": "ml",
        "name": name,
        **kw,
        "containers": [
            {"name": "main", "devices": [{"resource": resource, "ids": ids}], "pids": list(pids)}
        ],
    }


def shares(m: dict[str, list[Any]]) -> dict[tuple[str, str], float]:
    return {
        (s.labels["pod"], s.labels.get("GPU_I_ID", "-")): s.value
        for s in m.get("gpu_allocation_share", [])
    }


def test_eight_whole_gpus_to_eight_pods(make_node: Any) -> None:
    node = make_node(
        {"gpus": [{**H100, "count": 8}], "pods": [pod(f"p{i}", [f"gpu{i}"]) for i in range(8)]}
    )
    m = node.collect()
    assert shares(m) == {(f"p{i}", "-"): 1.0 for i in range(8)}
    # each GPU is held by one container: its DCGM series name it
    power = {s.labels["gpu"]: s.labels.get("pod") for s in m["DCGM_FI_DEV_POWER_USAGE"]}
    assert power == {str(i): f"p{i}" for i in range(8)}


def test_one_h100_as_seven_1g10gb_to_seven_pods(make_node: Any) -> None:
    layout = [{"profile": "1g.10gb", "gi_id": 7 + i} for i in range(7)]
    node = make_node(
        {
            "gpus": [{**H100, "mig": layout}],
            "pods": [pod(f"p{i}", [f"gpu0/gi{7 + i}"], "nvidia.com/mig-1g.10gb") for i in range(7)],
        }
    )
    m = node.collect()
    assert shares(m) == pytest.approx({(f"p{i}", str(7 + i)): 1 / 7 for i in range(7)})
    fb = {s.labels["GPU_I_ID"]: s.labels.get("pod") for s in m["DCGM_FI_DEV_FB_USED"]}
    assert fb == {str(7 + i): f"p{i}" for i in range(7)}
    # the physical GPU's series are shared by seven pods: no pod labels there
    assert [s.labels.get("pod") for s in m["DCGM_FI_DEV_POWER_USAGE"]] == [None]


def test_mixed_mig_layout(make_node: Any) -> None:
    layout = [
        {"profile": "3g.40gb", "gi_id": 2},
        {"profile": "2g.20gb", "gi_id": 3},
        {"profile": "1g.10gb", "gi_id": 9},
        {"profile": "1g.10gb", "gi_id": 10},
    ]
    pods = [
        pod("big", ["gpu0/gi2"], "nvidia.com/mig-3g.40gb"),
        pod("mid", ["gpu0/gi3"], "nvidia.com/mig-2g.20gb"),
        pod("small", ["gpu0/gi9"], "nvidia.com/mig-1g.10gb"),
    ]
    node = make_node({"gpus": [{**H100, "mig": layout}], "pods": pods})
    m = node.collect()
    assert shares(m) == pytest.approx(
        {("big", "2"): 3 / 7, ("mid", "3"): 2 / 7, ("small", "9"): 1 / 7}
    )
    # GI 10 exists but nobody holds it: it is idle, so it has no share line
    assert len(m["gpu_mig_instance_info"]) == 4


def test_time_sliced_gpu_shared_by_three_pods_with_real_usage(make_node: Any) -> None:
    gpu = {
        **H100,
        "time_slicing_replicas": 4,
        "processes": [
            {"pid": 101, "sm_util": 50, "memory_used_mib": 1000},
            {"pid": 102, "sm_util": 20, "memory_used_mib": 2000},
            {"pid": 201, "sm_util": 10, "memory_used_mib": 3000},
            {"pid": 301, "sm_util": 5, "memory_used_mib": 4000},
            {"pid": 999, "sm_util": 1, "memory_used_mib": 10},
        ],
    }
    pods = [
        pod("a", ["gpu0::0", "gpu0::1"], "nvidia.com/gpu.shared", (101, 102)),
        pod("b", ["gpu0::2"], "nvidia.com/gpu.shared", (201,), qos="guaranteed"),
        {
            **pod("c", ["gpu0::3"], "nvidia.com/gpu.shared", (301,)),
            "containers": [
                {
                    "name": "main",
                    "runtime": "crio",
                    "cgroup": "v1-systemd",
                    "devices": [{"resource": "nvidia.com/gpu.shared", "ids": ["gpu0::3"]}],
                    "pids": [301],
                }
            ],
        },
    ]
    node = make_node({"gpus": [gpu], "pods": pods})
    node.collect()
    m = node.collect()
    assert shares(m) == {("a", "-"): 0.5, ("b", "-"): 0.25, ("c", "-"): 0.25}
    sm = {s.labels["pod"]: s.value for s in m["gpu_container_sm_utilization_ratio"]}
    assert sm == pytest.approx({"a": 0.70, "b": 0.10, "c": 0.05})
    mem = {s.labels["pod"]: s.value for s in m["gpu_container_memory_used_bytes"]}
    assert mem == {"a": 3000 * 2**20, "b": 3000 * 2**20, "c": 4000 * 2**20}
    # device-wide values are not copied under any one pod's labels
    assert all("pod" not in s.labels for s in m["DCGM_FI_DEV_GPU_UTIL"])
    assert value(m, "gpu_unattributed_processes", gpu="0") == 1  # PID 999 is nobody's


def test_pods_starting_and_ending_between_collections(make_node: Any) -> None:
    pods = [pod("early", ["gpu0"], ended_at=20), pod("late", ["gpu0"], started_at=30)]
    node = make_node({"gpus": [H100], "pods": pods})
    assert shares(node.collect(10)) == {("early", "-"): 1.0}  # t=10
    assert shares(node.collect(15)) == {}  # t=25: between the two, the GPU is idle
    assert shares(node.collect(15)) == {("late", "-"): 1.0}  # t=40


def test_kubelet_socket_absent(make_node: Any) -> None:
    node = make_node({"gpus": [H100], "pods": [pod("a", ["gpu0"])]})
    node.sim.stop()
    Path(node.sim.socket_path).unlink(missing_ok=True)
    m = node.collect()
    assert "gpu_allocation_share" not in m
    assert value(m, "DCGM_FI_DEV_POWER_USAGE", gpu="0") == 300  # GPUs keep reporting
    assert value(m, "gpu_exporter_errors_total", source="pod_resources", kind="unavailable") == 1
    status, health = node.rig.get("/health")  # degraded, as for a hung GPU: still 200
    assert status == 200 and health.startswith("ok\n"), health
    assert f"degraded: kubelet pod-resources: {node.sim.socket_path} does not exist" in health


def test_health_says_when_the_kubelet_answers_again(make_node: Any) -> None:
    node = make_node({"gpus": [H100], "pods": [pod("a", ["gpu0"])]}, timeout=0.2)
    node.collect()
    assert node.rig.get("/health") == (200, "ok\n")
    node.sim.servicer.delay = 1.0
    node.collect()
    assert (
        "degraded: kubelet pod-resources: List: no answer within 0.2s" in node.rig.get("/health")[1]
    )
    node.sim.servicer.delay = 0.0
    node.collect()
    assert node.rig.get("/health") == (200, "ok\n")


def test_kubelet_slower_than_the_time_out_then_recovering(make_node: Any) -> None:
    node = make_node({"gpus": [H100], "pods": [pod("a", ["gpu0"])]}, timeout=0.2)
    node.sim.servicer.delay = 1.0
    m = node.collect()
    assert "gpu_allocation_share" not in m
    assert value(m, "gpu_exporter_errors_total", source="pod_resources", kind="timeout") == 1
    assert value(m, "DCGM_FI_DEV_POWER_USAGE", gpu="0") == 300
    node.sim.servicer.delay = 0.0
    assert shares(node.collect()) == {("a", "-"): 1.0}


def test_unknown_device_ids_are_counted_not_guessed(make_node: Any) -> None:
    pods = [
        pod("a", ["gpu0"]),
        pod("b", ["GPU-00000000-0000-0000-0000-000000000000", "something-else"]),
    ]
    node = make_node({"gpus": [H100], "pods": pods})
    m = node.collect()
    assert shares(m) == {("a", "-"): 1.0}
    assert value(m, "gpu_exporter_unknown_device_ids") == 2


def test_non_gpu_resources_are_ignored(make_node: Any) -> None:
    pods = [pod("a", ["gpu0"]), pod("nic", ["0000:3b:00.2"], resource="intel.com/sriov")]
    node = make_node({"gpus": [H100], "pods": pods})
    m = node.collect()
    assert shares(m) == {("a", "-"): 1.0}
    assert value(m, "gpu_exporter_unknown_device_ids") == 0


def test_scrapes_stay_fast_while_the_kubelet_is_slow(make_node: Any) -> None:
    import http.client
    import threading

    from exporter.http import MetricsServer

    node = make_node({"gpus": [H100], "pods": [pod("a", ["gpu0"])]}, timeout=3.0)
    node.collect()
    published = node.exporter.exposition.body("text")
    server = MetricsServer("127.0.0.1:0", node.exporter)
    server.start()
    stop = threading.Event()
    node.sim.servicer.delay = 2.5
    calls = node.sim.servicer.calls
    loop = threading.Thread(target=node.exporter.run, args=(stop,), daemon=True)
    loop.start()
    try:
        while node.sim.servicer.calls == calls:  # wait until a collection is inside the kubelet
            stop.wait(0.01)
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=1.0)
        conn.request("GET", "/metrics")
        resp = conn.getresponse()  # raises if the scrape waited for the collection
        assert resp.status == 200
        assert resp.read() == published
        conn.close()
    finally:
        stop.set()
        node.sim.servicer.delay = 0.0
        loop.join(10)
        server.stop()


def test_kubelet_without_allocatable_still_attributes_whole_and_mig(make_node: Any) -> None:
    gpus = [H100, {**H100, "mig": [{"profile": "3g.40gb", "gi_id": 2}]}]
    pods = [pod("whole", ["gpu0"]), pod("mig", ["gpu1/gi2"], "nvidia.com/mig-3g.40gb")]
    node = make_node({"gpus": gpus, "pods": pods})
    node.sim.servicer.old_kubelet = True
    m = node.collect()
    assert shares(m) == pytest.approx({("whole", "-"): 1.0, ("mig", "2"): 3 / 7})
    assert value(m, "gpu_exporter_errors_total", source="pod_resources", kind="other") == 0


def test_gke_time_sharing_on_a_mig_partition(make_node: Any) -> None:
    """GKE's device plugin names a MIG partition nvidia<N>/gi<M> and each time-sharing client
    of a device <id>/vgpu<K> (GoogleCloudPlatform/container-engine-accelerators,
    pkg/gpu/nvidia/mig/mig.go and manager.go): the kubelet answers with those ids."""
    gpus = [{**H100, "mig": [{"profile": "3g.40gb", "gi_id": 2}]}, H100]
    node = make_node({"gpus": gpus})
    listed = [
        PodAnswer("ml", "a", {"main": [("nvidia.com/gpu", ["nvidia0/gi2/vgpu0"])]}),
        PodAnswer("ml", "b", {"main": [("nvidia.com/gpu", ["nvidia0/gi2/vgpu3"])]}),
        PodAnswer("ml", "c", {"main": [("nvidia.com/gpu", ["nvidia1/vgpu1"])]}),
    ]
    allocatable = [
        ("nvidia.com/gpu", [f"nvidia0/gi2/vgpu{k}" for k in range(4)]),
        ("nvidia.com/gpu", [f"nvidia1/vgpu{k}" for k in range(2)]),
    ]
    node.sim.servicer.answer = lambda: (listed, allocatable)
    m = node.collect()
    assert shares(m) == pytest.approx(
        {("a", "2"): 3 / 7 / 4, ("b", "2"): 3 / 7 / 4, ("c", "-"): 1 / 2}
    )
    assert value(m, "gpu_exporter_unknown_device_ids") == 0
    profile = {s.labels["pod"]: s.labels.get("GPU_I_PROFILE") for s in m["gpu_allocation_share"]}
    assert profile == {"a": "3g.40gb", "b": "3g.40gb", "c": None}


def test_processes_seen_from_a_private_cgroup_namespace(make_node: Any) -> None:
    """With cgroup v2 the exporter's container has its own cgroup namespace: the cgroup files
    it reads are relative to its own cgroup (systemd and cgroupfs drivers, containerd and
    CRI-O); the pod UID and container id in them still attribute the processes."""
    gpu = {
        **H100,
        "time_slicing_replicas": 2,
        "processes": [{"pid": 11, "sm_util": 30}, {"pid": 22, "sm_util": 20}],
    }

    def holder(name: str, replica: str, pid: int, layout: str, runtime: str) -> dict[str, Any]:
        return {
            "namespace": "ml",
            "name": name,
            "containers": [
                {
                    "name": "main",
                    "runtime": runtime,
                    "cgroup": layout,
                    "devices": [{"resource": "nvidia.com/gpu.shared", "ids": [replica]}],
                    "pids": [pid],
                }
            ],
        }

    pods = [
        holder("sd", "gpu0::0", 11, "v2-systemd-cgroupns", "containerd"),
        holder("fs", "gpu0::1", 22, "v2-cgroupfs-cgroupns", "crio"),
    ]
    node = make_node({"gpus": [gpu], "pods": pods})
    assert (node.sim.proc_root / "22" / "cgroup").read_text().startswith("0::/../../../burstable/")
    node.collect()
    m = node.collect()
    sm = {s.labels["pod"]: s.value for s in m["gpu_container_sm_utilization_ratio"]}
    assert sm == pytest.approx({"sd": 0.30, "fs": 0.20})
    assert value(m, "gpu_unattributed_processes", gpu="0") == 0


@pytest.mark.parametrize("procfs", ["missing", "foreign"])
def test_a_proc_without_the_gpu_processes_is_counted(
    make_node: Any, tmp_path: Path, procfs: str
) -> None:
    """No hostPID (the container's own /proc) or a wrong --path.procfs: the processes NVML
    reports cannot be mapped; the exposition says so in its error counters."""
    gpu = {**H100, "time_slicing_replicas": 2, "processes": [{"pid": 11, "sm_util": 30}]}
    root = tmp_path / "container-proc"
    if procfs == "foreign":
        (root / "1").mkdir(parents=True)
        (root / "1" / "cgroup").write_text("0::/\n")  # only the exporter itself
    node = make_node({"gpus": [gpu], "pods": [pod("a", ["gpu0::0"], pids=(11,))]}, procfs=root)
    m = node.collect()
    kind = "missing" if procfs == "missing" else "not_found"
    assert value(m, "gpu_exporter_errors_total", source="proc", kind=kind) == (
        2 if procfs == "missing" else 1  # missing: said at start-up, and for the process
    )
    assert value(m, "gpu_unattributed_processes", gpu="0") == 1
    assert shares(m) == {("a", "-"): 0.5}  # holdings come from the kubelet, unaffected
