"""The real collector over the fake NVML: values equal the spec at collection time, and the
faults behave as documented. Expected values are computed here from the spec by hand."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.conftest import ManualClock
from tests.exporter.helpers import rig, value

EPOCH = "2026-11-01T00:00:00Z"
EPOCH_TS = 1_793_491_200.0  # 2026-11-01T00:00:00Z as a Unix timestamp


def h100(**over: Any) -> dict[str, Any]:
    gpu: dict[str, Any] = {
        "model": "NVIDIA H100 80GB HBM3",
        "memory_total_mib": 81559,
        "memory_reserved_mib": 529,
        "memory_used_mib": {"points": [[0, 1000], [100, 51000]]},
        "utilization": {
            "gpu": {"points": [[0, 0], [100, 100]]},
            "memory": 40,
            "encoder": 3,
            "decoder": 7,
        },
        "power_w": 350,
        "power_limit_w": 700,
        "temperature_c": {"gpu": {"steps": [[0, 40], [50, 80]]}, "memory": 55},
        "clocks_mhz": {"sm": 1980, "memory": 2619},
        "energy_mj_at_start": 5_000_000,
        "pcie_replays": [{"t": 10, "count": 2}, {"t": 30, "count": 5}],
        "ecc": {
            "corrected_volatile": [{"t": 20, "count": 3}],
            "corrected_aggregate_base": 11,
            "uncorrected_aggregate_base": 1,
        },
        "remapped_rows": {"correctable": 2, "uncorrectable": 1, "pending": True},
        "xid": [{"t": 15, "xid": 48}, {"t": 25, "xid": 48}, {"t": 35, "xid": 94}],
        "clock_events": [
            {"from": 10, "to": 20, "reasons": ["sw_thermal_slowdown"]},
            {"from": 15, "to": 30, "reasons": ["hw_thermal_slowdown", "sw_power_cap"]},
        ],
        "nvlink": {
            "links": 4,
            "errors": [
                {"t": 5, "link": 2, "counter": "crc_flit", "count": 12},
                {"t": 5, "link": 3, "counter": "crc_flit", "count": 1},
                {"t": 50, "link": 0, "counter": "replay"},
            ],
        },
    }
    gpu.update(over)
    return gpu


def fleet(*gpus: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "hostname": "node-a",
        "driver_version": "550.90.07",
        "epoch": EPOCH,
        "gpus": list(gpus),
        **top,
    }


@pytest.fixture
def at_epoch() -> ManualClock:
    return ManualClock(EPOCH_TS)


def test_values_equal_the_spec_at_collection_time(at_epoch: ManualClock) -> None:
    r = rig(fleet(h100()), at_epoch)
    at_epoch.advance(40.0)  # t = 40 s into the spec
    m = r.collect()
    g = {"gpu": "0"}
    # gauges: linear curves at t=40, steps, constants
    assert value(m, "DCGM_FI_DEV_GPU_UTIL", **g) == 40  # 0 -> 100 over 100 s
    assert value(m, "DCGM_FI_DEV_MEM_COPY_UTIL", **g) == 40
    assert value(m, "DCGM_FI_DEV_ENC_UTIL", **g) == 3
    assert value(m, "DCGM_FI_DEV_DEC_UTIL", **g) == 7
    used = 1000 + (51000 - 1000) * 40 / 100
    assert value(m, "DCGM_FI_DEV_FB_USED", **g) == used
    assert value(m, "DCGM_FI_DEV_FB_RESERVED", **g) == 529
    assert value(m, "DCGM_FI_DEV_FB_FREE", **g) == 81559 - 529 - used
    assert value(m, "DCGM_FI_DEV_FB_TOTAL", **g) == 81559
    assert value(m, "DCGM_FI_DEV_GPU_TEMP", **g) == 40  # the step to 80 comes at t=50
    assert value(m, "DCGM_FI_DEV_MEMORY_TEMP", **g) == 55
    assert value(m, "DCGM_FI_DEV_POWER_USAGE", **g) == 350
    assert value(m, "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", **g) == 700
    assert value(m, "DCGM_FI_DEV_SM_CLOCK", **g) == 1980
    assert value(m, "DCGM_FI_DEV_MEM_CLOCK", **g) == 2619
    # counters, exactly: energy = start + 350 W * 40 s in mJ
    assert value(m, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", **g) == 5_000_000 + 350 * 40 * 1000
    assert value(m, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", **g) == 7
    assert value(m, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", **g) == 3
    assert value(m, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", **g) == 0
    assert value(m, "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", **g) == 14
    assert value(m, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", **g) == 1
    assert value(m, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", **g) == 2
    assert value(m, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", **g) == 1
    assert value(m, "DCGM_FI_DEV_ROW_REMAP_PENDING", **g) == 1
    assert value(m, "DCGM_FI_DEV_ROW_REMAP_FAILURE", **g) == 0
    # thermal violation: [10, 30) merged = 20 s; power: [15, 30) = 15 s; in nanoseconds, as
    # DCGM 4.x publishes them (dcgm_fields.h: "Power Violation time in ns")
    assert value(m, "DCGM_FI_DEV_THERMAL_VIOLATION", **g) == 20_000_000_000
    assert value(m, "DCGM_FI_DEV_POWER_VIOLATION", **g) == 15_000_000_000
    assert value(m, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", **g) == 0  # nothing active at t=40
    assert value(m, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", **g) == 13
    assert value(m, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L2", **g) == 12
    assert value(m, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", **g) == 0  # comes at t=50
    assert value(m, "gpu_device_up", **g) == 1


def test_xid_events_after_start_are_counted_by_code(at_epoch: ManualClock) -> None:
    r = rig(fleet(h100()), at_epoch)
    at_epoch.advance(20.0)
    m = r.collect()  # discovery happens here, at t=20: the XID at t=15 came before it
    assert value(m, "DCGM_FI_DEV_XID_ERRORS", gpu="0") == 0
    assert "gpu_xid_errors_total" not in m
    at_epoch.advance(20.0)  # t=40: XID 48 at 25 and XID 94 at 35, delivered in the background
    m = r.collect_until(lambda m: value(m, "gpu_xid_errors_total", gpu="0", xid="94") == 1)
    assert value(m, "gpu_xid_errors_total", gpu="0", xid="48") == 1
    assert value(m, "DCGM_FI_DEV_XID_ERRORS", gpu="0") == 94  # the last one


def test_clock_event_reasons_decode_into_named_series(at_epoch: ManualClock) -> None:
    r = rig(fleet(h100()), at_epoch)
    at_epoch.advance(16.0)  # both intervals are active
    m = r.collect()
    expected_mask = 0x20 | 0x40 | 0x4
    assert value(m, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", gpu="0") == expected_mask
    active = {s.labels["reason"] for s in m["gpu_clock_event_reason_active"] if s.value == 1}
    assert active == {"sw_thermal_slowdown", "hw_thermal_slowdown", "sw_power_cap"}


def test_energy_counter_integrates_a_varying_power_curve_exactly(at_epoch: ManualClock) -> None:
    # power rises linearly 100 W -> 500 W over 60 s, then holds: ∫ at t=90 = 18000 + 15000 J
    r = rig(fleet(h100(power_w={"points": [[0, 100], [60, 500]]}, energy_mj_at_start=0)), at_epoch)
    at_epoch.advance(90.0)
    m = r.collect()
    assert value(m, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu="0") == 33_000_000


def test_lost_gpu_reports_down_while_the_others_keep_reporting(at_epoch: ManualClock) -> None:
    r = rig(fleet(h100(count=3), h100(lost_at=30)), at_epoch)
    at_epoch.advance(10.0)
    m = r.collect()
    assert [value(m, "gpu_device_up", gpu=str(i)) for i in range(4)] == [1, 1, 1, 1]
    assert value(m, "DCGM_FI_DEV_POWER_USAGE", gpu="3") == 350
    at_epoch.advance(30.0)  # t=40: GPU 3 fell off the bus at t=30
    m = r.collect()
    assert [value(m, "gpu_device_up", gpu=str(i)) for i in range(4)] == [1, 1, 1, 0]
    assert value(m, "DCGM_FI_DEV_POWER_USAGE", gpu="3") is None
    assert value(m, "DCGM_FI_DEV_GPU_TEMP", gpu="3") is None
    assert all(value(m, "DCGM_FI_DEV_POWER_USAGE", gpu=str(i)) == 350 for i in range(3))
    # the lost GPU keeps its identity labels, so alerts can name it
    down = next(s for s in m["gpu_device_up"] if s.value == 0)
    assert down.labels["UUID"].startswith("GPU-")
    assert down.labels["modelName"] == "NVIDIA H100 80GB HBM3"
    assert value(m, "gpu_exporter_errors_total", source="nvml", kind="gpu_lost") == 1
    at_epoch.advance(5.0)
    m = r.collect()  # still down on the next collection, counted again
    assert value(m, "gpu_device_up", gpu="3") == 0
    assert value(m, "gpu_exporter_errors_total", source="nvml", kind="gpu_lost") == 2


def test_unsupported_field_is_absent_for_that_gpu_only(at_epoch: ManualClock) -> None:
    r = rig(
        fleet(
            h100(),
            h100(
                model="NVIDIA L4",
                unsupported=["memory_temperature", "nvlink", "ecc", "memory_reserved"],
                nvlink={"links": 0},
            ),
        ),
        at_epoch,
    )
    at_epoch.advance(40.0)
    m = r.collect()
    assert value(m, "DCGM_FI_DEV_MEMORY_TEMP", gpu="0") == 55
    assert value(m, "DCGM_FI_DEV_MEMORY_TEMP", gpu="1") is None
    assert value(m, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", gpu="1") is None
    assert value(m, "DCGM_FI_DEV_FB_RESERVED", gpu="1") is None
    assert value(m, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", gpu="1") is None
    # without the v2 memory call, used and free still come from v1 and add up
    assert value(m, "DCGM_FI_DEV_FB_USED", gpu="1") == 21000 + 529
    assert value(m, "DCGM_FI_DEV_GPU_TEMP", gpu="1") == 40
    assert value(m, "gpu_device_up", gpu="1") == 1
    # "not supported" is not an error
    assert value(m, "gpu_exporter_errors_total", source="nvml", kind="query") == 0


def test_unsupported_is_logged_once_per_device_and_function(
    at_epoch: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    r = rig(fleet(h100(count=2, unsupported=["power"])), at_epoch)
    caplog.set_level("INFO", logger="exporter.nvml")
    for _ in range(5):
        at_epoch.advance(5.0)
        r.collect()
    lines = [rec.getMessage() for rec in caplog.records if "not supported" in rec.getMessage()]
    assert sorted(lines) == [
        "GPU 0: nvmlDeviceGetPowerUsage is not supported; its series are left out",
        "GPU 1: nvmlDeviceGetPowerUsage is not supported; its series are left out",
    ]


def test_nvml_init_failure_keeps_self_metrics_and_retries_with_backoff(
    at_epoch: ManualClock,
) -> None:
    r = rig(fleet(h100(), nvml_init_fails_until=20), at_epoch, init_backoff=(2.0, 8.0))
    attempts_at = []
    for _ in range(12):  # t = 0 .. 22 in steps of 2
        before = r.fake.calls
        m = r.collect()
        if r.fake.calls > before:
            attempts_at.append(r.fake.sim_time())
        if value(m, "gpu_exporter_nvml_up") == 1:
            break
        assert "DCGM_FI_DEV_GPU_TEMP" not in m
        assert value(m, "gpu_exporter_collections_total") is not None
        at_epoch.advance(2.0)
    # back-off doubles 2 -> 4 -> 8 and stays at the cap: tries at 0, 2, 6, 14, then 22
    assert attempts_at == [0.0, 2.0, 6.0, 14.0, 22.0]
    assert value(m, "gpu_exporter_nvml_up") == 1
    assert value(m, "gpu_exporter_errors_total", source="nvml", kind="init") == 4
    assert value(m, "DCGM_FI_DEV_GPU_TEMP", gpu="0") == 40


HOSTILE = ['Quote"Model', "Back\\slash", "New\nLine", "Ünïcødé ✓ 显卡", 'x\\"\n✓']


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_model_and_host_names_come_out_intact(at_epoch: ManualClock, text: str) -> None:
    r = rig({**fleet(h100(model=text)), "hostname": f"host-{text}"}, at_epoch)
    at_epoch.advance(1.0)
    m = r.collect()
    temps = m["DCGM_FI_DEV_GPU_TEMP"]
    assert len(temps) == 1
    assert temps[0].labels["modelName"] == text
    assert temps[0].labels["Hostname"] == f"host-{text}"


def test_collectors_can_be_switched_off(at_epoch: ManualClock) -> None:
    r = rig(fleet(h100()), at_epoch, collectors={"utilization", "power"})
    at_epoch.advance(1.0)
    m = r.collect()
    assert value(m, "DCGM_FI_DEV_GPU_UTIL", gpu="0") is not None
    assert value(m, "DCGM_FI_DEV_POWER_USAGE", gpu="0") is not None
    for off in (
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_XID_ERRORS",
    ):
        assert off not in m


def test_self_metrics_exist_before_any_error(at_epoch: ManualClock) -> None:
    r = rig(fleet(h100()), at_epoch)
    m = r.collect()
    kinds = {(s.labels["source"], s.labels["kind"]) for s in m["gpu_exporter_errors_total"]}
    assert {("nvml", "init"), ("nvml", "gpu_lost"), ("nvml", "query")} <= kinds
    assert all(s.value == 0 for s in m["gpu_exporter_errors_total"])
    assert value(m, "gpu_exporter_last_success_timestamp_seconds") == at_epoch.t
    assert value(m, "gpu_exporter_collection_duration_seconds_count") == 1
    assert value(m, "gpu_exporter_build_info") == 1
    assert value(m, "gpu_exporter_gpus") == 1


def test_sine_curve_matches_its_formula(at_epoch: ManualClock) -> None:
    r = rig(fleet(h100(power_w={"sine": {"min": 200, "max": 600, "period": 80}})), at_epoch)
    at_epoch.advance(20.0)  # a quarter period: the peak
    m = r.collect()
    expected = 200 + 400 * (1 + math.sin(2 * math.pi * 20 / 80)) / 2
    assert value(m, "DCGM_FI_DEV_POWER_USAGE", gpu="0") == pytest.approx(expected, abs=1e-3)
