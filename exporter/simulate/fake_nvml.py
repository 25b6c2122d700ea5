"""A fake NVML at the pynvml API surface, driven by a fleet spec.

It implements the pynvml functions the exporter calls, with pynvml's signatures, return types
(the same ctypes structures) and errors (``NVMLError`` with NVML's codes), so that
:class:`exporter.nvml.boundary.Nvml` — and everything above it — runs unchanged on top of it.
The clock is injected: ``now()`` returns wall-clock seconds; the spec's curves are evaluated at
``now() - epoch``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from exporter.nvml.library import CLOCK_EVENT_REASONS, NO_INSTANCE
from exporter.nvml.library import lib as pynvml
from exporter.simulate.fake_events import EventsMixin
from exporter.simulate.fake_mig import MigGpmMixin
from exporter.simulate.handles import FakeHandle, FakeMigHandle
from exporter.simulate.spec import MIB, FleetSpec, SimGpu, expand

HANG_POLL_S = 0.02
# The encoder's and decoder's sampling period (µs) a real H200 reports with their utilisation
# (tests/exporter/data/nvml-h200-580.159.04-busy.json)
SAMPLING_PERIOD_US = 100000
_REASON_BITS = CLOCK_EVENT_REASONS
# Which clock-event reasons count as a violation of which NVML perf policy.
_POLICY_REASONS = {
    pynvml.NVML_PERF_POLICY_POWER: {"sw_power_cap", "hw_power_brake_slowdown"},
    pynvml.NVML_PERF_POLICY_THERMAL: {"sw_thermal_slowdown", "hw_thermal_slowdown"},
    pynvml.NVML_PERF_POLICY_SYNC_BOOST: {"sync_boost"},
    pynvml.NVML_PERF_POLICY_BOARD_LIMIT: {"hw_slowdown"},
    pynvml.NVML_PERF_POLICY_LOW_UTILIZATION: {"gpu_idle"},
    pynvml.NVML_PERF_POLICY_RELIABILITY: set(),
}
_NVLINK_COUNTER_NAMES = {
    pynvml.NVML_NVLINK_ERROR_DL_REPLAY: "replay",
    pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: "recovery",
    pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: "crc_flit",
    pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA: "crc_data",
}


_NVLINK_TOTAL_FIELDS = {
    pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: "crc_flit",
    pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: "crc_data",
    pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: "replay",
    pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: "recovery",
}


def _error(code: int) -> Exception:
    err: Exception = pynvml.NVMLError(code)
    return err


def _uint(value: float) -> int:
    return max(0, round(value))


def _counter(events: list[Any], t: float) -> int:
    return sum(e.count for e in events if e.t <= t)


class FakeNvml(MigGpmMixin, EventsMixin):
    """The functions of ``pynvml`` that gpu-exporter uses, answering from a fleet spec.

    Thread-safe as far as the exporter needs (it reads each GPU on its own thread). A GPU can
    be made to hang — every call about it blocks — by the spec (``hangs``) or by a test
    (:meth:`block` / :meth:`unblock`)."""

    # Constants the boundary module looks up on the library object.
    nvmlMemory_v2 = pynvml.nvmlMemory_v2
    __version__ = "fake-" + str(getattr(pynvml, "__version__", "nvml"))

    def __init__(self, spec: FleetSpec, now: Callable[[], float] = time.time) -> None:
        self.spec = spec
        self.gpus: list[SimGpu] = expand(spec)
        self._now = now
        self._epoch = spec.epoch.timestamp() if spec.epoch is not None else now()
        self._initialized = 0
        self._gpm_samples: dict[int, tuple[int, int | None, float]] = {}
        self._gpm_lock = threading.Lock()
        self._keep: dict[int, Any] = {}
        self.events_delivered: list[tuple[int, int]] = []
        self._lock = threading.Lock()
        self._calls = 0
        self._blocked: set[int] = set()
        self._unblocked = threading.Condition()

    @property
    def calls(self) -> int:
        """How many NVML functions were called (for tests and benches)."""
        return self._calls

    def _count(self) -> None:
        with self._lock:
            self._calls += 1

    # -- hangs ------------------------------------------------------------------------------

    def block(self, index: int) -> None:
        """From now on every call about GPU ``index`` blocks, until :meth:`unblock`."""
        with self._unblocked:
            self._blocked.add(index)

    def unblock(self, index: int) -> None:
        with self._unblocked:
            self._blocked.discard(index)
            self._unblocked.notify_all()

    def _hang(self, gpu: SimGpu) -> None:
        """Block while the GPU is blocked by a test or a hang of its spec holds."""
        while True:
            with self._unblocked:
                while gpu.index in self._blocked:
                    self._unblocked.wait()
            if not gpu.spec.hangs or gpu.hang_ends(self.sim_time()) is None:
                return
            time.sleep(HANG_POLL_S)  # the spec's clock may be a test's: look again soon

    # -- time and state ---------------------------------------------------------------------

    def sim_time(self) -> float:
        return self._now() - self._epoch

    def _gpu(self, handle: FakeHandle, feature: str | None = None) -> tuple[SimGpu, float]:
        self._count()
        if not self._initialized:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
        if not isinstance(handle, FakeHandle) or not 0 <= handle.index < len(self.gpus):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[handle.index]
        if gpu.spec.hangs or gpu.index in self._blocked:
            self._hang(gpu)
        t = self.sim_time()
        if gpu.spec.lost_at is not None and t >= gpu.spec.lost_at:
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if feature is not None and feature in gpu.unsupported:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu, max(t, 0.0)

    # -- life cycle and system --------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._count()
        if self.sim_time() < self.spec.nvml_init_fails_until:
            raise _error(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        self._initialized += 1

    def nvmlShutdown(self) -> None:
        self._count()
        if not self._initialized:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
        self._initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._count()
        if not self._initialized:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
        return self.spec.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._count()
        if not self._initialized:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        handle = FakeHandle(index)
        self._gpu(handle)
        return handle

    # -- identity ---------------------------------------------------------------------------

    def nvmlDeviceGetUUID(self, handle: FakeHandle | FakeMigHandle) -> str:
        if isinstance(handle, FakeMigHandle):
            return self._mig(handle)[1].uuid
        return self._gpu(handle)[0].uuid

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return self._gpu(handle)[0].spec.model

    def nvmlDeviceGetSerial(self, handle: FakeHandle) -> str:
        return self._gpu(handle, "serial")[0].serial

    def nvmlDeviceGetVbiosVersion(self, handle: FakeHandle) -> str:
        return self._gpu(handle, "vbios")[0].spec.vbios

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> Any:
        gpu, _ = self._gpu(handle)
        info = pynvml.nvmlPciInfo_t()
        info.busId = gpu.pci_bus_id.encode()
        domain, bus, rest = gpu.pci_bus_id.split(":")
        device = rest.split(".")[0]
        info.domain = int(domain, 16)
        info.bus = int(bus, 16)
        info.device = int(device, 16)
        # as a real H200 answered: "0000:00:06.0" beside busId "00000000:00:06.0"
        info.busIdLegacy = f"{info.domain:04X}:{bus}:{rest}".encode()
        return info

    # -- readings ---------------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> Any:
        gpu, t = self._gpu(handle, "utilization")
        if gpu.mig_on(t):  # as on real hardware: no device utilisation while MIG is on
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        util = pynvml.c_nvmlUtilization_t()
        util.gpu = min(100, _uint(gpu.util_gpu.value(t)))
        util.memory = min(100, _uint(gpu.util_memory.value(t)))
        return util

    def nvmlDeviceGetEncoderUtilization(self, handle: FakeHandle) -> list[int]:
        gpu, t = self._gpu(handle, "encoder_utilization")
        return [min(100, _uint(gpu.util_encoder.value(t))), SAMPLING_PERIOD_US]

    def nvmlDeviceGetDecoderUtilization(self, handle: FakeHandle) -> list[int]:
        gpu, t = self._gpu(handle, "decoder_utilization")
        return [min(100, _uint(gpu.util_decoder.value(t))), SAMPLING_PERIOD_US]

    def nvmlDeviceGetMemoryInfo(
        self, handle: FakeHandle | FakeMigHandle, version: int | None = None
    ) -> Any:
        if isinstance(handle, FakeMigHandle):
            return self._mig_memory(handle, version)
        gpu, t = self._gpu(handle, "memory_reserved" if version else None)
        spec = gpu.spec
        usable = spec.memory_total_mib - spec.memory_reserved_mib
        used = min(usable, _uint(gpu.memory_used_mib.value(t))) * MIB
        if version:
            mem = pynvml.c_nvmlMemory_v2_t()
            mem.version = version
            mem.total = spec.memory_total_mib * MIB
            mem.reserved = spec.memory_reserved_mib * MIB
            mem.used = used
            mem.free = usable * MIB - used
            return mem
        # v1 counts the reserved memory as used
        mem1 = pynvml.c_nvmlMemory_t()
        mem1.total = spec.memory_total_mib * MIB
        mem1.used = used + spec.memory_reserved_mib * MIB
        mem1.free = usable * MIB - used
        return mem1

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        gpu, t = self._gpu(handle, "temperature")
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _uint(gpu.temp_gpu.value(t))

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, field_ids: list[Any]) -> Any:
        gpu, t = self._gpu(handle)
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for i, field in enumerate(field_ids):
            # pynvml takes a field id, or a (field id, scope id) pair
            field_id, scope = field if isinstance(field, tuple) else (field, 0)
            values[i].fieldId = field_id
            values[i].scopeId = scope
            value = self._field(gpu, t, field_id)
            if value is None:  # as a real GPU: no timestamp, no value type
                values[i].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            values[i].timestamp = int(self._now() * 1e6)
            values[i].nvmlReturn = pynvml.NVML_SUCCESS
            if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:  # a real H200's: an unsigned int
                values[i].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                values[i].value.uiVal = value
            else:
                values[i].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                values[i].value.ullVal = value
        return values

    def _field(self, gpu: SimGpu, t: float, field_id: int) -> int | None:
        """A field's value, None where the GPU does not support it."""
        if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:
            if "memory_temperature" in gpu.unsupported:
                return None
            return _uint(gpu.temp_memory.value(t))
        nvlink = "nvlink" not in gpu.unsupported and gpu.spec.nvlink.links > 0
        nvlink_counter = _NVLINK_TOTAL_FIELDS.get(field_id)
        if nvlink_counter is not None:
            if not nvlink:
                return None
            errors = gpu.spec.nvlink.errors
            return sum(e.count for e in errors if e.counter == nvlink_counter and e.t <= t)
        if field_id == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
            return math.floor(gpu.nvlink_rx.integral(t)) if nvlink else None
        if field_id == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
            return math.floor(gpu.nvlink_tx.integral(t)) if nvlink else None
        return None

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        gpu, t = self._gpu(handle, "power")
        return _uint(gpu.power_w.value(t) * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        gpu, _ = self._gpu(handle, "power_limit")
        return _uint(gpu.spec.power_limit_w * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        gpu, t = self._gpu(handle, "energy")
        return gpu.spec.energy_mj_at_start + math.floor(gpu.power_w.integral(t) * 1000)

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock: int) -> int:
        gpu, t = self._gpu(handle, "clocks")
        if clock == pynvml.NVML_CLOCK_SM:
            return _uint(gpu.clock_sm.value(t))
        if clock == pynvml.NVML_CLOCK_MEM:
            return _uint(gpu.clock_memory.value(t))
        raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetPcieReplayCounter(self, handle: FakeHandle) -> int:
        gpu, t = self._gpu(handle, "pcie_replay")
        return _counter(gpu.spec.pcie_replays, t)

    def nvmlDeviceGetTotalEccErrors(
        self, handle: FakeHandle, error_type: int, counter_type: int
    ) -> int:
        gpu, t = self._gpu(handle, "ecc")
        ecc = gpu.spec.ecc
        corrected = error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
        events = ecc.corrected_volatile if corrected else ecc.uncorrected_volatile
        count = _counter(events, t)
        if counter_type == pynvml.NVML_AGGREGATE_ECC:
            count += ecc.corrected_aggregate_base if corrected else ecc.uncorrected_aggregate_base
        return count

    def nvmlDeviceGetRemappedRows(self, handle: FakeHandle) -> tuple[int, int, int, int]:
        gpu, _ = self._gpu(handle, "remapped_rows")
        rows = gpu.spec.remapped_rows
        return rows.correctable, rows.uncorrectable, int(rows.pending), int(rows.failure)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        gpu, t = self._gpu(handle, "clock_event_reasons")
        mask = 0
        for event in gpu.spec.clock_events:
            if event.start <= t < event.end:
                for reason in event.reasons:
                    mask |= _REASON_BITS[reason]
        return mask

    def nvmlDeviceGetViolationStatus(self, handle: FakeHandle, policy: int) -> Any:
        gpu, t = self._gpu(handle, "violations")
        reasons = _POLICY_REASONS.get(policy)
        if reasons is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        # Merge the intervals carrying one of this policy's reasons; count their time up to t.
        merged: list[list[float]] = []
        for start, end in sorted(
            (e.start, e.end) for e in gpu.spec.clock_events if reasons.intersection(e.reasons)
        ):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        total = sum(max(0.0, min(end, t) - max(start, 0.0)) for start, end in merged)
        status = pynvml.c_nvmlViolationTime_t()
        status.referenceTime = int(self._now() * 1e6)  # µs, as a real H200 answers
        status.violationTime = round(total * 1e9)
        return status

    def nvmlDeviceGetNvLinkState(self, handle: FakeHandle, link: int) -> int:
        gpu, _ = self._gpu(handle, "nvlink")
        if link >= gpu.spec.nvlink.links:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 1

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: FakeHandle, link: int, counter: int) -> int:
        gpu, t = self._gpu(handle, "nvlink")
        if link >= gpu.spec.nvlink.links:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        name = _NVLINK_COUNTER_NAMES.get(counter)
        if name is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return sum(
            e.count
            for e in gpu.spec.nvlink.errors
            if e.link == link and e.counter == name and e.t <= t
        )

    # -- processes --------------------------------------------------------------------------

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[Any]:
        gpu, t = self._gpu(handle, "processes")
        out = []
        for proc in gpu.processes:
            if proc.alive(t):
                gi = proc.spec.gi_id
                out.append(
                    pynvml.nvmlFriendlyObject(
                        {
                            "pid": proc.spec.pid,
                            "usedGpuMemory": _uint(proc.memory_used_mib.value(t)) * MIB,
                            "gpuInstanceId": gi if gi is not None else NO_INSTANCE,
                            "computeInstanceId": 0 if gi is not None else NO_INSTANCE,
                        }
                    )
                )
        return out

    def nvmlDeviceGetProcessUtilization(self, handle: FakeHandle, since_us: int) -> list[Any]:
        """One sample per live process: its mean SM utilisation since ``since_us``."""
        gpu, t = self._gpu(handle, "process_utilization")
        if gpu.mig_on(t):
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        now_us = int(self._now() * 1e6)
        start = max(0.0, since_us / 1e6 - self._epoch) if since_us else max(0.0, t - 1.0)
        samples = []
        for proc in gpu.processes:
            if not proc.alive(t) or now_us <= since_us:
                continue
            sample = pynvml.c_nvmlProcessUtilizationSample_t()
            sample.pid = proc.spec.pid
            sample.timeStamp = now_us
            span = t - start
            mean = (
                (proc.sm_util.integral(t) - proc.sm_util.integral(start)) / span
                if span > 0
                else proc.sm_util.value(t)
            )
            sample.smUtil = min(100, _uint(mean))
            samples.append(sample)
        if not samples:
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return samples
