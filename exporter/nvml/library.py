"""The NVML library (the only import of ``pynvml`` in the exporter) and the values of its
enums, structures and field ids that the exporter passes through the boundary."""

from __future__ import annotations

import pynvml

# What the fake NVML needs to look like the real one: the error type, constants and structs.
lib = pynvml

FUNCTION_MISSING = lib.NVML_ERROR_FUNCTION_NOT_FOUND
NO_INSTANCE = 0xFFFFFFFF  # NVML's "not in a MIG instance"
# GPU-instance profiles (NVML_GPU_INSTANCE_PROFILE_*): 0 .. COUNT - 1, asked one by one for the
# GPU's MIG geometry (exporter/nvml/mig_reads.py ``geometry``)
GPU_INSTANCE_PROFILES = range(lib.NVML_GPU_INSTANCE_PROFILE_COUNT)
ONE_SLICE_PROFILE = lib.NVML_GPU_INSTANCE_PROFILE_1_SLICE  # one compute, one memory slice
PLACEMENT = lib.c_nvmlGpuInstancePlacement_t

# GPM metric ids (NVML) for the DCGM profiling fields, and the factor to DCGM's unit.
GPM_METRICS = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": (lib.NVML_GPM_METRIC_GRAPHICS_UTIL, 0.01),
    "DCGM_FI_PROF_SM_ACTIVE": (lib.NVML_GPM_METRIC_SM_UTIL, 0.01),
    "DCGM_FI_PROF_SM_OCCUPANCY": (lib.NVML_GPM_METRIC_SM_OCCUPANCY, 0.01),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (lib.NVML_GPM_METRIC_ANY_TENSOR_UTIL, 0.01),
    "DCGM_FI_PROF_DRAM_ACTIVE": (lib.NVML_GPM_METRIC_DRAM_BW_UTIL, 0.01),
    "DCGM_FI_PROF_PCIE_TX_BYTES": (lib.NVML_GPM_METRIC_PCIE_TX_PER_SEC, 1024.0 * 1024.0),
    "DCGM_FI_PROF_PCIE_RX_BYTES": (lib.NVML_GPM_METRIC_PCIE_RX_PER_SEC, 1024.0 * 1024.0),
}


# Values of the NVML enums the collector passes through the boundary.
CLOCK_SM = lib.NVML_CLOCK_SM
CLOCK_MEM = lib.NVML_CLOCK_MEM
TEMPERATURE_GPU = lib.NVML_TEMPERATURE_GPU
FI_DEV_MEMORY_TEMP = lib.NVML_FI_DEV_MEMORY_TEMP
EVENT_XID = lib.nvmlEventTypeXidCriticalError
ECC_CORRECTED = lib.NVML_MEMORY_ERROR_TYPE_CORRECTED
ECC_UNCORRECTED = lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
ECC_VOLATILE = lib.NVML_VOLATILE_ECC
ECC_AGGREGATE = lib.NVML_AGGREGATE_ECC
PERF_POLICIES = {
    "power": lib.NVML_PERF_POLICY_POWER,
    "thermal": lib.NVML_PERF_POLICY_THERMAL,
    "sync_boost": lib.NVML_PERF_POLICY_SYNC_BOOST,
    "board_limit": lib.NVML_PERF_POLICY_BOARD_LIMIT,
    "low_utilization": lib.NVML_PERF_POLICY_LOW_UTILIZATION,
    "reliability": lib.NVML_PERF_POLICY_RELIABILITY,
}
NVLINK_COUNTERS = {
    "replay": lib.NVML_NVLINK_ERROR_DL_REPLAY,
    "recovery": lib.NVML_NVLINK_ERROR_DL_RECOVERY,
    "crc_flit": lib.NVML_NVLINK_ERROR_DL_CRC_FLIT,
    "crc_data": lib.NVML_NVLINK_ERROR_DL_CRC_DATA,
}
# NVML field ids of the NVLink error counters summed over all links (what DCGM reads)
NVLINK_TOTAL_FIELDS = {
    "crc_flit": lib.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
    "crc_data": lib.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
    "replay": lib.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
    "recovery": lib.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
}
# NVLink data throughput counters (KiB since boot, nvml.h) read for all links at once: DCGM 4.6
# (dcgmlib/src/DcgmCacheManager.cpp, ReadAndCacheNvLinkBandwidth) passes scopeId UINT_MAX,
# "all NvLinks of the GPU", and sums RX and TX for DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL.
NVLINK_THROUGHPUT_FIELDS = (
    lib.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    lib.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
)
NVLINK_ALL_LINKS = 0xFFFFFFFF
NVLINK_MAX_LINKS = 18  # NVLink 4 (Hopper); NVML's own maximum is larger but no GPU has more yet
CLOCK_EVENT_REASONS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
