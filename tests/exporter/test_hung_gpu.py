"""A GPU whose NVML calls block forever: the others keep being read every collection, the hung
one is reported down within three collection intervals (its value series gone, the stuck read
counted, /health saying why), and it comes back by itself when the driver answers again."""

from __future__ import annotations

import re
import signal
import time
import urllib.request
from typing import Any

import pytest

from tests.conftest import ManualClock
from tests.exporter.helpers import rig, value
from tests.exporter.test_collector import EPOCH_TS, fleet, h100
from tests.procs import ROOT, start_exporter

INTERVAL = 5.0  # the rig's collection interval: the bound is 3 x 5 s


def gpus(n: int) -> dict[str, Any]:
    # utilisation climbs 1 %/s, so every collection of a live GPU reads a new value
    ramp = {"utilization": {"gpu": {"points": [[0, 0], [100, 100]]}}, "xid": []}
    return fleet(h100(count=n, **ramp))


def utils(m: dict[str, list[Any]], n: int) -> list[float | None]:
    return [value(m, "DCGM_FI_DEV_GPU_UTIL", gpu=str(i)) for i in range(n)]


def test_a_hung_gpu_is_reported_down_within_the_bound_and_recovers() -> None:
    clock = ManualClock(EPOCH_TS)
    r = rig(gpus(3), clock, read_wait=0.3)
    clock.advance(5)
    m = r.collect()
    assert utils(m, 3) == [5, 5, 5]

    r.fake.block(1)  # from now on every NVML call about GPU 1 blocks
    seen = []
    for t in (10, 15, 20):  # out for 0, 5, 10 s: within the bound, the last read is served
        clock.advance(5)
        started = time.monotonic()
        m = r.collect()
        assert time.monotonic() - started < 5, "a hung GPU stalled the collection"
        assert value(m, "gpu_device_up", gpu="1") == 1
        assert value(m, "DCGM_FI_DEV_GPU_UTIL", gpu="1") == 5  # its last read, not a new one
        seen.append(utils(m, 3))
        assert seen[-1][0] == seen[-1][2] == t  # the others: read every collection
    assert value(m, "gpu_exporter_errors_total", source="nvml", kind="timeout") == 0

    clock.advance(6)  # t=26: GPU 1's read has been out 16 s > 15 s
    m = r.collect()
    assert value(m, "gpu_device_up", gpu="1") == 0
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP"):
        assert value(m, name, gpu="1") is None, name
    assert utils(m, 3)[0] == 26 and utils(m, 3)[2] == 26
    assert value(m, "gpu_exporter_errors_total", source="nvml", kind="timeout") == 1
    down = next(s for s in m["gpu_device_up"] if s.value == 0)
    assert down.labels["UUID"].startswith("GPU-")  # still named, so alerts can say which
    status, health = r.get("/health")
    assert status == 200  # the exporter is fine: restarting it would not help
    assert re.search(
        r"degraded: GPU 1 \(GPU-[0-9a-f-]+\): NVML has not answered for 16 s \(bound 15 s\)",
        health,
    ), health

    clock.advance(5)  # still hung: still down, the stuck read counted once
    m = r.collect()
    assert value(m, "gpu_device_up", gpu="1") == 0
    assert value(m, "gpu_exporter_errors_total", source="nvml", kind="timeout") == 1
    assert utils(m, 3)[0] == 31

    r.fake.unblock(1)  # the driver answers again
    clock.advance(5)
    m = r.collect_until(lambda m: value(m, "gpu_device_up", gpu="1") == 1)
    assert value(m, "DCGM_FI_DEV_GPU_UTIL", gpu="1") == 36  # a fresh read, not the stuck one
    status, health = r.get("/health")
    assert (status, health) == (200, "ok\n")


def test_a_gpu_hung_from_the_start_does_not_stop_the_others() -> None:
    clock = ManualClock(EPOCH_TS)
    r = rig(gpus(2), clock, read_wait=0.3)
    r.fake.block(0)  # hangs before its first read: its identity is not known yet
    clock.advance(5)
    m = r.collect()
    assert value(m, "gpu_device_up", gpu="0") is None  # nothing to say yet, within the bound
    assert utils(m, 2)[1] == 5
    clock.advance(16)
    m = r.collect()
    assert value(m, "gpu_device_up", gpu="0") == 0
    assert utils(m, 2) == [None, 21]
    r.fake.unblock(0)
    clock.advance(5)
    m = r.collect_until(lambda m: value(m, "gpu_device_up", gpu="0") == 1)
    assert utils(m, 2) == [26, 26]


@pytest.mark.timeout(60)
def test_simulated_hang_in_the_real_process() -> None:
    """`gpu-exporter --simulate` with a spec whose GPU hangs: the real process, over HTTP."""
    spec = ROOT / "tests" / "exporter" / "data" / "hung-gpu.yaml"
    proc, port = start_exporter("--simulate", str(spec), "--collect-interval", "1s")

    def get(path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return str(resp.read().decode())

    try:
        proc.wait_for(r"NVML has not answered for \d+ s; reported down", timeout=30)
        deadline = time.monotonic() + 10
        down = re.compile(r'^gpu_device_up\{gpu="1",[^}]*\} 0$', re.M)
        while not down.search(text := get("/metrics")):  # published after the log line
            assert time.monotonic() < deadline, text
            time.sleep(0.1)  # polling interval: the next collection is at most 1 s away
        assert re.search(r'^gpu_device_up\{gpu="0",[^}]*\} 1$', text, re.M)
        assert not re.search(r'^DCGM_FI_DEV_GPU_TEMP\{gpu="1",', text, re.M)
        assert "degraded: GPU 1" in get("/health")
        started = time.monotonic()
        proc.proc.send_signal(signal.SIGTERM)  # the stuck thread must not hold the exit
        assert proc.proc.wait(10) == 0
        assert time.monotonic() - started < 4
        assert "a GPU read is stuck in NVML: leaving NVML as it is" in proc.output()
    finally:
        proc.stop()
