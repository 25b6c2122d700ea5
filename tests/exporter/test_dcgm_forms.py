"""Series as DCGM 4.x and dcgm-exporter 4.x publish them, scraped over HTTP: XIDs from the
event set with ``err_code``/``err_msg``, XID 79 for a GPU off the bus, NVLink bandwidth in
DCGM's unit, and the host label's name."""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml

from exporter.catalogue import SCALAR_SERIES
from exporter.flags import UsageError, parse_settings
from tests.conftest import ManualClock
from tests.exporter.helpers import labels_of, rig, value
from tests.exporter.test_collector import EPOCH_TS, fleet, h100
from tests.procs import ROOT


@pytest.fixture
def at_epoch() -> ManualClock:
    return ManualClock(EPOCH_TS)


def wait_for(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)  # polling interval while the listener thread catches up


def test_xid_series_carry_dcgm_exporters_err_code_and_err_msg(at_epoch: ManualClock) -> None:
    r = rig(fleet(h100(xid=[{"t": 15, "xid": 48}, {"t": 25, "xid": 250}])), at_epoch)
    at_epoch.advance(1.0)
    m = r.collect()
    # before any XID: 0, "No Error" (dcgm-exporter's table entry 0)
    assert labels_of(m, "DCGM_FI_DEV_XID_ERRORS", gpu="0", err_code="0") is not None
    assert labels_of(m, "DCGM_FI_DEV_XID_ERRORS", gpu="0")["err_msg"] == "No Error"  # type: ignore[index]
    at_epoch.advance(19.0)  # t=20: XID 48
    m = r.collect_until(lambda m: value(m, "DCGM_FI_DEV_XID_ERRORS", gpu="0") == 48)
    xid = labels_of(m, "DCGM_FI_DEV_XID_ERRORS", gpu="0")
    assert xid is not None
    assert (xid["err_code"], xid["err_msg"]) == ("48", "Double Bit ECC Error")
    assert xid["UUID"].startswith("GPU-") and xid["Hostname"] == "node-a"
    at_epoch.advance(10.0)  # t=30: an XID past dcgm-exporter's table
    m = r.collect_until(lambda m: value(m, "DCGM_FI_DEV_XID_ERRORS", gpu="0") == 250)
    assert labels_of(m, "DCGM_FI_DEV_XID_ERRORS", gpu="0")["err_msg"] == "Unknown Error"  # type: ignore[index]
    assert value(m, "gpu_xid_errors_total", gpu="0", xid="48") == 1


def test_xids_are_taken_from_nvml_between_collections(at_epoch: ManualClock) -> None:
    """The event set is waited on by a background thread: an XID leaves NVML when it happens,
    not when the next collection polls."""
    r = rig(fleet(h100(count=2, xid=[{"t": 12, "xid": 94}])), at_epoch)
    at_epoch.advance(5.0)
    r.collect()
    assert r.fake.events_delivered == []
    at_epoch.advance(10.0)  # t=15: no collection runs from here on until the events are taken
    wait_for(lambda: sorted(r.fake.events_delivered) == [(0, 94), (1, 94)])
    m = r.scrape()  # the last collection's exposition: nothing yet
    assert value(m, "gpu_xid_errors_total", gpu="0", xid="94") is None
    m = r.collect()  # the next collection publishes what the listener holds
    assert value(m, "gpu_xid_errors_total", gpu="0", xid="94") == 1
    assert value(m, "gpu_xid_errors_total", gpu="1", xid="94") == 1


@pytest.mark.parametrize("events", [True, False], ids=["xid-event", "no-event-support"])
def test_a_gpu_off_the_bus_shows_xid_79_and_is_down(at_epoch: ManualClock, events: bool) -> None:
    lost = h100(xid=[], lost_at=20, unsupported=[] if events else ["xid_events"])
    r = rig(fleet(h100(xid=[]), lost), at_epoch)
    at_epoch.advance(10.0)
    m = r.collect()
    assert value(m, "gpu_device_up", gpu="1") == 1
    if not events:  # nothing listens to this GPU's XIDs: no XID series until it is lost
        assert value(m, "DCGM_FI_DEV_XID_ERRORS", gpu="1") is None
    at_epoch.advance(15.0)  # t=25: GPU 1 fell off the bus at t=20

    def lost_and_79(m: dict[str, list[Any]]) -> bool:
        return value(m, "DCGM_FI_DEV_XID_ERRORS", gpu="1") == 79 and (
            not events or (1, 79) in r.fake.events_delivered
        )

    m = r.collect_until(lost_and_79)
    assert value(m, "gpu_device_up", gpu="1") == 0
    assert value(m, "DCGM_FI_DEV_POWER_USAGE", gpu="1") is None
    xid = labels_of(m, "DCGM_FI_DEV_XID_ERRORS", gpu="1")
    assert xid is not None and xid["err_msg"] == "GPU has fallen off the bus"
    # the driver's event and the lost read are the same loss: counted once
    m = r.collect()
    assert value(m, "gpu_xid_errors_total", gpu="1", xid="79") == 1
    assert value(m, "gpu_device_up", gpu="0") == 1
    assert value(m, "DCGM_FI_DEV_XID_ERRORS", gpu="0") == 0


