"""MIG instances and GPM profiling series, over real H100 80GB profiles."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.nvml.library import lib as pynvml
from exporter.simulate.fake_nvml import FakeNvml
from exporter.simulate.mig_profiles import profiles_for
from tests.conftest import ManualClock
from tests.exporter.helpers import rig, value

EPOCH = "2026-11-01T00:00:00Z"
EPOCH_TS = 1_793_491_200.0
H100 = "NVIDIA H100 80GB HBM3"
DEVICE_ONLY = (
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_MEMORY_TEMP",
)


def node(*gpus: dict[str, Any]) -> dict[str, Any]:
    return {"hostname": "mig-node", "epoch": EPOCH, "gpus": list(gpus)}


def h100(mig: list[dict[str, Any]] | None = None, **over: Any) -> dict[str, Any]:
    return {"model": H100, "memory_total_mib": 81559, "power_w": 400, "mig": mig, **over}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(EPOCH_TS)


def instances(m: dict[str, list[Any]]) -> list[dict[str, str]]:
    return sorted(
        (s.labels for s in m.get("gpu_mig_instance_info", [])), key=lambda lab: int(lab["GPU_I_ID"])
    )


def test_seven_1g10gb_instances(clock: ManualClock) -> None:
    layout = [{"profile": "1g.10gb", "memory_used_mib": 1000 * (i + 1)} for i in range(7)]
    r = rig(node(h100(layout)), clock)
    clock.advance(5)
    m = r.collect()
    info = instances(m)
    assert [lab["GPU_I_PROFILE"] for lab in info] == ["1g.10gb"] * 7
    assert {lab["compute_slices"] for lab in info} == {"1"}
    assert {lab["memory_slices"] for lab in info} == {"1"}
    assert len({lab["mig_uuid"] for lab in info}) == 7
    assert all(lab["mig_uuid"].startswith("MIG-") for lab in info)
    used = sorted(s.value for s in m["DCGM_FI_DEV_FB_USED"])
    assert used == [1000.0 * (i + 1) for i in range(7)]
    assert all("GPU_I_ID" in s.labels for s in m["DCGM_FI_DEV_FB_USED"])  # no parent FB
    assert {s.value for s in m["DCGM_FI_DEV_FB_TOTAL"]} == {9856}
    # device-only fields: once for the physical GPU, never per instance
    for name in DEVICE_ONLY:
        assert len(m[name]) == 1, name
        assert "GPU_I_ID" not in m[name][0].labels
    # NVML has no device utilisation while MIG is on: absent, not zero
    assert "DCGM_FI_DEV_GPU_UTIL" not in m


def test_mixed_layout_fills_the_gpu(clock: ManualClock) -> None:
    layout = [
        {"profile": "3g.40gb"},
        {"profile": "2g.20gb"},
        {"profile": "1g.10gb"},
        {"profile": "1g.10gb"},
    ]
    r = rig(node(h100(layout)), clock)
    m = r.collect()
    info = instances(m)
    assert [lab["GPU_I_PROFILE"] for lab in info] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert sum(int(lab["compute_slices"]) for lab in info) == 7
    assert sum(int(lab["memory_slices"]) for lab in info) == 8
    assert [int(lab["memory_slices"]) for lab in info] == [4, 2, 1, 1]


def test_instances_created_and_destroyed_at_run_time(clock: ManualClock) -> None:
    layout = [
        {"profile": "4g.40gb", "destroyed_at": 30},
        {"profile": "3g.40gb"},
        {"profile": "4g.40gb", "created_at": 60, "gi_id": 5},
    ]
    r = rig(node(h100(layout)), clock)
    clock.advance(10)
    assert [lab["GPU_I_PROFILE"] for lab in instances(r.collect())] == ["4g.40gb", "3g.40gb"]
    clock.advance(30)  # t=40: the first 4g.40gb is gone
    assert [lab["GPU_I_PROFILE"] for lab in instances(r.collect())] == ["3g.40gb"]
    clock.advance(30)  # t=70: a new one, without a restart
    got = [(lab["GPU_I_ID"], lab["GPU_I_PROFILE"]) for lab in instances(r.collect())]
    assert got == [("2", "3g.40gb"), ("5", "4g.40gb")]


def test_gpm_values_are_means_between_two_samples(clock: ManualClock) -> None:
    gpm = {
        "gr_engine_active": {"points": [[0, 0], [100, 1]]},
        "sm_active": 0.5,
        "sm_occupancy": 0.25,
        "tensor_active": 0.125,
        "dram_active": 0.75,
        "pcie_tx_bytes": 3 * 2**20,
        "pcie_rx_bytes": 5 * 2**20,
    }
    r = rig(node(h100(gpm=gpm)), clock)
    clock.advance(10)
    m = r.collect()
    # one sample is not a rate: the series are absent, not zero
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in m
    clock.advance(10)
    m = r.collect()
    # mean of the 0 -> 1 ramp over [10 s, 20 s]
    assert value(m, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="0") == pytest.approx(0.15)
    assert value(m, "DCGM_FI_PROF_SM_ACTIVE", gpu="0") == pytest.approx(0.5)
    assert value(m, "DCGM_FI_PROF_SM_OCCUPANCY", gpu="0") == pytest.approx(0.25)
    assert value(m, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", gpu="0") == pytest.approx(0.125)
    assert value(m, "DCGM_FI_PROF_DRAM_ACTIVE", gpu="0") == pytest.approx(0.75)
    assert value(m, "DCGM_FI_PROF_PCIE_TX_BYTES", gpu="0") == pytest.approx(3 * 2**20)
    assert value(m, "DCGM_FI_PROF_PCIE_RX_BYTES", gpu="0") == pytest.approx(5 * 2**20)


def test_gpm_per_mig_instance(clock: ManualClock) -> None:
    layout = [
        {"profile": "3g.40gb", "gpm": {"gr_engine_active": 0.9}},
        {"profile": "4g.40gb", "gpm": {"gr_engine_active": 0.2}},
    ]
    r = rig(node(h100(layout)), clock)
    r.collect()
    clock.advance(5)
    m = r.collect()
    active = {s.labels["GPU_I_PROFILE"]: s.value for s in m["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]}
    assert active == pytest.approx({"3g.40gb": 0.9, "4g.40gb": 0.2})


@pytest.mark.parametrize(
    "over",
    [
        {"model": "NVIDIA L4", "memory_total_mib": 23034},
        {"gpm": {"sm_active": 0.5}, "unsupported": ["gpm"]},
    ],
)
def test_profiling_absent_where_unsupported(clock: ManualClock, over: dict[str, Any]) -> None:
    r = rig(node(h100(**over)), clock)
    r.collect()
    clock.advance(5)
    m = r.collect()
    assert not [k for k in m if k.startswith("DCGM_FI_PROF_")]
    assert "gpu_mig_instance_info" not in m
    assert value(m, "DCGM_FI_DEV_POWER_USAGE", gpu="0") == 400


def test_gpm_samples_are_freed(clock: ManualClock) -> None:
    layout = [{"profile": "7g.80gb", "destroyed_at": 12}, {"profile": "1g.10gb", "created_at": 12}]
    r = rig(node(h100(layout)), clock)
    for _ in range(6):
        r.collect()
        clock.advance(5)
    live = [v for v in r.fake._gpm_samples.values() if v[0] >= 0]
    assert len(live) == 1  # only the previous sample of the one live instance is kept
    r.exporter.close()
    assert r.fake._gpm_samples == {}


class OldDriverNvml(FakeNvml):
    """A driver without nvmlDeviceGetGpuInstanceProfileInfoByIdV."""

    def nvmlDeviceGetGpuInstanceProfileInfoById(self, handle: Any, profile_id: int) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)


def test_profile_names_without_the_by_id_lookup(clock: ManualClock) -> None:
    from exporter.catalogue import COLLECTORS
    from exporter.collection import Exporter
    from exporter.nvml.boundary import Nvml
    from exporter.simulate.spec import parse
    from tests.exporter.helpers import samples

    layout = [{"profile": "3g.40gb"}, {"profile": "2g.20gb"}, {"profile": "1g.20gb"}]
    fake = OldDriverNvml(parse(node(h100(layout))), now=clock)
    exporter = Exporter(Nvml(fake), "n", COLLECTORS, 5.0, clock=clock, monotonic=clock)
    exporter.collect_once()
    m = samples(exporter.exposition.body("openmetrics").decode())
    assert [lab["GPU_I_PROFILE"] for lab in instances(m)] == ["3g.40gb", "2g.20gb", "1g.20gb"]


def test_mig_mode_switched_on_while_the_exporter_runs(clock: ManualClock) -> None:
    """`nvidia-smi -mig 1` at t=20, then two instances created at t=30: no restart needed."""
    layout = [{"profile": "3g.40gb", "created_at": 30}, {"profile": "2g.20gb", "created_at": 30}]
    spec = h100(layout, mig_enabled_at=20, utilization={"gpu": 50}, memory_used_mib=7000)
    r = rig(node(spec), clock)
    clock.advance(10)
    m = r.collect()
    assert value(m, "DCGM_FI_DEV_GPU_UTIL", gpu="0") == 50
    assert value(m, "DCGM_FI_DEV_FB_USED", gpu="0") == 7000
    assert instances(m) == []
    clock.advance(15)  # t=25: MIG mode is on, no instance yet
    m = r.collect()
    assert value(m, "DCGM_FI_DEV_GPU_UTIL", gpu="0") is None  # no device utilisation in MIG
    assert "DCGM_FI_DEV_FB_USED" not in m  # memory belongs to the instances now
    clock.advance(10)  # t=35: the instances exist: this very collection shows them
    m = r.collect()
    assert [lab["GPU_I_PROFILE"] for lab in instances(m)] == ["3g.40gb", "2g.20gb"]
    assert sorted(s.labels["GPU_I_PROFILE"] for s in m["DCGM_FI_DEV_FB_TOTAL"]) == [
        "2g.20gb",
        "3g.40gb",
    ]
    assert value(m, "DCGM_FI_DEV_POWER_USAGE", gpu="0") == 400  # device-only, still once


PROFILES = [
    (model, total, profile)
    for model, total in (
        ("NVIDIA H100 80GB HBM3", 81559),
        ("NVIDIA A100-SXM4-80GB", 81920),
        ("NVIDIA A100-SXM4-40GB", 40960),
        ("NVIDIA A100-PCIE-40GB", 40536),
    )
    for profile in profiles_for(model) or {}
]


@pytest.mark.parametrize(("model", "total", "profile"), PROFILES)
def test_profile_names_stay_canonical_without_the_gpu_instance_lookup(
    clock: ManualClock, model: str, total: int, profile: str
) -> None:
    """Without the MIG monitor capability NVML answers NO_PERMISSION to the GPU-instance
    lookup: the name and memory slices come from the MIG device's attributes, as NVIDIA's
    device plugin derives them, and the refusal is counted."""
    gpu = {"model": model, "memory_total_mib": total, "mig": [{"profile": profile}]}
    r = rig(node({**gpu, "denied": ["gpu_instances"]}), clock)
    m = r.collect()
    (info,) = instances(m)
    real = profiles_for(model)[profile]  # type: ignore[index]
    assert info["GPU_I_PROFILE"] == profile
    assert (info["compute_slices"], info["memory_slices"]) == (
        str(real.compute_slices),
        str(real.memory_slices),
    )
    assert value(m, "gpu_exporter_errors_total", source="nvml", kind="no_permission") == 1
    allowed = rig(node(gpu), clock).collect()  # with the capability: NVML's own name
    assert [lab["GPU_I_PROFILE"] for lab in instances(allowed)] == [profile]
    assert value(allowed, "gpu_exporter_errors_total", source="nvml", kind="no_permission") == 0
