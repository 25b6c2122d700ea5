"""Attribution of devices and usage to containers (pure), over states from the real sampler."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.pods.claims import Claim, Holder
from exporter.pods.device_ids import DeviceRef, parse_device_id
from exporter.pods.shares import Unit, attribute
from exporter.snapshot import GpuState
from tests.conftest import ManualClock
from tests.exporter.helpers import rig

H100 = {"model": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559}


def states(gpus: list[dict[str, Any]], at: float = 5.0) -> list[GpuState]:
    clock = ManualClock()
    r = rig({"hostname": "n", "gpus": gpus}, clock)
    r.exporter.collect_once()  # discovery
    clock.advance(at)
    return r.exporter.sampler.sample()


def pod(i: int, container: str = "main") -> Holder:
    return Holder("ml", f"pod-{i}", container)


def test_eight_whole_gpus_to_eight_pods() -> None:
    st = states([{**H100, "count": 8}])
    claims = [Claim(pod(i), "nvidia.com/gpu", s.identity.uuid) for i, s in enumerate(st)]
    a = attribute(st, claims, {}, lambda pid: None)
    assert a.shares == {(Unit(i, None), pod(i), "nvidia.com/gpu"): 1.0 for i in range(8)}
    assert a.exclusive == {Unit(i, None): pod(i) for i in range(8)}
    assert a.unknown_device_ids == 0


@pytest.mark.parametrize(
    ("layout", "shares"),
    [
        (["1g.10gb"] * 7, [1 / 7] * 7),
        (["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], [3 / 7, 2 / 7, 1 / 7, 1 / 7]),
    ],
)
def test_mig_instances_by_compute_slices(layout: list[str], shares: list[float]) -> None:
    st = states([{**H100, "mig": [{"profile": p} for p in layout]}])
    insts = st[0].instances
    claims = [
        Claim(pod(i), f"nvidia.com/mig-{m.instance.profile}", m.instance.uuid)
        for i, m in enumerate(insts)
    ]
    a = attribute(st, claims, {}, lambda pid: None)
    got = [
        a.shares[(Unit(0, m.instance.gi_id), pod(i), claims[i].resource)]
        for i, m in enumerate(insts)
    ]
    assert got == pytest.approx(shares)
    assert sum(a.shares.values()) == pytest.approx(1.0)
    assert Unit(0, None) not in a.exclusive  # the GPU itself is shared by the instances
    assert all(Unit(0, m.instance.gi_id) in a.exclusive for m in insts)


def test_time_sliced_gpu_by_replicas_and_real_usage() -> None:
    procs = [
        {"pid": 11, "sm_util": 60, "memory_used_mib": 1000},
        {"pid": 12, "sm_util": 10, "memory_used_mib": 500},
        {"pid": 21, "sm_util": 25, "memory_used_mib": 4000},
        {"pid": 99, "sm_util": 5, "memory_used_mib": 100},
    ]
    st = states([{**H100, "time_slicing_replicas": 4, "processes": procs}])
    uuid = st[0].identity.uuid
    claims = [
        Claim(pod(1), "nvidia.com/gpu", uuid, 0),
        Claim(pod(1), "nvidia.com/gpu", uuid, 1),
        Claim(pod(2), "nvidia.com/gpu", uuid, 2),
    ]
    owners = {11: pod(1), 12: pod(1), 21: pod(2)}
    a = attribute(st, claims, {uuid: 4}, owners.get)
    assert a.shares == {
        (Unit(0, None), pod(1), "nvidia.com/gpu"): 0.5,
        (Unit(0, None), pod(2), "nvidia.com/gpu"): 0.25,
    }
    assert a.exclusive == {}  # shared: device-wide values must not carry a pod's labels
    sm1, mem1 = a.usage[(Unit(0, None), pod(1))]
    sm2, mem2 = a.usage[(Unit(0, None), pod(2))]
    assert (sm1, mem1) == (pytest.approx(0.70), 1500 * 2**20)
    assert (sm2, mem2) == (pytest.approx(0.25), 4000 * 2**20)
    assert a.unattributed_processes == {0: 1}  # PID 99 belongs to no pod: counted, not guessed


def test_unknown_device_ids_are_counted() -> None:
    st = states([H100])
    claims = [
        Claim(pod(1), "nvidia.com/gpu", "GPU-not-on-this-node"),
        Claim(pod(2), "nvidia.com/gpu", st[0].identity.uuid),
    ]
    a = attribute(st, claims, {}, lambda pid: None)
    assert a.unknown_device_ids == 1
    assert list(a.shares.values()) == [1.0]


UUID = "GPU-0f5c8a2e-1b7d-4c7a-9a51-3e2f6d8b9c10"
MIG_UUID = "MIG-7d7c1ab1-8f4e-5b6a-9d1a-2c3e4f5a6b7c"


@pytest.mark.parametrize(
    ("device_id", "key", "replica"),
    [
        (UUID, UUID, None),  # NVIDIA's device plugin: a whole GPU
        (MIG_UUID, MIG_UUID, None),  # a MIG device
        (f"MIG-{UUID}/3/0", f"{UUID}/gi3", None),  # the legacy MIG form
        (f"{UUID}::2", UUID, 2),  # a time-slicing replica
        (f"{MIG_UUID}::1", MIG_UUID, 1),  # a replica of a MIG device
        ("nvidia3", "nvidia3", None),  # GKE: a whole GPU by minor number
        ("nvidia0/gi2", "nvidia0/gi2", None),  # GKE: a MIG partition
        ("nvidia1/vgpu4", "nvidia1", 4),  # GKE: time-sharing client 4 of GPU 1
        ("nvidia0/gi2/vgpu0", "nvidia0/gi2", 0),  # GKE: time-sharing on a MIG partition
        ("nvidia0/vgpu1/gi2", "", None),  # not a form any plugin writes
        ("nvidia0/gi2::1", "", None),
        ("0000:3b:00.2", "", None),
    ],
)
def test_device_ids_of_nvidias_and_gkes_plugins(
    device_id: str, key: str, replica: int | None
) -> None:
    assert parse_device_id(device_id) == DeviceRef(key, replica)
