"""NVML as a real H200 answered it (tests/exporter/data/nvml-h200-580.159.04-*.json, recorded
by scripts/record_nvml.py on a lent machine: docs/simulate.md, "Recorded from a real GPU"),
replayed through the real collection code. What the exporter publishes must be what the driver
said, in DCGM's units; nvidia-smi, asked on the same machine, must agree with the recording;
what the GPU does not support must be absent, not an error."""

from __future__ import annotations

import csv
import ctypes
import datetime as dt
import importlib.metadata
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from exporter.catalogue import COLLECTORS
from exporter.collection import Exporter
from exporter.nvml.boundary import Nvml
from exporter.nvml.library import ECC_CORRECTED, ECC_UNCORRECTED, ECC_VOLATILE
from exporter.nvml.library import lib as pynvml
from exporter.nvml.mig_names import mig_memory_slices, mig_profile_name
from exporter.nvml.results import Failure, MigGeometry
from exporter.simulate.fake_nvml import FakeNvml
from exporter.simulate.recorded import Recorder, Replay
from exporter.simulate.spec import parse
from tests.conftest import ManualClock
from tests.exporter.helpers import samples, track, value

DATA = Path(__file__).parent / "data"
MIB = 1024 * 1024


def load(name: str) -> dict[str, Any]:
    recording: dict[str, Any] = json.loads((DATA / f"nvml-h200-580.159.04-{name}.json").read_text())
    return recording


BUSY, IDLE, MIG = load("busy"), load("idle"), load("mig")


def replayed(recording: dict[str, Any]) -> tuple[dict[str, list[Any]], Replay]:
    """The exposition after the recording's collections, replayed (the clock as recorded:
    each collection 0.5 s apart)."""
    replay = Replay(recording)
    clock = ManualClock(1_795_652_400.0)
    exp = track(Exporter(Nvml(replay), "h200", COLLECTORS, 5.0, clock=clock, monotonic=clock))
    for _ in range(int(recording["meta"]["cycles"])):
        clock.advance(recording["meta"]["pause_s"])
        exp.collect_once()
    return samples(exp.exposition.body("openmetrics").decode()), replay


def answers(recording: dict[str, Any], call: str, *args: Any) -> list[Any]:
    """The recorded answers to ``call`` (with these arguments after the handle), in order."""
    tail = "".join(f", {a!r}" for a in args)
    key = f"{call}({{'handle': 'gpu0'}}{tail})"
    return [c["result"] for c in recording["calls"] if c["key"] == key and "result" in c]


def last(recording: dict[str, Any], call: str, *args: Any) -> Any:
    found = answers(recording, call, *args)
    assert found, f"{call}{args} not in the recording"
    return found[-1]


def field_value(answer: dict[str, Any]) -> int:
    """A recorded field value, decoded here by its own valueType (not by the exporter's code)."""
    item = answer["items"][0]["fields"]
    assert item["nvmlReturn"] == pynvml.NVML_SUCCESS
    raw = bytes.fromhex(item["value"]["hex"])
    width = {pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: 4, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: 8}
    return int.from_bytes(raw[: width[item["valueType"]]], "little")


@pytest.fixture(scope="module")
def busy() -> tuple[dict[str, list[Any]], Replay]:
    return replayed(BUSY)


def test_the_replay_asks_nvml_only_what_the_exporter_asked(
    busy: tuple[dict[str, list[Any]], Replay],
) -> None:
    m, replay = busy
    assert replay.unrecorded == []
    assert value(m, "gpu_device_up", gpu="0") == 1
    assert {s.labels["modelName"] for s in m["gpu_device_up"]} == {"NVIDIA H200"}


