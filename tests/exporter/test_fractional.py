"""Fractional GPUs: HAMi's allocation annotation (read from the pods the official client watches
on a loopback API server) and memory-profile vGPU resources, through the real kubelet gRPC
server: both shares, Σ ≤ 1 on each basis or flagged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.catalogue import COLLECTORS
from exporter.collection import Exporter
from exporter.nvml.boundary import Nvml
from exporter.pods.assignments import PodResourcesAssignments
from exporter.pods.directory import PodDirectory
from exporter.pods.fractional import HAMI_ALLOCATED, parse_hami, parse_profiles
from exporter.pods.kubelet.client import PodResourcesClient
from exporter.pods.proc_owner import ProcOwner
from exporter.pods.watch import PodWatcher
from exporter.selfmetrics import SelfMetrics
from exporter.simulate.fake_nvml import FakeNvml
from exporter.simulate.node import SimulatedNode
from exporter.simulate.pods import container_id, hami_annotation
from exporter.simulate.spec import parse
from kube.client import core_api
from tests.conftest import ManualClock
from tests.exporter.helpers import labels_of, serve, value
from tests.kubeapi import KubeApi, pod_json

NODE = "n1"
GPU = {"model": "NVIDIA L40S", "memory_total_mib": 20000}


def hami_pod(name: str, *devices: tuple[int, int, int]) -> dict[str, Any]:
    return {
        "namespace": "ml",
        "name": name,
        "containers": [
            {
                "name": "main",
                "hami": [{"gpu": f"gpu{g}", "memory_mib": m, "cores": c} for g, m, c in devices],
            }
        ],
    }


SPEC: dict[str, Any] = {
    "hostname": NODE,
    "gpus": [{**GPU, "count": 4}],
    "vgpu_profiles": {"nvidia.com/vgpu-8g": 8000},
    "pods": [
        hami_pod("a-30", (0, 4000, 30)),  # 30 % of the cores, 4000 of 20000 MiB
        hami_pod("b-50", (0, 8000, 50)),
        hami_pod("c-60", (1, 6000, 60)),  # GPU 1 over-subscribed by cores: 60 % + 60 %
        hami_pod("d-60", (1, 6000, 60)),
        hami_pod("e-nolimit", (2, 5000, 0)),  # no core limit: charged by its memory
        {
            "namespace": "ml",
            "name": "v-0",
            "containers": [
                {"name": "main", "devices": [{"resource": "nvidia.com/vgpu-8g", "ids": ["gpu3"]}]}
            ],
        },
        {
            "namespace": "ml",
            "name": "v-1",
            "containers": [
                {"name": "main", "devices": [{"resource": "nvidia.com/vgpu-8g", "ids": ["gpu3"]}]}
            ],
        },
    ],
}


@pytest.fixture
def api() -> Iterator[KubeApi]:
    server = KubeApi()
    yield server
    server.stop()


def test_hami_annotation_as_hami_writes_it() -> None:
    # Project-HAMi/HAMi pkg/device/devices.go: entry i is container i (init containers first),
    # empty entries kept; devices "UUID,Type,MiB,cores:"
    text = "GPU-a,NVIDIA,1000,0:;;GPU-b,NVIDIA,4096,30:GPU-c,NVIDIA,2048,100:;"
    got = parse_hami(text, ["init", "sidecar", "main"])
    assert set(got) == {"init", "main"}
    assert [(d.uuid, d.memory_mib, d.cores) for d in got["main"]] == [
        ("GPU-b", 4096, 30),
        ("GPU-c", 2048, 100),
    ]
    assert got["init"][0].cores is None  # 0: no core limit
    # malformed entries are skipped, never guessed
    assert parse_hami("GPU-a,NVIDIA,x,30:GPU-b,NVIDIA:;GPU-c,NVIDIA,10,101:;", ["a", "b"]) == {}
    assert parse_profiles(("nvidia.com/vgpu-8g=8192",)) == {"nvidia.com/vgpu-8g": 8192}
    with pytest.raises(ValueError):
        parse_profiles(("nvidia.com/vgpu-8g",))


def test_hami_and_vgpu_profile_shares(api: KubeApi, tmp_path: Path) -> None:
    spec = parse(SPEC)
    clock = ManualClock()
    fake = FakeNvml(spec, now=clock)
    gpu = [g.uuid for g in fake.gpus]
    for p in spec.pods:  # the pods as the API serves them, with HAMi's annotation
        containers = {c.name: container_id(p, c) for c in p.containers}
        notes = {HAMI_ALLOCATED: hami_annotation(p, gpu)} if p.containers[0].hami else {}
        api.put(pod_json(p.namespace, p.name, p.pod_uid(), NODE, {}, containers, annotations=notes))
    sim = SimulatedNode(spec, fake, tmp_path)
    client = PodResourcesClient(sim.socket_path)
    nvml = Nvml(fake)
    stats = SelfMetrics(nvml.bindings_version(), "test")
    pods = PodDirectory()
    watcher = PodWatcher(pods, NODE, core_api(host=api.url), stats.count_error)
    watcher.start()
    try:
        assert watcher.synced.wait(10)
        exporter = Exporter(
            nvml,
            NODE,
            COLLECTORS,
            5.0,
            clock=clock,
            monotonic=clock,
            stats=stats,
            assignments=PodResourcesAssignments(
                client, stats.count_error, pods=pods, profiles=dict(spec.vgpu_profiles)
            ),
            owner=ProcOwner(pods, sim.proc_root),
        )
        rig = serve(clock, fake, exporter)
        rig.collect()
        clock.advance(5)
        m = rig.collect()
    finally:
        watcher.stop()
        client.close()
        sim.stop()

    share, memory = "gpu_allocation_share", "gpu_allocation_memory_share"
    expected = {  # pod: (GPU, compute share, memory share)
        "a-30": (0, 0.3, 0.2),
        "b-50": (0, 0.5, 0.4),
        "c-60": (1, 0.6, 0.3),
        "d-60": (1, 0.6, 0.3),
        "e-nolimit": (2, 0.25, 0.25),
        "v-0": (3, 0.4, 0.4),
        "v-1": (3, 0.4, 0.4),
    }
    for name, (g, compute, mem) in expected.items():
        labels = labels_of(m, share, pod=name)
        assert labels is not None and labels["UUID"] == gpu[g], name
        assert value(m, share, pod=name) == pytest.approx(compute), name
        assert value(m, memory, pod=name) == pytest.approx(mem), name
    assert labels_of(m, share, pod="a-30")["resource"] == "nvidia.com/gpu"  # type: ignore[index]
    assert labels_of(m, share, pod="v-0")["resource"] == "nvidia.com/vgpu-8g"  # type: ignore[index]
    # HAMi's virtual device ids are not read as devices: nothing unknown
    assert value(m, "gpu_exporter_unknown_device_ids") == 0
    over = "gpu_allocation_oversubscribed"
    flags = {(s.labels["UUID"], s.labels["basis"]): s.value for s in m[over]}
    assert flags == {
        (gpu[0], "compute"): 0, (gpu[0], "memory"): 0,
        (gpu[1], "compute"): 1, (gpu[1], "memory"): 0,  # 1.2 of the cores, published as is
        (gpu[2], "compute"): 0, (gpu[2], "memory"): 0,
        (gpu[3], "compute"): 0, (gpu[3], "memory"): 0,
    }  # fmt: skip
    # integrated over the 5 s between the collections, the over-subscribed GPU's holdings
    # each over the sum of its shares (1.2 of the cores: half each), its memory (0.6) as held
    for name, (g, compute, mem) in expected.items():
        scale = 1.2 if g == 1 else 1.0
        held = value(m, "gpu_allocation_share_seconds_total", pod=name)
        assert held == pytest.approx(5 * compute / scale), name
        held = value(m, "gpu_allocation_memory_share_seconds_total", pod=name)
        assert held == pytest.approx(5 * mem), name
    # a GPU held only in part never carries a pod's labels on its own series
    assert labels_of(m, "DCGM_FI_DEV_GPU_UTIL", UUID=gpu[2]).get("pod") is None  # type: ignore[union-attr]
