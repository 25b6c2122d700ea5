"""Typed access to the NVML functions the exporter uses: the one place ``NVMLError`` is caught.

An unsupported function is logged once per device and function, not on every collection.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any, cast

from exporter.nvml.library import (
    EVENT_XID,
    FI_DEV_MEMORY_TEMP,
    FUNCTION_MISSING,
    GPM_METRICS,
    NO_INSTANCE,
    NVLINK_ALL_LINKS,
    NVLINK_THROUGHPUT_FIELDS,
    NVLINK_TOTAL_FIELDS,
    TEMPERATURE_GPU,
    lib,
)
from exporter.nvml.mig_reads import MigReads
from exporter.nvml.results import (
    Device,
    EventSet,
    Failure,
    GpuProcess,
    MigGeometry,
    MigInstance,
    NotSupported,
    NvlinkReading,
    NvmlInitError,
    ReadResult,
    classify,
    error_text,
    text,
)

log = logging.getLogger(__name__)


class Nvml:
    """Typed access to the NVML functions the exporter uses."""

    def __init__(self, library: Any = None) -> None:
        self._lib = lib if library is None else library
        self._mig = MigReads(self._call)
        self._logged: set[tuple[int, str]] = set()
        self._log_lock = threading.Lock()
        self.initialized = False

    # -- life cycle -------------------------------------------------------------------------

    def init(self) -> None:
        """Initialise NVML once; raises :class:`NvmlInitError` with the reason."""
        if self.initialized:
            return
        try:
            self._lib.nvmlInit()
        except lib.NVMLError as exc:
            failure = classify(exc.value, "nvmlInit")
            raise NvmlInitError(failure, f"NVML init failed: {error_text(exc.value)}") from None
        self.initialized = True

    def shutdown(self) -> None:
        if not self.initialized:
            return
        self.initialized = False
        try:
            self._lib.nvmlShutdown()
        except lib.NVMLError as exc:
            log.debug("nvmlShutdown: %s", error_text(exc.value))

    # -- the one place NVMLError is caught --------------------------------------------------

    def _call(self, device: int, name: str, *args: Any, quiet: bool = False) -> Any:
        fn: Callable[..., Any] | None = getattr(self._lib, name, None)
        if fn is None:  # bindings older than the function
            return self._unsupported(device, NotSupported(FUNCTION_MISSING, name))
        try:
            return fn(*args)
        except lib.NVMLError as exc:
            failure = classify(exc.value, name)
            if isinstance(failure, NotSupported) and not quiet:
                return self._unsupported(device, failure)
            return failure

    def _unsupported(self, device: int, failure: NotSupported) -> NotSupported:
        key = (device, failure.function)
        if key not in self._logged:
            with self._log_lock:
                if key not in self._logged:
                    self._logged.add(key)
                    log.info("GPU %d: %s is not supported; its series are left out", *key)
        return failure

    # -- system -----------------------------------------------------------------------------

    def driver_version(self) -> ReadResult[str]:
        value = self._call(-1, "nvmlSystemGetDriverVersion")
        return value if isinstance(value, Failure) else text(value)

    def bindings_version(self) -> str:
        version = getattr(self._lib, "__version__", None) or getattr(
            self._lib, "NVML_BINDINGS_VERSION", ""
        )
        if not version and self._lib is lib:
            # nvidia-ml-py 13.x (13.615.71 on a real H200, docs/simulate.md) has neither
            # attribute: the installed distribution's version is the bindings' version
            try:
                version = importlib.metadata.version("nvidia-ml-py")
            except importlib.metadata.PackageNotFoundError:
                version = ""
        return text(version) if version else "unknown"

    def device_count(self) -> ReadResult[int]:
        value: ReadResult[int] = self._call(-1, "nvmlDeviceGetCount")
        return value

    def device(self, index: int) -> ReadResult[Device]:
        handle = self._call(index, "nvmlDeviceGetHandleByIndex", index)
        return handle if isinstance(handle, Failure) else Device(index, handle)

    # -- identity ---------------------------------------------------------------------------

    def _text_of(self, dev: Device, name: str) -> ReadResult[str]:
        value = self._call(dev.index, name, dev.handle)
        return value if isinstance(value, Failure) else text(value)

    def uuid(self, dev: Device) -> ReadResult[str]:
        return self._text_of(dev, "nvmlDeviceGetUUID")

    def name(self, dev: Device) -> ReadResult[str]:
        return self._text_of(dev, "nvmlDeviceGetName")

    def serial(self, dev: Device) -> ReadResult[str]:
        return self._text_of(dev, "nvmlDeviceGetSerial")

    def vbios_version(self, dev: Device) -> ReadResult[str]:
        return self._text_of(dev, "nvmlDeviceGetVbiosVersion")

    def pci_bus_id(self, dev: Device) -> ReadResult[str]:
        info = self._call(dev.index, "nvmlDeviceGetPciInfo", dev.handle)
        return info if isinstance(info, Failure) else text(info.busId)

    # -- readings ---------------------------------------------------------------------------

    def utilization(self, dev: Device) -> ReadResult[tuple[int, int]]:
        """(gpu %, memory copy %) over the driver's last sample period."""
        rates = self._call(dev.index, "nvmlDeviceGetUtilizationRates", dev.handle)
        return rates if isinstance(rates, Failure) else (int(rates.gpu), int(rates.memory))

    def encoder_utilization(self, dev: Device) -> ReadResult[int]:
        value = self._call(dev.index, "nvmlDeviceGetEncoderUtilization", dev.handle)
        return value if isinstance(value, Failure) else int(value[0])

    def decoder_utilization(self, dev: Device) -> ReadResult[int]:
        value = self._call(dev.index, "nvmlDeviceGetDecoderUtilization", dev.handle)
        return value if isinstance(value, Failure) else int(value[0])

    def memory(self, dev: Device) -> ReadResult[tuple[int, int, int, int | None]]:
        """(total, used, free, reserved) in bytes; reserved is None on drivers without v2."""
        v2 = getattr(self._lib, "nvmlMemory_v2", None)
        if v2 is not None:
            info = self._call(dev.index, "nvmlDeviceGetMemoryInfo", dev.handle, v2)
            if not isinstance(info, Failure):
                return int(info.total), int(info.used), int(info.free), int(info.reserved)
            if not isinstance(info, NotSupported):
                return info
        info = self._call(dev.index, "nvmlDeviceGetMemoryInfo", dev.handle)
        if isinstance(info, Failure):
            return info
        return int(info.total), int(info.used), int(info.free), None

    def temperature(self, dev: Device) -> ReadResult[int]:
        value: ReadResult[int] = self._call(
            dev.index, "nvmlDeviceGetTemperature", dev.handle, TEMPERATURE_GPU
        )
        return value

    def memory_temperature(self, dev: Device) -> ReadResult[int]:
        """HBM/GDDR temperature, a field value (not every board has a sensor)."""
        values = self._call(dev.index, "nvmlDeviceGetFieldValues", dev.handle, [FI_DEV_MEMORY_TEMP])
        if isinstance(values, Failure):
            return values
        field = values[0]
        if field.nvmlReturn != lib.NVML_SUCCESS:
            failure = classify(field.nvmlReturn, "NVML_FI_DEV_MEMORY_TEMP")
            if isinstance(failure, NotSupported):
                return self._unsupported(dev.index, failure)
            return failure
        return int(_field_value(field))

    def nvlink_counters(self, dev: Device) -> ReadResult[NvlinkReading]:
        """The four NVLink error counters and the data throughput counters, each summed over
        all links, in one field-values call (a GPU without NVLink answers NotSupported)."""
        ids: list[Any] = list(NVLINK_TOTAL_FIELDS.values())
        ids += [(field, NVLINK_ALL_LINKS) for field in NVLINK_THROUGHPUT_FIELDS]
        values = self._call(dev.index, "nvmlDeviceGetFieldValues", dev.handle, ids)
        if isinstance(values, Failure):
            return values
        errors = {}
        for name, field in zip(NVLINK_TOTAL_FIELDS, values, strict=False):
            if field.nvmlReturn == lib.NVML_SUCCESS:
                errors[name] = int(_field_value(field))
        throughput = [values[len(NVLINK_TOTAL_FIELDS) + i] for i in range(2)]
        data_kib: int | None = None
        stamp = 0
        if all(f.nvmlReturn == lib.NVML_SUCCESS for f in throughput):
            data_kib = sum(int(_field_value(f)) for f in throughput)
            stamp = max(int(f.timestamp) for f in throughput)
        if not errors and data_kib is None:
            return self._unsupported(dev.index, NotSupported(3, "NVML_FI_DEV_NVLINK_*"))
        return NvlinkReading(errors, data_kib, stamp)

    def power_usage_mw(self, dev: Device) -> ReadResult[int]:
        value: ReadResult[int] = self._call(dev.index, "nvmlDeviceGetPowerUsage", dev.handle)
        return value

    def power_limit_mw(self, dev: Device) -> ReadResult[int]:
        value: ReadResult[int] = self._call(
            dev.index, "nvmlDeviceGetEnforcedPowerLimit", dev.handle
        )
        return value

    def total_energy_mj(self, dev: Device) -> ReadResult[int]:
        value: ReadResult[int] = self._call(
            dev.index, "nvmlDeviceGetTotalEnergyConsumption", dev.handle
        )
        return value

    def clock_mhz(self, dev: Device, clock: int) -> ReadResult[int]:
        value: ReadResult[int] = self._call(dev.index, "nvmlDeviceGetClockInfo", dev.handle, clock)
        return value

    def pcie_replay_counter(self, dev: Device) -> ReadResult[int]:
        value: ReadResult[int] = self._call(dev.index, "nvmlDeviceGetPcieReplayCounter", dev.handle)
        return value

    def total_ecc_errors(self, dev: Device, error_type: int, counter_type: int) -> ReadResult[int]:
        value: ReadResult[int] = self._call(
            dev.index, "nvmlDeviceGetTotalEccErrors", dev.handle, error_type, counter_type
        )
        return value

    def remapped_rows(self, dev: Device) -> ReadResult[tuple[int, int, int, int]]:
        """(correctable, uncorrectable, pending, failure occurred)."""
        value = self._call(dev.index, "nvmlDeviceGetRemappedRows", dev.handle)
        if isinstance(value, Failure):
            return value
        corr, unc, pending, failure = value
        return int(corr), int(unc), int(pending), int(failure)

    def clock_event_reasons(self, dev: Device) -> ReadResult[int]:
        """Bit mask of why clocks are held down (NVML >= 12.535 name, older name as fallback)."""
        value: ReadResult[int] = self._call(
            dev.index, "nvmlDeviceGetCurrentClocksEventReasons", dev.handle
        )
        if isinstance(value, NotSupported) and value.code == FUNCTION_MISSING:
            value = self._call(dev.index, "nvmlDeviceGetCurrentClocksThrottleReasons", dev.handle)
        return value

    def violation_ns(self, dev: Device, policy: int) -> ReadResult[int]:
        """Cumulative time clocks were held below target for one policy, in ns."""
        value = self._call(dev.index, "nvmlDeviceGetViolationStatus", dev.handle, policy)
        return value if isinstance(value, Failure) else int(value.violationTime)

    def nvlink_active(self, dev: Device, link: int) -> ReadResult[bool]:
        """Whether a link is up; probing past the last link is expected to fail, quietly."""
        value = self._call(dev.index, "nvmlDeviceGetNvLinkState", dev.handle, link, quiet=True)
        return value if isinstance(value, Failure) else bool(value)

    def nvlink_error_counter(self, dev: Device, link: int, counter: int) -> ReadResult[int]:
        value: ReadResult[int] = self._call(
            dev.index, "nvmlDeviceGetNvLinkErrorCounter", dev.handle, link, counter
        )
        return value

    # -- MIG (exporter/nvml/mig_reads.py) --------------------------------------------------

    def mig_enabled(self, dev: Device) -> ReadResult[bool]:
        """Whether MIG mode is on (a GPU that cannot do MIG answers NotSupported, quietly)."""
        return self._mig.enabled(dev)

    def mig_geometry(self, dev: Device) -> ReadResult[MigGeometry]:
        """The GPU's MIG geometry from NVML itself (:meth:`MigReads.geometry`): a failure when
        NVML cannot tell."""
        return self._mig.geometry(dev)

    def mig_instances(
        self, dev: Device, total_bytes: int, geometry: MigGeometry | None
    ) -> ReadResult[list[MigInstance]]:
        """The MIG devices that exist now (:meth:`MigReads.instances`)."""
        return self._mig.instances(dev, total_bytes, geometry)

    # -- GPM (profiling metrics on Hopper and newer) ----------------------------------------

    def gpm_supported(self, dev: Device) -> bool:
        support = self._call(dev.index, "nvmlGpmQueryDeviceSupport", dev.handle, quiet=True)
        return not isinstance(support, Failure) and bool(support.isSupportedDevice)

    def gpm_sample(self, dev: Device, gi_id: int | None = None) -> ReadResult[Any]:
        """A new GPM sample of the whole GPU, or of one MIG GPU instance."""
        sample = self._call(dev.index, "nvmlGpmSampleAlloc")
        if isinstance(sample, Failure):
            return sample
        if gi_id is None:
            got = self._call(dev.index, "nvmlGpmSampleGet", dev.handle, sample)
        else:
            got = self._call(dev.index, "nvmlGpmMigSampleGet", dev.handle, gi_id, sample)
        if isinstance(got, Failure):
            self.gpm_free(sample)
            return got
        return sample

    def gpm_metrics(self, dev: Device, first: Any, second: Any) -> ReadResult[dict[str, float]]:
        """DCGM profiling values (ratios 0..1, bytes/s) between two samples."""
        request = lib.c_nvmlGpmMetricsGet_t()
        request.version = lib.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1 = first
        request.sample2 = second
        for i, (metric_id, _scale) in enumerate(GPM_METRICS.values()):
            request.metrics[i].metricId = metric_id
        answer = self._call(dev.index, "nvmlGpmMetricsGet", request)
        if isinstance(answer, Failure):
            return answer
        values: dict[str, float] = {}
        for i, (name, (_metric_id, scale)) in enumerate(GPM_METRICS.items()):
            metric = answer.metrics[i]
            if metric.nvmlReturn == lib.NVML_SUCCESS:
                values[name] = float(metric.value) * scale
        return values

    def gpm_free(self, sample: Any) -> None:
        self._call(-1, "nvmlGpmSampleFree", sample)

    # -- processes --------------------------------------------------------------------------

    def running_processes(self, dev: Device) -> ReadResult[list[GpuProcess]]:
        procs = self._call(dev.index, "nvmlDeviceGetComputeRunningProcesses", dev.handle)
        if isinstance(procs, Failure):
            return procs
        out = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            gi = getattr(p, "gpuInstanceId", NO_INSTANCE)
            out.append(
                GpuProcess(
                    int(p.pid),
                    None if used is None else int(used),
                    None if gi in (None, NO_INSTANCE) else int(gi),
                )
            )
        return out

    def process_sm_utilization(
        self, dev: Device, since_us: int
    ) -> ReadResult[tuple[dict[int, float], int]]:
        """Mean SM utilisation (0..1) per PID over the samples after ``since_us``, and the
        newest sample's timestamp (pass it back next time)."""
        try:
            samples = self._lib.nvmlDeviceGetProcessUtilization(dev.handle, since_us)
        except lib.NVMLError as exc:
            if exc.value == lib.NVML_ERROR_NOT_FOUND:  # no samples in the window
                return {}, since_us
            failure = classify(exc.value, "nvmlDeviceGetProcessUtilization")
            if isinstance(failure, NotSupported):
                return self._unsupported(dev.index, failure)
            return failure
        sums: dict[int, list[float]] = {}
        newest = since_us
        for sample in samples:
            stamp = int(sample.timeStamp)
            if stamp <= since_us:
                continue
            newest = max(newest, stamp)
            acc = sums.setdefault(int(sample.pid), [0.0, 0.0])
            acc[0] += int(sample.smUtil)
            acc[1] += 1
        return {pid: total / n / 100 for pid, (total, n) in sums.items()}, newest

    # -- XID events -------------------------------------------------------------------------

    def event_set(self) -> ReadResult[EventSet]:
        """A new NVML event set (devices are registered into it one by one)."""
        handle = self._call(-1, "nvmlEventSetCreate")
        return handle if isinstance(handle, Failure) else EventSet(handle)

    def register_xids(self, dev: Device, events: EventSet) -> ReadResult[None]:
        """Deliver this device's critical XID events to ``events``."""
        done = self._call(
            dev.index, "nvmlDeviceRegisterEvents", dev.handle, EVENT_XID, events.handle
        )
        return done if isinstance(done, Failure) else None

    def wait_xid(
        self, events: EventSet, timeout_ms: int
    ) -> ReadResult[tuple[Hashable, int] | None]:
        """Block until an event arrives (its device's :func:`handle_key` and XID code; other
        event types give ``(key, 0)``) or ``timeout_ms`` passes (None)."""
        try:
            data = self._lib.nvmlEventSetWait_v2(events.handle, timeout_ms)
        except lib.NVMLError as exc:
            if exc.value == lib.NVML_ERROR_TIMEOUT:
                return None
            return classify(exc.value, "nvmlEventSetWait_v2")
        xid = int(data.eventData) if int(data.eventType) & EVENT_XID else 0
        return handle_key(data.device), xid

    def free_event_set(self, events: EventSet) -> None:
        self._call(-1, "nvmlEventSetFree", events.handle)


def handle_key(handle: Any) -> Hashable:
    """Something equal for equal device handles: the address of a real (ctypes pointer) handle,
    or the handle itself where it is a plain object (the fake NVML's)."""
    try:
        address: int | None = ctypes.cast(handle, ctypes.c_void_p).value
    except (ctypes.ArgumentError, TypeError):
        return cast(Hashable, handle)
    return address


def _field_value(field: Any) -> float:
    kind = int(field.valueType)
    value = field.value
    if kind == lib.NVML_VALUE_TYPE_DOUBLE:
        return float(value.dVal)
    by_type = {
        lib.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        lib.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        lib.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        lib.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        lib.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
        lib.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
    }
    return float(getattr(value, by_type.get(kind, "uiVal")))