def test_memory_series_are_nvml_bytes_in_mib(busy: tuple[dict[str, list[Any]], Replay]) -> None:
    m, _ = busy
    memory = last(BUSY, "nvmlDeviceGetMemoryInfo", pynvml.nvmlMemory_v2)["fields"]
    assert memory["total"] == memory["used"] + memory["free"] + memory["reserved"]
    for series, field in (("FB_USED", "used"), ("FB_FREE", "free"), ("FB_TOTAL", "total")):
        assert value(m, f"DCGM_FI_DEV_{series}", gpu="0") == memory[field] // MIB
    assert value(m, "DCGM_FI_DEV_FB_RESERVED", gpu="0") == memory["reserved"] // MIB
    assert value(m, "DCGM_FI_DEV_FB_USED", gpu="0") > 0  # the load's tensors


def test_power_energy_temperature_clocks_as_dcgm_publishes_them(
    busy: tuple[dict[str, list[Any]], Replay],
) -> None:
    m, _ = busy
    mw = last(BUSY, "nvmlDeviceGetPowerUsage")
    assert value(m, "DCGM_FI_DEV_POWER_USAGE", gpu="0") == mw / 1000  # mW -> W
    limit = last(BUSY, "nvmlDeviceGetEnforcedPowerLimit")
    assert value(m, "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", gpu="0") == limit / 1000
    energy = last(BUSY, "nvmlDeviceGetTotalEnergyConsumption")
    assert value(m, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu="0") == energy  # mJ as NVML
    energies = answers(BUSY, "nvmlDeviceGetTotalEnergyConsumption")
    assert energies == sorted(energies) and energies[0] < energies[-1]
    temp = last(BUSY, "nvmlDeviceGetTemperature", pynvml.NVML_TEMPERATURE_GPU)
    assert value(m, "DCGM_FI_DEV_GPU_TEMP", gpu="0") == temp
    memory_temp = field_value(
        last(BUSY, "nvmlDeviceGetFieldValues", [pynvml.NVML_FI_DEV_MEMORY_TEMP])
    )
    assert 20 < memory_temp < 100
    assert value(m, "DCGM_FI_DEV_MEMORY_TEMP", gpu="0") == memory_temp
    sm = last(BUSY, "nvmlDeviceGetClockInfo", pynvml.NVML_CLOCK_SM)
    assert value(m, "DCGM_FI_DEV_SM_CLOCK", gpu="0") == sm
    assert value(m, "DCGM_FI_DEV_MEM_CLOCK", gpu="0") == last(
        BUSY, "nvmlDeviceGetClockInfo", pynvml.NVML_CLOCK_MEM
    )
    rates = last(BUSY, "nvmlDeviceGetUtilizationRates")["fields"]
    assert value(m, "DCGM_FI_DEV_GPU_UTIL", gpu="0") == rates["gpu"] > 0
    reasons = last(BUSY, "nvmlDeviceGetCurrentClocksEventReasons")
    assert value(m, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", gpu="0") == reasons
    power_violation = last(BUSY, "nvmlDeviceGetViolationStatus", pynvml.NVML_PERF_POLICY_POWER)
    assert (
        value(m, "DCGM_FI_DEV_POWER_VIOLATION", gpu="0")
        == power_violation["fields"]["violationTime"]
    )  # ns, as NVML counts it


def test_gpm_profiling_values_are_nvml_percent_as_ratios(
    busy: tuple[dict[str, list[Any]], Replay],
) -> None:
    m, _ = busy
    got = [c for c in BUSY["calls"] if c["call"] == "nvmlGpmMetricsGet"][-1]
    metrics = {
        item["fields"]["metricId"]: item["fields"]["value"]
        for item in got["out"]["0"]["fields"]["metrics"]["items"]
    }
    sm = metrics[pynvml.NVML_GPM_METRIC_SM_UTIL]
    assert 0 < sm < 100  # percent, as NVML gives it
    assert value(m, "DCGM_FI_PROF_SM_ACTIVE", gpu="0") == pytest.approx(sm / 100)
    tensor = metrics[pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL]
    assert value(m, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", gpu="0") == pytest.approx(tensor / 100)


def test_what_the_h200_does_not_support_is_absent_not_an_error(
    busy: tuple[dict[str, list[Any]], Replay],
) -> None:
    m, _ = busy
    nvlink = last(
        BUSY,
        "nvmlDeviceGetFieldValues",
        [38, 45, 52, 59, {"tuple": [139, 0xFFFFFFFF]}, {"tuple": [138, 0xFFFFFFFF]}],
    )
    assert {i["fields"]["nvmlReturn"] for i in nvlink["items"]} == {
        pynvml.NVML_ERROR_NOT_SUPPORTED
    }  # no NVLink on this H200 (the one GPU of a VM)
    assert not [name for name in m if "NVLINK" in name]
    assert all(s.value == 0 for s in m["gpu_exporter_errors_total"] if s.labels["source"] == "nvml")


def test_an_idle_gpu_has_no_processes_and_no_utilisation(
    busy: tuple[dict[str, list[Any]], Replay],
) -> None:
    m, replay = replayed(IDLE)
    assert replay.unrecorded == []
    assert last(IDLE, "nvmlDeviceGetComputeRunningProcesses") == []
    assert value(m, "DCGM_FI_DEV_GPU_UTIL", gpu="0") == 0
    memory = last(IDLE, "nvmlDeviceGetMemoryInfo", pynvml.nvmlMemory_v2)["fields"]
    assert memory["used"] == 0  # with no process, NVML counts nothing used (the reserve apart)
    assert value(m, "DCGM_FI_DEV_FB_USED", gpu="0") == 0
    assert value(m, "DCGM_FI_DEV_FB_RESERVED", gpu="0") == memory["reserved"] // MIB > 0


def smi_row() -> dict[str, str]:
    rows = list(
        csv.reader(io.StringIO(BUSY["meta"]["nvidia_smi_query_csv"]), skipinitialspace=True)
    )
    header = [re.sub(r" \[.*\]$", "", h) for h in rows[0]]
    return dict(zip(header, rows[1], strict=True))


def test_nvidia_smi_agrees_with_nvml() -> None:
    """nvidia-smi --query-gpu on the same machine, just after the recording, under the same
    load. Units as its header says: MiB — each figure NVML's bytes rounded UP (its -q says
    Reserved 616 MiB for NVML's 615.06), where DCGM's FB series round down — and W with two
    decimals."""
    row = smi_row()
    assert row["name"] == last(BUSY, "nvmlDeviceGetName")
    assert row["uuid"] == last(BUSY, "nvmlDeviceGetUUID")
    assert row["serial"] == last(BUSY, "nvmlDeviceGetSerial")
    assert row["vbios_version"] == last(BUSY, "nvmlDeviceGetVbiosVersion")
    assert row["pci.bus_id"] == last(BUSY, "nvmlDeviceGetPciInfo")["fields"]["busId"]
    assert row["driver_version"] == BUSY["meta"]["driver"]
    memory = last(BUSY, "nvmlDeviceGetMemoryInfo", pynvml.nvmlMemory_v2)["fields"]
    for field in ("total", "used", "free"):
        assert row[f"memory.{field}"] == f"{-(-memory[field] // MIB)} MiB", field
    assert memory["used"] % MIB and memory["free"] % MIB  # so the rounding is seen
    limit = last(BUSY, "nvmlDeviceGetEnforcedPowerLimit")
    assert row["enforced.power.limit"] == f"{limit / 1000:.2f} W"
    assert row["power.limit"] == f"{limit / 1000:.2f} W"
    assert row["mig.mode.current"] == (
        "Enabled" if last(BUSY, "nvmlDeviceGetMigMode")[0] else "Disabled"
    )
    assert row["ecc.errors.corrected.volatile.total"] == str(
        last(BUSY, "nvmlDeviceGetTotalEccErrors", ECC_CORRECTED, ECC_VOLATILE)
    )
    assert row["ecc.errors.uncorrected.volatile.total"] == str(
        last(BUSY, "nvmlDeviceGetTotalEccErrors", ECC_UNCORRECTED, ECC_VOLATILE)
    )


# -- MIG profiles ----------------------------------------------------------------------------


def mig_profiles() -> dict[str, dict[str, Any]]:
    """NVML's GPU-instance profiles of the H200: name -> profile info fields."""
    return {
        c["result"]["fields"]["name"].removeprefix("MIG "): c["result"]["fields"]
        for c in MIG["calls"]
        if c["call"] == "nvmlDeviceGetGpuInstanceProfileInfoById"
    }


def placements() -> dict[int, int]:
    """Profile id -> memory slices of a placement, from nvidia-smi mig -lgipp."""
    text = MIG["meta"]["nvidia_smi_mig"]
    return {
        int(pid): int(size)
        for pid, size in re.findall(r"Profile ID\s+(\d+) Placements?\s*: \{[\d,]+\}:(\d+)", text)
    }


def test_the_h200_geometry_as_the_exporter_reads_it() -> None:
    replay = Replay(MIG)
    nvml = Nvml(replay)
    nvml.init()
    dev = nvml.device(0)
    assert not isinstance(dev, Failure)
    assert nvml.mig_geometry(dev) == MigGeometry(7, 8)
    assert nvml.mig_enabled(dev) is False  # MIG capable, mode disabled: not NOT_SUPPORTED
    assert len(placements()) == 7


def test_mig_names_derived_from_attributes_are_nvml_own_names() -> None:
    """Without the GPU-instance lookup the exporter names a MIG device from its attributes as
    go-nvlib does; on a real H200 that must give NVML's own names, memory slices as placed."""
    total = last(MIG, "nvmlDeviceGetMemoryInfo", pynvml.nvmlMemory_v2)["fields"]["total"]
    sizes = placements()
    profiles = mig_profiles()
    assert set(profiles) == {
        "1g.18gb",
        "1g.18gb+me",
        "1g.35gb",
        "2g.35gb",
        "3g.71gb",
        "4g.71gb",
        "7g.141gb",
    }
    for name, info in profiles.items():
        slices, memory_mb = info["sliceCount"], info["memorySizeMB"]
        assert mig_memory_slices(memory_mb, total, 8) == sizes[info["id"]], name
        if not name.endswith("+me"):  # media extensions are not in the attributes
            assert mig_profile_name(slices, slices, memory_mb, total) == name


def test_the_bindings_version_is_known_for_the_real_library() -> None:
    """nvidia-ml-py 13.x has no ``__version__`` (the recording lists it missing): the build
    info still names the version installed, not "unknown"."""
    assert "__version__" in BUSY["missing"]
    assert Nvml().bindings_version() == importlib.metadata.version("nvidia-ml-py")
    assert Nvml(Replay(BUSY)).bindings_version() == "unknown"  # a stand-in says nothing


# -- the fake NVML follows the real one ------------------------------------------------------

FAKE_H200: dict[str, Any] = {
    "hostname": "h200",
    "epoch": "2026-11-01T00:00:00Z",
    "driver_version": "580.159.04",
    "gpus": [
        {
            "model": "NVIDIA H200",
            "memory_total_mib": 143771,
            "memory_reserved_mib": 615,
            "memory_used_mib": 1011,
            "power_w": 465,
            "utilization": {"gpu": 40, "memory": 11},
            "gpm": {"sm_active": 0.33, "gr_engine_active": 0.39},
            "processes": [{"pid": 484, "memory_used_mib": 1002, "sm_util": 40}],
        }
    ],
}


def shape(value: Any) -> Any:
    """A recorded answer's form: types, struct and field names, error codes, field values'
    return codes and value types (and whether they carry a timestamp) — not the readings."""
    if isinstance(value, list):
        return [shape(v) for v in value[:1]]
    if not isinstance(value, dict):
        return type(value).__name__
    if "struct" in value:
        fields = value["fields"]
        if value["struct"] == "c_nvmlFieldValue_t":
            return (
                fields["fieldId"],
                fields["nvmlReturn"],
                fields["valueType"],
                fields["timestamp"] > 0,
            )
        return (value["struct"], {k: shape(v) for k, v in fields.items()})
    if "array" in value:
        return (value["array"], [shape(v) for v in value["items"]])
    if "object" in value:
        return ("object", {k: shape(v) for k, v in value["object"].items()})
    if "tuple" in value:
        return ("tuple", [shape(v) for v in value["tuple"]])
    return {k: shape(v) for k, v in value.items()}


def forms(recording: dict[str, Any]) -> dict[str, Any]:
    """Call -> the form of its first answer (or its error), and of its out-arguments."""
    found: dict[str, Any] = {}
    for c in recording["calls"]:
        answer = (
            ("error", c["error"]) if "error" in c else (shape(c["result"]), shape(c.get("out")))
        )
        found.setdefault(c["call"], answer)
    return found


def test_the_fake_answers_in_the_real_h200_form() -> None:
    clock = ManualClock(1_793_491_200.0)
    recorder = Recorder(FakeNvml(parse(FAKE_H200), now=clock))
    exp = track(Exporter(Nvml(recorder), "h200", COLLECTORS, 5.0, clock=clock, monotonic=clock))
    for _ in range(3):
        clock.advance(5)
        exp.collect_once()
    fake, real = forms(recorder.recording()), forms(BUSY)
    fake.pop("nvmlEventSetWait_v2", None)  # the fake's first wait had not returned yet
    real.pop("nvmlEventSetWait_v2")
    assert set(fake) == set(real)
    for call, form in real.items():
        assert fake[call] == form, call


def test_the_fake_h200_mig_profiles_are_the_real_ones() -> None:
    fake = FakeNvml(parse(FAKE_H200))
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    real = {
        int(c["key"].rsplit(", ", 1)[1].rstrip(")")): c
        for c in MIG["calls"]
        if c["call"] == "nvmlDeviceGetGpuInstanceProfileInfo"
    }
    sizes = placements()
    kept = ("id", "sliceCount", "instanceCount", "multiprocessorCount", "memorySizeMB", "name")
    for profile, entry in real.items():
        if "error" in entry:
            with pytest.raises(pynvml.NVMLError) as caught:
                fake.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile)
            assert caught.value.value == entry["error"], profile
            continue
        fields = entry["result"]["fields"]
        if fields["name"].endswith("+me"):
            continue  # media-extension profiles are not in the fake's tables
        info = fake.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile)
        assert {k: getattr(info, k) for k in kept} == {k: fields[k] for k in kept}
        count = ctypes.c_uint(8)
        slots = (pynvml.c_nvmlGpuInstancePlacement_t * 8)()
        fake.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, slots, ctypes.byref(count))
        assert {slots[i].size for i in range(count.value)} == {sizes[info.id]}
        assert count.value == fields["instanceCount"]
    assert fake.nvmlDeviceGetMigMode(handle) == last(MIG, "nvmlDeviceGetMigMode")
    assert fake.nvmlDeviceGetMaxMigDeviceCount(handle) == last(
        MIG, "nvmlDeviceGetMaxMigDeviceCount"
    )


