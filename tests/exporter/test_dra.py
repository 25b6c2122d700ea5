"""GPUs handed out through DRA resource claims: a real pod-resources gRPC server on a unix socket
sending ``dynamic_resources``, the official Kubernetes client watching ResourceSlices and pods
on a loopback API server, and the exporter's shares, labels and counters over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from exporter.catalogue import COLLECTORS
from exporter.collection import Exporter
from exporter.nvml.boundary import Nvml
from exporter.pods.assignments import PodResourcesAssignments
from exporter.pods.directory import PodDirectory
from exporter.pods.kubelet.client import PodResourcesClient
from exporter.pods.proc_owner import ProcOwner
from exporter.pods.slice_watch import SliceWatcher
from exporter.pods.slices import SliceDirectory
from exporter.pods.watch import PodWatcher
from exporter.selfmetrics import SelfMetrics
from exporter.simulate.fake_nvml import FakeNvml
from exporter.simulate.node import SimulatedNode, slice_of
from exporter.simulate.pods import container_id
from exporter.simulate.spec import FleetSpec, parse
from kube.client import core_api, resource_api
from tests.conftest import ManualClock
from tests.exporter.helpers import Rig, labels_of, serve, value
from tests.kubeapi import KubeApi, pod_json, slice_json, wait_until

H100 = {"model": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559}
NODE = "n1"


def pod(name: str, **container: Any) -> dict[str, Any]:
    return {
        "namespace": "ml",
        "name": name,
        "labels": {"team": name.split("-", maxsplit=1)[0]},
        "containers": [{"name": "main", **container}],
    }


def claim(name: str, *devices: str, driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    return {"claims": [{"name": name, "driver": driver, "devices": list(devices)}]}


SPEC: dict[str, Any] = {
    "hostname": NODE,
    "gpus": [
        {**H100},
        {
            **H100,  # the shared claim's GPU: each pod's own process
            "processes": [
                {"pid": 9100 + i, "memory_used_mib": 1000 * (i + 1), "sm_util": 10 * (i + 1)}
                for i in range(3)
            ],
        },
        {**H100},
        {**H100, "mig": [{"profile": "3g.40gb", "gi_id": 1}, {"profile": "1g.10gb", "gi_id": 9}]},
    ],
    "pods": [
        pod("solo-0", **claim("solo", "gpu0")),
        *(pod(f"shared-{i}", pids=[9100 + i], **claim("shared", "gpu1")) for i in range(3)),
        pod("migdra-0", **claim("mig", "gpu3/gi1")),
        pod("nic-0", **claim("nic", "nic-0", driver="dra.example.com")),
        pod("ghost-0", **claim("ghost", "gpu-99")),
        pod("plugin-0", devices=[{"ids": ["gpu2"]}]),  # a device plugin's GPU beside them
    ],
}


@pytest.fixture
def api() -> Iterator[KubeApi]:
    server = KubeApi()
    yield server
    server.stop()


@contextmanager
def exporting(spec: FleetSpec, tmp: Path, api: KubeApi) -> Iterator[tuple[Rig, SimulatedNode]]:
    """The exporter over a simulated node's real kubelet server, with the ResourceSlices and
    pods the official client watches on the loopback API (not the spec's)."""
    clock = ManualClock()
    fake = FakeNvml(spec, now=clock)
    sim = SimulatedNode(spec, fake, tmp)
    client = PodResourcesClient(sim.socket_path)
    nvml = Nvml(fake)
    stats = SelfMetrics(nvml.bindings_version(), "test")
    pods, slices = PodDirectory(), SliceDirectory()
    core = core_api(host=api.url)
    watchers = [
        PodWatcher(pods, NODE, core, stats.count_error),
        SliceWatcher(slices, NODE, resource_api(core), stats.count_error),
    ]
    for w in watchers:
        w.start()
    try:
        for w in watchers:
            assert w.synced.wait(10)
        exporter = Exporter(
            nvml,
            NODE,
            COLLECTORS,
            5.0,
            clock=clock,
            monotonic=clock,
            stats=stats,
            assignments=PodResourcesAssignments(
                client, stats.count_error, slices=slices, pods=pods
            ),
            owner=ProcOwner(pods, sim.proc_root),
            finished_pod=pods.finished,
            pod_uid=lambda ns, name: getattr(pods.by_name(ns, name), "uid", None),
        )
        yield serve(clock, fake, exporter), sim
    finally:
        for w in watchers:
            w.stop()
        client.close()
        sim.stop()


def publish(api: KubeApi, spec: FleetSpec, sim: SimulatedNode | None = None) -> None:
    """The node's pods and the ResourceSlice NVIDIA's driver would publish, on the API."""
    fake = FakeNvml(spec)
    for p in spec.pods:
        containers = {c.name: container_id(p, c) for c in p.containers}
        api.put(pod_json(p.namespace, p.name, p.pod_uid(), NODE, dict(p.labels), containers))
    devices = [
        {
            "name": d.name,
            "attributes": {
                "type": {"string": d.kind},
                "uuid": {"string": d.uuid},
                **({"parentUUID": {"string": d.parent_uuid}} if d.parent_uuid else {}),
                **({"profile": {"string": d.profile}} if d.profile else {}),
                "driverVersion": {"version": "550.90.7"},
            },
        }
        for d in slice_of(fake.gpus, NODE)
    ]
    api.put_slice(slice_json(f"{NODE}-gpu.nvidia.com-x7k2p", NODE, "gpu.nvidia.com", NODE, devices))
    # another node's slice, with the same device names: never read (field selector)
    api.put_slice(slice_json("n2-gpu", "n2", "gpu.nvidia.com", NODE, devices[:1]))


def test_dra_claims_single_shared_mig_other_driver_and_missing(
    api: KubeApi, tmp_path: Path
) -> None:
    spec = parse(SPEC)
    publish(api, spec)
    fake = FakeNvml(spec)
    gpu = [g.uuid for g in fake.gpus]
    uid = {p.name: p.pod_uid() for p in spec.pods}
    with exporting(spec, tmp_path, api) as (r, _):
        m = r.collect()
        share, memory = "gpu_allocation_share", "gpu_allocation_memory_share"

        solo = labels_of(m, share, pod="solo-0")
        assert solo is not None and value(m, share, pod="solo-0") == 1.0
        assert (solo["UUID"], solo["resource"]) == (gpu[0], "gpu.nvidia.com")
        assert (solo["claim_namespace"], solo["claim"], solo["pod_uid"]) == (
            "ml",
            "solo",
            uid["solo-0"],
        )
        # one claim, three pods: a third each, never three whole GPUs, never the last pod
        for i in range(3):
            assert value(m, share, pod=f"shared-{i}", UUID=gpu[1]) == pytest.approx(1 / 3)
            assert value(m, memory, pod=f"shared-{i}", UUID=gpu[1]) == pytest.approx(1 / 3)
            assert labels_of(m, share, pod=f"shared-{i}")["claim"] == "shared"  # type: ignore[index]
        # their usage, per container, carries the claim too
        for i in range(3):
            sm = labels_of(m, "gpu_container_sm_utilization_ratio", pod=f"shared-{i}")
            assert sm is not None and (sm["claim"], sm["pod_uid"]) == ("shared", uid[f"shared-{i}"])
            used = value(m, "gpu_container_memory_used_bytes", pod=f"shared-{i}")
            assert used == 1000 * (i + 1) * 2**20
        # the GPU's own series carry no pod: three containers hold it
        assert labels_of(m, "DCGM_FI_DEV_GPU_UTIL", UUID=gpu[1]).get("pod") is None  # type: ignore[union-attr]
        assert labels_of(m, "DCGM_FI_DEV_GPU_UTIL", UUID=gpu[0])["pod"] == "solo-0"  # type: ignore[index]
        # a MIG device through DRA is a MIG share: 3 of 7 compute slices, 4 of 8 memory slices
        mig = labels_of(m, share, pod="migdra-0")
        assert mig is not None and (mig["UUID"], mig["GPU_I_ID"]) == (gpu[3], "1")
        assert value(m, share, pod="migdra-0") == pytest.approx(3 / 7)
        assert value(m, memory, pod="migdra-0") == pytest.approx(4 / 8)
        # the device plugin's GPU beside them: its resource, no claim labels
        plugin = labels_of(m, share, pod="plugin-0")
        assert plugin is not None and plugin["resource"] == "nvidia.com/gpu"
        assert "claim" not in plugin and value(m, share, pod="plugin-0") == 1.0
        # a non-GPU driver's device and one in no slice: counted, never attributed
        for absent in ("nic-0", "ghost-0"):
            assert labels_of(m, share, pod=absent) is None
        dra = "gpu_exporter_dra_devices"
        assert value(m, dra, outcome="gpu") == 5
        assert value(m, dra, outcome="other_driver") == 1
        assert value(m, dra, outcome="not_in_slice") == 1
        assert value(m, dra, outcome="no_uuid") == 0
        assert value(m, "gpu_exporter_unknown_device_ids") == 0
        # every GPU's shares add up to at most 1 on both bases: nothing flagged
        for s in m["gpu_allocation_oversubscribed"]:
            assert s.value == 0
        assert len(m["gpu_allocation_oversubscribed"]) == 2 * 4


def test_a_kubelet_without_dra_fields_still_works(api: KubeApi, tmp_path: Path) -> None:
    spec = parse(SPEC)
    publish(api, spec)
    with exporting(spec, tmp_path, api) as (r, sim):
        sim.servicer.no_dra = True  # a kubelet before 1.27: field 5 never sent
        m = r.collect()
        shares = m["gpu_allocation_share"]
        assert [s.labels["pod"] for s in shares] == ["plugin-0"]
        assert value(m, "gpu_exporter_dra_devices", outcome="gpu") == 0
        assert value(m, "gpu_exporter_errors_total", source="pod_resources", kind="other") == 0


def test_slices_followed_as_they_change(api: KubeApi, tmp_path: Path) -> None:
    """A device the kubelet names before its driver's slice lists it is counted, then
    attributed once the slice arrives."""
    spec = parse(SPEC)
    for p in spec.pods:
        containers = {c.name: container_id(p, c) for c in p.containers}
        api.put(pod_json(p.namespace, p.name, p.pod_uid(), NODE, dict(p.labels), containers))
    with exporting(spec, tmp_path, api) as (r, _):
        m = r.collect()
        assert (
            value(m, "gpu_exporter_dra_devices", outcome="not_in_slice") == 6
        )  # 5 GPUs + the ghost
        publish(api, spec)
        wait_until(lambda: value(r.collect(), "gpu_exporter_dra_devices", outcome="gpu") == 5)
        assert value(r.scrape(), "gpu_allocation_share", pod="solo-0") == 1.0