def test_nvlink_bandwidth_in_dcgms_unit(at_epoch: ManualClock) -> None:
    # RX 1000 KiB/s, TX rising linearly 0 -> 6000 KiB/s over 60 s; GPU 1 has no NVLink
    nvlink = {
        "links": 18,
        "rx_kib_per_s": 1000,
        "tx_kib_per_s": {"points": [[0, 0], [60, 6000]]},
    }
    r = rig(fleet(h100(nvlink=nvlink), h100(model="NVIDIA L4", nvlink={"links": 0})), at_epoch)
    at_epoch.advance(10.0)
    m = r.collect()
    assert value(m, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", gpu="0") is None  # a rate needs two
    at_epoch.advance(20.0)  # t=30
    m = r.collect()
    # DCGM: (KiB at t=30 - KiB at t=10) / 20 s / 1000; TX integral: 50 t^2 KiB
    kib = 1000 * 20 + 50 * (30**2 - 10**2)
    assert value(m, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", gpu="0") == pytest.approx(
        kib / 20 / 1000, abs=1e-3
    )
    assert value(m, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", gpu="1") is None
    _, text = r.get()
    assert "# TYPE DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL counter\n" in text


def test_hostname_label_can_be_hostname(at_epoch: ManualClock) -> None:
    r = rig(fleet(h100()), at_epoch, hostname_label="hostname")
    at_epoch.advance(1.0)
    m = r.collect()
    for name in ("DCGM_FI_DEV_GPU_TEMP", "gpu_device_up", "DCGM_FI_DEV_XID_ERRORS"):
        labels = labels_of(m, name, gpu="0")
        assert labels is not None
        assert labels["hostname"] == "node-a" and "Hostname" not in labels
    r2 = rig(fleet(h100()), at_epoch)  # the default stays what released dashboards use
    m = r2.collect()
    assert labels_of(m, "DCGM_FI_DEV_GPU_TEMP", gpu="0")["Hostname"] == "node-a"  # type: ignore[index]


def test_hostname_label_flag_and_its_twin() -> None:
    assert parse_settings([], {}).hostname_label == "Hostname"
    assert parse_settings(["--hostname-label", "hostname"], {}).hostname_label == "hostname"
    env = {"GPU_EXPORTER_HOSTNAME_LABEL": "hostname"}
    assert parse_settings([], env).hostname_label == "hostname"
    with pytest.raises(UsageError, match="--hostname-label 'host'"):
        parse_settings(["--hostname-label", "host"], {})


PROF = [s.name for s in SCALAR_SERIES if s.collector == "profiling"]


@pytest.mark.parametrize(
    ("example", "profiled"),
    [("fleet-h100x8.yaml", True), ("fleet-mixed.yaml", False)],
    ids=["hopper", "ampere-ada-turing"],
)
def test_profiling_series_exist_on_hopper_only(
    at_epoch: ManualClock, example: str, profiled: bool
) -> None:
    """NVML GPM is Hopper and newer: the H100 example publishes every DCGM_FI_PROF_* series
    as a real H100 does, the A100/L4/T4 example none (docs/metrics.md, README)."""
    raw = yaml.safe_load((ROOT / "examples" / example).read_text())
    r = rig({**raw, "epoch": "2026-11-01T00:00:00Z"}, at_epoch)
    at_epoch.advance(5.0)
    r.collect()
    at_epoch.advance(5.0)
    m = r.collect()  # GPM values are between two samples: from the second collection
    gpus = {s.labels["gpu"] for s in m["gpu_device_up"]}
    for name in PROF:
        got = {s.labels["gpu"] for s in m.get(name, [])}
        assert got == (gpus if profiled else set()), name