def test_the_fake_counts_in_the_real_units() -> None:
    clock = ManualClock(1_793_491_200.0)
    fake = FakeNvml(parse(FAKE_H200), now=clock)
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    when = dt.datetime.fromisoformat(BUSY["meta"]["when"]).timestamp()
    real = last(BUSY, "nvmlDeviceGetViolationStatus", pynvml.NVML_PERF_POLICY_POWER)["fields"]
    assert abs(real["referenceTime"] / 1e6 - when) < 3600  # µs since the epoch
    status = fake.nvmlDeviceGetViolationStatus(handle, pynvml.NVML_PERF_POLICY_POWER)
    assert status.referenceTime / 1e6 == clock()
    period = last(BUSY, "nvmlDeviceGetEncoderUtilization")[1]
    assert fake.nvmlDeviceGetEncoderUtilization(handle)[1] == period
    assert fake.nvmlDeviceGetDecoderUtilization(handle)[1] == period
    pci = last(BUSY, "nvmlDeviceGetPciInfo")["fields"]
    assert pci["busIdLegacy"] == pci["busId"][4:]
    info = fake.nvmlDeviceGetPciInfo(handle)
    assert info.busIdLegacy == info.busId[4:]
    assert info.device == int(info.busId.split(":")[2].split(".")[0], 16)
