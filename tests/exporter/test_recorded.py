"""The NVML recorder and replay (exporter/simulate/recorded.py): a recording of the fake NVML,
replayed through the real collection code, gives the same exposition — so a recording of a
real GPU replays as that GPU answered."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from exporter.catalogue import COLLECTORS
from exporter.collection import Exporter
from exporter.nvml.boundary import Nvml
from exporter.nvml.library import lib as pynvml
from exporter.nvml.results import Failure, NotSupported
from exporter.simulate.fake_nvml import FakeNvml
from exporter.simulate.recorded import NotRecorded, Recorder, Replay
from exporter.simulate.spec import parse
from tests.conftest import ManualClock
from tests.exporter.helpers import track

EPOCH = "2026-11-01T00:00:00Z"
EPOCH_TS = 1_793_491_200.0
CYCLES = 3
H100 = "NVIDIA H100 80GB HBM3"
SPEC: dict[str, Any] = {
    "hostname": "rec-node",
    "epoch": EPOCH,
    "driver_version": "580.95.05",
    "gpus": [
        {  # a whole GPU with NVLink, GPM, a process, a clock event and no memory sensor
            "model": H100,
            "memory_total_mib": 81559,
            "memory_used_mib": {"sine": {"min": 1000, "max": 9000, "period": 60}},
            "power_w": {"points": [[0, 100], [60, 650]]},
            "utilization": {"gpu": 80, "memory": 30},
            "nvlink": {
                "links": 18,
                "errors": [{"t": 1, "link": 3, "counter": "crc_flit", "count": 5}],
            },
            "gpm": {"gr_engine_active": 0.8, "sm_active": 0.7},
            "clock_events": [{"from": 0, "to": 100, "reasons": ["sw_power_cap"]}],
            "unsupported": ["memory_temperature"],
        },
        {  # MIG: two instances
            "model": H100,
            "memory_total_mib": 81559,
            "power_w": 300,
            "mig": [{"profile": "3g.40gb", "gi_id": 1}, {"profile": "1g.10gb", "gi_id": 9}],
            "gpm": {"sm_active": 0.4},
        },
    ],
}


def exporter(library: Any, clock: ManualClock) -> Exporter:
    return track(Exporter(Nvml(library), "rec-node", COLLECTORS, 5.0, clock=clock, monotonic=clock))


def gpu_series(exp: Exporter) -> list[str]:
    """The exposition's sample lines, less the exporter's own and its process's (timings and
    memory vary run to run)."""
    text = exp.exposition.body("text").decode()
    return [
        line
        for line in text.splitlines()
        if line and not line.startswith(("#", "gpu_exporter_", "process_", "python_"))
    ]


def run(library: Any) -> list[list[str]]:
    clock = ManualClock(EPOCH_TS)
    exp = exporter(library, clock)
    shown = []
    for _ in range(CYCLES):
        clock.advance(5)
        exp.collect_once()
        shown.append(gpu_series(exp))
    return shown


def record() -> tuple[list[list[str]], dict[str, Any]]:
    clock = ManualClock(EPOCH_TS)
    recorder = Recorder(FakeNvml(parse(SPEC), now=clock))
    exp = exporter(recorder, clock)
    shown = []
    for _ in range(CYCLES):
        clock.advance(5)
        exp.collect_once()
        shown.append(gpu_series(exp))
    # through JSON, as a fixture is kept
    return shown, json.loads(json.dumps(recorder.recording(device="fake")))


def test_replay_of_a_recording_gives_the_same_exposition() -> None:
    recorded, recording = record()
    assert any("GPU_I_ID" in line for line in recorded[-1])  # MIG read
    assert any(line.startswith("DCGM_FI_PROF_SM_ACTIVE") for line in recorded[-1])  # GPM read
    assert any(line.startswith("DCGM_FI_DEV_NVLINK") for line in recorded[-1])
    replay = Replay(recording)
    assert run(replay) == recorded
    assert replay.unrecorded == []
    calls = {c["call"] for c in recording["calls"]}
    assert {"nvmlDeviceGetGpuInstancePossiblePlacements", "nvmlGpmMetricsGet"} <= calls
    assert all(c["ns"] >= 0 for c in recording["calls"])


def test_not_supported_is_recorded_and_replayed_as_the_error() -> None:
    _, recording = record()
    fields = [c for c in recording["calls"] if c["call"] == "nvmlDeviceGetFieldValues"]
    codes = {
        f["fields"]["nvmlReturn"]
        for c in fields
        if "result" in c
        for f in c["result"]["items"]
        if isinstance(f, dict)
    }
    assert pynvml.NVML_ERROR_NOT_SUPPORTED in codes  # the memory sensor, as a field value
    errors = [c for c in recording["calls"] if "error" in c]
    assert errors and all(isinstance(c["error_name"], str) for c in errors)
    replay = Replay(recording)
    nvml = Nvml(replay)
    nvml.init()
    mig_gpu = nvml.device(1)  # in MIG mode: no whole-GPU utilisation
    assert not isinstance(mig_gpu, Failure)
    some = next(c for c in errors if c["call"] == "nvmlDeviceGetUtilizationRates")
    assert some["error"] == pynvml.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(pynvml.NVMLError) as caught:
        replay.nvmlDeviceGetUtilizationRates(mig_gpu.handle)
    assert caught.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert isinstance(caught.value, pynvml.NVMLError_NotSupported)  # pynvml's own subclass
    assert isinstance(nvml.utilization(mig_gpu), NotSupported)


def _drop(recording: dict[str, Any], call: str, field: str) -> dict[str, Any]:
    broken = copy.deepcopy(recording)
    for entry in broken["calls"]:
        if entry["call"] == call and "result" in entry:
            entry["result"]["fields"].pop(field)
    return broken


@pytest.mark.parametrize(
    ("call", "field"),
    [("nvmlDeviceGetMemoryInfo", "used"), ("nvmlDeviceGetUtilizationRates", "gpu")],
)
def test_a_dropped_field_changes_the_exposition(call: str, field: str) -> None:
    recorded, recording = record()
    assert run(Replay(_drop(recording, call, field))) != recorded


def test_a_call_never_recorded_is_an_error_not_an_answer() -> None:
    _, recording = record()
    replay = Replay(recording)
    replay.nvmlInit()
    with pytest.raises(NotRecorded):
        replay.nvmlDeviceGetHandleByIndex(7)
    assert replay.unrecorded == ["nvmlDeviceGetHandleByIndex(7)"]
    with pytest.raises(NotRecorded):
        replay.nvmlDeviceGetBrand(replay.nvmlDeviceGetHandleByIndex(0))
