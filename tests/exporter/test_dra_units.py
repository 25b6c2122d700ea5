"""DRA and fractional pieces on their own: ResourceSlice parsing, the equal split of claimed
devices, over-subscription flags, HAMi's annotation through the pod watch's parser, and a
partitionable (dynamic-MIG) device without a uuid (over the real kubelet gRPC server of a
simulated node)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exporter.pods.assignments import PodResourcesAssignments
from exporter.pods.claims import Claim, ClaimRef, Holder
from exporter.pods.kubelet.client import PodResourcesClient
from exporter.pods.shares import Unit, attribute
from exporter.pods.slices import SliceDevice, slice_devices
from exporter.pods.watch import pod_info
from exporter.simulate.fake_nvml import FakeNvml
from exporter.simulate.node import SimulatedNode
from exporter.simulate.spec import parse
from tests.exporter.test_attribution import H100, states
from tests.procs import ROOT


def test_resource_slice_v1_attributes_plain_and_qualified() -> None:
    raw = {
        "metadata": {"name": "n1-gpu.nvidia.com-abc"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "pool": {"name": "n1", "generation": 3, "resourceSliceCount": 1},
            "nodeName": "n1",
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {"type": {"string": "gpu"}, "uuid": {"string": "GPU-a"}},
                },
                {
                    "name": "gpu-0-mig-1g10gb-19-0",
                    "attributes": {
                        "gpu.nvidia.com/type": {"string": "mig"},
                        "gpu.nvidia.com/parentUUID": {"string": "GPU-a"},
                        "gpu.nvidia.com/profile": {"string": "1g.10gb"},
                        "index": {"int": 0},
                    },
                    "capacity": {"memory": {"value": "10Gi"}},
                },
                {"attributes": {"uuid": {"string": "GPU-nameless"}}},  # no name: not a device
                "garbage",
            ],
        },
    }
    assert slice_devices(raw) == [
        SliceDevice("gpu.nvidia.com", "n1", "gpu-0", "gpu", "GPU-a"),
        SliceDevice("gpu.nvidia.com", "n1", "gpu-0-mig-1g10gb-19-0", "mig", "", "GPU-a", "1g.10gb"),
    ]
    assert slice_devices({}) == []


def dra(pod: str, container: str, base: str, claim: str, namespace: str = "ml") -> Claim:
    return Claim(
        Holder(namespace, pod, container), "gpu.nvidia.com", base, claim=ClaimRef(namespace, claim)
    )


def test_claimed_devices_split_equally_never_duplicated() -> None:
    st = states([{**H100, "count": 2}])
    g0, g1 = (s.identity.uuid for s in st)
    claims = [
        dra("p", "a", g0, "c"),  # one claim, two containers of one pod
        dra("p", "b", g0, "c"),
        dra("q", "main", g1, "one"),  # two claims on one device (consumable capacity)
        dra("r", "main", g1, "two"),
        dra("r", "main", g1, "two"),  # the same device listed twice for one container
    ]
    a = attribute(st, claims, {}, lambda pid: None)
    u0, u1 = Unit(0, None), Unit(1, None)
    assert a.shares == {
        (u0, Holder("ml", "p", "a"), "gpu.nvidia.com"): 0.5,
        (u0, Holder("ml", "p", "b"), "gpu.nvidia.com"): 0.5,
        (u1, Holder("ml", "q", "main"), "gpu.nvidia.com"): 0.5,
        (u1, Holder("ml", "r", "main"), "gpu.nvidia.com"): 0.5,
    }
    assert a.memory_shares == a.shares
    assert a.claims[(u1, Holder("ml", "r", "main"), "gpu.nvidia.com")] == ClaimRef("ml", "two")
    assert a.exclusive == {}
    assert a.oversubscribed == {0: (False, False), 1: (False, False)}


def test_a_device_held_two_ways_is_flagged() -> None:
    st = states([H100])
    g0 = st[0].identity.uuid
    claims = [dra("p", "main", g0, "c"), Claim(Holder("ml", "q", "main"), "nvidia.com/gpu", g0)]
    a = attribute(st, claims, {}, lambda pid: None)
    assert sum(a.shares.values()) == 2.0  # published as it is ...
    assert a.oversubscribed == {0: (True, True)}  # ... and flagged


def test_fractional_shares_by_hand() -> None:
    st = states([{**H100, "memory_total_mib": 20000}])
    g0 = st[0].identity.uuid
    claims = [
        Claim(Holder("ml", "a", "m"), "nvidia.com/gpu", g0, cores=30, memory_mib=4000),
        Claim(Holder("ml", "b", "m"), "nvidia.com/gpu", g0, cores=None, memory_mib=5000),
        Claim(Holder("ml", "c", "m"), "nvidia.com/vgpu-8g", g0, memory_mib=30000),  # capped at 1
    ]
    a = attribute(st, claims, {}, lambda pid: None)
    u = Unit(0, None)
    got = {k[1].pod: (v, a.memory_shares[k]) for k, v in a.shares.items() if k[0] == u}
    assert got == {"a": (0.3, 0.2), "b": (0.25, 0.25), "c": (1.0, 1.0)}
    assert a.oversubscribed == {0: (True, True)}


def test_pod_watch_reads_hami_annotation_with_init_containers() -> None:
    raw: dict[str, Any] = {
        "metadata": {
            "uid": "u1",
            "namespace": "ml",
            "name": "p",
            "annotations": {
                "hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1000,10:;GPU-b,NVIDIA,2000,0:;;"
            },
        },
        "spec": {
            "initContainers": [{"name": "setup"}],
            "containers": [{"name": "main"}, {"name": "log"}],
        },
        "status": {"phase": "Running"},
    }
    info = pod_info(raw)
    assert {
        c: [(d.uuid, d.memory_mib, d.cores) for d in ds] for c, ds in info.fractional.items()
    } == {
        "setup": [("GPU-a", 1000, 10)],
        "main": [("GPU-b", 2000, None)],
    }
    raw["metadata"]["annotations"] = {"hami.io/vgpu-devices-allocated": 7}  # not text: ignored
    assert pod_info(raw).fractional == {}


@pytest.mark.parametrize(
    ("layout", "outcome", "held"),
    [
        (["3g.40gb", "2g.20gb"], "gpu", 3 / 7),  # one 3g.40gb on the GPU: that one
        (["3g.40gb", "3g.40gb"], "gpu", None),  # two: never guessed (unknown device id)
    ],
)
def test_partitionable_mig_device_without_uuid(
    tmp_path: Path, layout: list[str], outcome: str, held: float | None
) -> None:
    mig = [{"profile": p, "gi_id": i + 1} for i, p in enumerate(layout)]
    raw = {
        "hostname": "n",
        "gpus": [{**H100, "mig": mig}],
        "pods": [
            {
                "namespace": "ml",
                "name": "p",
                "containers": [
                    {"name": "main", "claims": [{"name": "c", "devices": ["gpu0/gi1"]}]}
                ],
            }
        ],
    }
    spec = parse(raw)
    fake = FakeNvml(spec)
    node = SimulatedNode(spec, fake, tmp_path)
    client = PodResourcesClient(node.socket_path)
    try:
        a = PodResourcesAssignments(client, lambda *_: None, slices=node.slices)
        # a dynamic-MIG partition: in the slice by its GPU and profile, without a uuid yet
        parent = fake.gpus[0].uuid
        partition = SliceDevice("gpu.nvidia.com", "n", "gpu-0-mig-1", "mig", "", parent, "3g.40gb")
        node.slices.replace([("s", [partition])])
        got = a.assignments()
        assert got is not None and got.dra_devices == {outcome: 1}
        shares = attribute(states([{**H100, "mig": mig}]), got.claims, {}, lambda pid: None)
        if held is None:
            assert shares.shares == {} and shares.unknown_device_ids == 1
        else:
            assert list(shares.shares.values()) == [pytest.approx(held)]
            assert next(iter(shares.shares))[0] == Unit(0, 1)
        # nothing to match it by: counted as such
        bare = SliceDevice("gpu.nvidia.com", "n", "gpu-0-mig-1", "mig", "")
        node.slices.replace([("s", [bare])])
        got = a.assignments()
        assert got is not None and got.dra_devices == {"no_uuid": 1} and got.claims == ()
    finally:
        client.close()
        node.stop()


@pytest.mark.parametrize("bad", ["nvidia.com/vgpu", "=8", "nvidia.com/vgpu=0", "x=y"])
def test_vgpu_profile_flag_is_checked_at_start(bad: str) -> None:
    from exporter.build import build
    from exporter.flags import UsageError, parse_settings

    settings = parse_settings(
        [
            "--simulate",
            str(ROOT / "examples" / "fleet-hami.yaml"),
            "--pod-resources.vgpu-profiles",
            bad,
        ],
        {},
    )
    with pytest.raises(UsageError, match="vgpu-profiles"):
        build(settings)
