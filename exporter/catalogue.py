"""Every per-GPU series the exporter publishes: name, type, unit, help and NVML source.

DCGM-compatible series keep dcgm-exporter's names, units and help text; our own series use base
units and standard suffixes. docs/metrics.md is checked against this table by the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Collector = Literal[
    "processes",
    "mig",
    "profiling",
    "utilization",
    "memory",
    "temperature",
    "power",
    "clocks",
    "pcie",
    "ecc",
    "remapped_rows",
    "xid",
    "clock_events",
    "nvlink",
    "nvlink_links",
]
COLLECTORS: tuple[Collector, ...] = get_args(Collector)
# Off unless asked for: 72 series and 72 NVML calls per NVLink GPU per collection.
OFF_BY_DEFAULT = frozenset({"nvlink_links"})


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    kind: Literal["gauge", "counter"]
    unit: str
    help: str
    collector: Collector
    source: str


def _s(
    name: str,
    kind: Literal["gauge", "counter"],
    unit: str,
    help: str,
    collector: Collector,
    source: str,
) -> Series:
    return Series(name, kind, unit, help, collector, source)


# Laid out as a table: one entry per series.
SCALAR_SERIES: tuple[Series, ...] = (
    _s("DCGM_FI_DEV_GPU_UTIL", "gauge", "%", "GPU utilization (in %).", "utilization",
       "nvmlDeviceGetUtilizationRates().gpu"),
    _s("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "%", "Memory utilization (in %).", "utilization",
       "nvmlDeviceGetUtilizationRates().memory"),
    _s("DCGM_FI_DEV_ENC_UTIL", "gauge", "%", "Encoder utilization (in %).", "utilization",
       "nvmlDeviceGetEncoderUtilization()"),
    _s("DCGM_FI_DEV_DEC_UTIL", "gauge", "%", "Decoder utilization (in %).", "utilization",
       "nvmlDeviceGetDecoderUtilization()"),
    _s("DCGM_FI_DEV_FB_FREE", "gauge", "MiB", "Framebuffer memory free (in MiB).", "memory",
       "nvmlDeviceGetMemoryInfo(v2).free"),
    _s("DCGM_FI_DEV_FB_USED", "gauge", "MiB", "Framebuffer memory used (in MiB).", "memory",
       "nvmlDeviceGetMemoryInfo(v2).used"),
    _s("DCGM_FI_DEV_FB_RESERVED", "gauge", "MiB", "Framebuffer memory reserved (in MiB).",
       "memory", "nvmlDeviceGetMemoryInfo(v2).reserved"),
    _s("DCGM_FI_DEV_FB_TOTAL", "gauge", "MiB", "Framebuffer memory total (in MiB).", "memory",
       "nvmlDeviceGetMemoryInfo().total"),
    _s("DCGM_FI_DEV_GPU_TEMP", "gauge", "C", "GPU temperature (in C).", "temperature",
       "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)"),
    _s("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "C", "Memory temperature (in C).", "temperature",
       "nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)"),
    _s("DCGM_FI_DEV_POWER_USAGE", "gauge", "W", "Power draw (in W).", "power",
       "nvmlDeviceGetPowerUsage() / 1000"),
    _s("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "gauge", "W",
       "Effective power limit that the driver enforces after taking into account all limiters "
       "(in W).", "power", "nvmlDeviceGetEnforcedPowerLimit() / 1000"),
    _s("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "mJ",
       "Total energy consumption since boot (in mJ).", "power",
       "nvmlDeviceGetTotalEnergyConsumption()"),
    _s("DCGM_FI_DEV_SM_CLOCK", "gauge", "MHz", "SM clock frequency (in MHz).", "clocks",
       "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)"),
    _s("DCGM_FI_DEV_MEM_CLOCK", "gauge", "MHz", "Memory clock frequency (in MHz).", "clocks",
       "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)"),
    _s("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "1", "Total number of PCIe retries.",
       "pcie", "nvmlDeviceGetPcieReplayCounter()"),
    _s("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "1",
       "Total number of single-bit volatile ECC errors.", "ecc",
       "nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE)"),
    _s("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "1",
       "Total number of double-bit volatile ECC errors.", "ecc",
       "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)"),
    _s("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "1",
       "Total number of single-bit persistent ECC errors.", "ecc",
       "nvmlDeviceGetTotalEccErrors(CORRECTED, AGGREGATE)"),
    _s("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "1",
       "Total number of double-bit persistent ECC errors.", "ecc",
       "nvmlDeviceGetTotalEccErrors(UNCORRECTED, AGGREGATE)"),
    _s("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "1",
       "Number of remapped rows for correctable errors.", "remapped_rows",
       "nvmlDeviceGetRemappedRows()[0]"),
    _s("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "1",
       "Number of remapped rows for uncorrectable errors.", "remapped_rows",
       "nvmlDeviceGetRemappedRows()[1]"),
    _s("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "bool",
       "Whether a row remapping is pending (1) or not (0).", "remapped_rows",
       "nvmlDeviceGetRemappedRows()[2]"),
    _s("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "bool",
       "Whether remapping of rows has failed (1) or not (0).", "remapped_rows",
       "nvmlDeviceGetRemappedRows()[3]"),
    _s("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "bitmask",
       "Current clock throttle reasons (bitmask of DCGM_CLOCKS_THROTTLE_REASON_*).",
       "clock_events", "nvmlDeviceGetCurrentClocksEventReasons()"),
    _s("DCGM_FI_DEV_POWER_VIOLATION", "counter", "ns",
       "Throttling duration due to power constraints (in ns).", "clock_events",
       "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_POWER).violationTime"),
    _s("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "ns",
       "Throttling duration due to thermal constraints (in ns).", "clock_events",
       "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_THERMAL).violationTime"),
    _s("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "counter", "ns",
       "Throttling duration due to sync-boost constraints (in ns).", "clock_events",
       "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_SYNC_BOOST).violationTime"),
    _s("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "counter", "ns",
       "Throttling duration due to board limit constraints (in ns).", "clock_events",
       "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_BOARD_LIMIT).violationTime"),
    _s("DCGM_FI_DEV_LOW_UTIL_VIOLATION", "counter", "ns",
       "Throttling duration due to low utilization (in ns).", "clock_events",
       "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_LOW_UTILIZATION).violationTime"),
    _s("DCGM_FI_DEV_RELIABILITY_VIOLATION", "counter", "ns",
       "Throttling duration due to reliability constraints (in ns).", "clock_events",
       "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_RELIABILITY).violationTime"),
    _s("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "MB/s",
       "Total number of NVLink bandwidth counters for all lanes.", "nvlink",
       "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX + _TX, all links): "
       "KiB between two collections / seconds / 1000"),
    _s("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "ratio",
       "Ratio of time the graphics engine is active.", "profiling",
       "GPM NVML_GPM_METRIC_GRAPHICS_UTIL / 100"),
    _s("DCGM_FI_PROF_SM_ACTIVE", "gauge", "ratio",
       "The ratio of cycles an SM has at least 1 warp assigned.", "profiling",
       "GPM NVML_GPM_METRIC_SM_UTIL / 100"),
    _s("DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "ratio",
       "The ratio of number of warps resident on an SM.", "profiling",
       "GPM NVML_GPM_METRIC_SM_OCCUPANCY / 100"),
    _s("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "ratio",
       "Ratio of cycles the tensor (HMMA) pipe is active.", "profiling",
       "GPM NVML_GPM_METRIC_ANY_TENSOR_UTIL / 100"),
    _s("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "ratio",
       "Ratio of cycles the device memory interface is active sending or receiving data.",
       "profiling", "GPM NVML_GPM_METRIC_DRAM_BW_UTIL / 100"),
    _s("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "B/s",
       "The rate of data transmitted over the PCIe bus - including both protocol headers and "
       "data payloads - in bytes per second.", "profiling",
       "GPM NVML_GPM_METRIC_PCIE_TX_PER_SEC x 2^20"),
    _s("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "B/s",
       "The rate of data received over the PCIe bus - including both protocol headers and "
       "data payloads - in bytes per second.", "profiling",
       "GPM NVML_GPM_METRIC_PCIE_RX_PER_SEC x 2^20"),
)  # fmt: skip

# Series a MIG instance has of its own; the rest are the physical GPU's and are emitted once.
MIG_INSTANCE_SERIES = frozenset(
    {"DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_TOTAL"}
    | {s.name for s in SCALAR_SERIES if s.collector == "profiling"}
)

VIOLATION_SERIES = {
    "power": "DCGM_FI_DEV_POWER_VIOLATION",
    "thermal": "DCGM_FI_DEV_THERMAL_VIOLATION",
    "sync_boost": "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",
    "board_limit": "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
    "low_utilization": "DCGM_FI_DEV_LOW_UTIL_VIOLATION",
    "reliability": "DCGM_FI_DEV_RELIABILITY_VIOLATION",
}

NVLINK_DCGM_NAMES = {
    "crc_flit": "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT",
    "crc_data": "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT",
    "replay": "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT",
    "recovery": "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT",
}
NVLINK_HELP = {
    "crc_flit": "NVLink flow-control CRC error counter",
    "crc_data": "NVLink data CRC error counter",
    "replay": "NVLink replay error counter",
    "recovery": "NVLink recovery error counter",
}

# The last XID, with dcgm-exporter 4.x's err_code and err_msg labels (its
# internal/pkg/collector/gpu_collector.go and xid_errors.go); emitted for lost GPUs too.
XID_LAST = Series(
    "DCGM_FI_DEV_XID_ERRORS",
    "gauge",
    "xid",
    "Value of the last XID error encountered.",
    "xid",
    "nvmlEventSetWait_v2 (nvmlEventTypeXidCriticalError), in a background thread",
)
XID_COUNTER = Series(
    "gpu_xid_errors_total",
    "counter",
    "1",
    "XID errors seen since the exporter started, by XID code.",
    "xid",
    "nvmlEventSetWait_v2 (nvmlEventTypeXidCriticalError), in a background thread",
)
CLOCK_EVENT_ACTIVE = Series(
    "gpu_clock_event_reason_active",
    "gauge",
    "bool",
    "1 while the named clock event reason (throttle reason) holds the clocks down.",
    "clock_events",
    "nvmlDeviceGetCurrentClocksEventReasons() bits",
)
MIG_INSTANCE_INFO = Series(
    "gpu_mig_instance_info",
    "gauge",
    "1",
    "One series per MIG instance; labels give its profile, GPU instance id, MIG UUID, compute "
    "and memory slices, and the GPU's MIG geometry: gpu_compute_slices and gpu_memory_slices "
    "(7 and 8 on an A100 or H100, 4 and 4 on an A30; empty where NVML does not tell). Value 1.",
    "mig",
    "nvmlDeviceGetMigDeviceHandleByIndex, nvmlGpuInstanceGetInfo, nvmlDeviceGetAttributes, "
    "nvmlDeviceGetGpuInstanceProfileInfo (the profile with the most slices), "
    "nvmlDeviceGetGpuInstancePossiblePlacements",
)
ALLOCATION_SHARE = Series(
    "gpu_allocation_share",
    "gauge",
    "ratio",
    "Share of the physical GPU a container holds: whole GPU 1, MIG instance compute slices / "
    "the GPU's (none where NVML does not tell the GPU's MIG geometry), "
    "time-slice replica 1/replicas of that device, DRA claim the device's share / its holders, "
    "HAMi cores/100.",
    "processes",
    "kubelet pod-resources List (devices, dynamic_resources) + GetAllocatableResources, "
    "ResourceSlices, HAMi annotations",
)
ALLOCATION_MEMORY_SHARE = Series(
    "gpu_allocation_memory_share",
    "gauge",
    "ratio",
    "Share of the physical GPU's memory a container holds: whole GPU 1, MIG instance memory "
    "slices / the GPU's, time-slice replica 1/replicas, DRA claim the device's share / its "
    "holders, HAMi or vGPU profile MiB / the GPU's memory.",
    "processes",
    "kubelet pod-resources List (devices, dynamic_resources), ResourceSlices, HAMi annotations",
)
ALLOCATION_OVERSUBSCRIBED = Series(
    "gpu_allocation_oversubscribed",
    "gauge",
    "bool",
    "1 when the shares held of this GPU add up to more than 1 on the named basis (compute or "
    "memory; HAMi can over-subscribe a GPU), else 0; per GPU with holdings.",
    "processes",
    "gpu_allocation_share, gpu_allocation_memory_share",
)
CONTAINER_SM = Series(
    "gpu_container_sm_utilization_ratio",
    "gauge",
    "ratio",
    "SM utilisation of a container's processes on this device since the last collection "
    "(sum over its processes, 0..1 of the device).",
    "processes",
    "nvmlDeviceGetProcessUtilization, /proc/<pid>/cgroup, pod directory",
)
CONTAINER_MEMORY = Series(
    "gpu_container_memory_used_bytes",
    "gauge",
    "bytes",
    "Device memory used by a container's processes on this device.",
    "processes",
    "nvmlDeviceGetComputeRunningProcesses, /proc/<pid>/cgroup, pod directory",
)
UNATTRIBUTED = Series(
    "gpu_unattributed_processes",
    "gauge",
    "1",
    "Processes on this GPU that map to no pod (host processes, or unknown containers); counted, "
    "never guessed.",
    "processes",
    "nvmlDeviceGetComputeRunningProcesses, /proc/<pid>/cgroup",
)
DEVICE_UP = Series(
    "gpu_device_up",
    "gauge",
    "bool",
    "1 when the last read of this GPU succeeded, 0 when it is lost or its NVML read has not "
    "returned within three collection intervals.",
    "utilization",
    "any NVML device call",
)
DEVICE_INFO = Series(
    "gpu_device_info",
    "gauge",
    "1",
    "Static facts about the GPU as labels (serial, VBIOS version); value 1.",
    "utilization",
    "nvmlDeviceGetSerial, nvmlDeviceGetVbiosVersion, nvmlDeviceGetMemoryInfo",
)

# Integrals at collection resolution (exporter/integrals.py): counters of seconds, so
# that any two scrapes give the integral between them, finer than the scrape
_AT_COLLECTION = "each collection (exporter/integrals.py)"
ALLOCATION_SHARE_SECONDS = Series(
    "gpu_allocation_share_seconds_total",
    "counter",
    "seconds",
    "Integral of gpu_allocation_share over time while the GPU is up, at collection resolution "
    "(an over-subscribed GPU's shares each over their sum): seconds of the physical GPU the "
    "container held. Its label share is the gpu_allocation_share it integrates (a share that "
    "changes makes a new series).",
    "processes",
    f"gpu_allocation_share x gpu_device_up, {_AT_COLLECTION}",
)
ALLOCATION_MEMORY_SHARE_SECONDS = Series(
    "gpu_allocation_memory_share_seconds_total",
    "counter",
    "seconds",
    "Integral of gpu_allocation_memory_share over time while the GPU is up, at collection "
    "resolution.",
    "processes",
    f"gpu_allocation_memory_share x gpu_device_up, {_AT_COLLECTION}",
)
ALLOCATION_BUSY_SHARE_SECONDS = Series(
    "gpu_allocation_busy_share_seconds_total",
    "counter",
    "seconds",
    "Integral of gpu_allocation_share x the held device's utilisation "
    "(DCGM_FI_PROF_GR_ENGINE_ACTIVE where read, else DCGM_FI_DEV_GPU_UTIL / 100) over the time "
    "that utilisation was read, at collection resolution.",
    "processes",
    f"gpu_allocation_share x DCGM_FI_PROF_GR_ENGINE_ACTIVE or DCGM_FI_DEV_GPU_UTIL, "
    f"{_AT_COLLECTION}",
)
ALLOCATION_UNMEASURED_SHARE_SECONDS = Series(
    "gpu_allocation_unmeasured_share_seconds_total",
    "counter",
    "seconds",
    "Integral of gpu_allocation_share over the time the held device's utilisation was not read, "
    "at collection resolution: published from a holding's first such collection on, so a "
    "holding whose use was always read has none; gpu_allocation_share_seconds_total less this is "
    "the measured part, whose efficiency is gpu_allocation_busy_share_seconds_total over it.",
    "processes",
    f"gpu_allocation_share where no utilisation was read, {_AT_COLLECTION}",
)
CONTAINER_SM_SECONDS = Series(
    "gpu_container_sm_seconds_total",
    "counter",
    "seconds",
    "Integral of gpu_container_sm_utilization_ratio over time: seconds of the device's SMs the "
    "container's processes used, at collection resolution.",
    "processes",
    f"gpu_container_sm_utilization_ratio, {_AT_COLLECTION}",
)
DEVICE_SECONDS = Series(
    "gpu_device_seconds_total",
    "counter",
    "seconds",
    'Seconds the GPU was seen up (state="up") and reported down (state="down", as '
    "gpu_device_up 0), at collection resolution.",
    "utilization",
    f"gpu_device_up, {_AT_COLLECTION}",
)
INTEGRALS = (
    DEVICE_SECONDS,
    ALLOCATION_SHARE_SECONDS,
    ALLOCATION_MEMORY_SHARE_SECONDS,
    ALLOCATION_BUSY_SHARE_SECONDS,
    ALLOCATION_UNMEASURED_SHARE_SECONDS,
    CONTAINER_SM_SECONDS,
)
# the families published only from a series' first nonzero reading on (exporter/integrals.py)
SPARSE_INTEGRALS = frozenset({ALLOCATION_UNMEASURED_SHARE_SECONDS.name})
