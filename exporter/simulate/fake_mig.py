"""MIG and GPM functions of the fake NVML (pynvml signatures, structures and error codes).

MIG devices are reached as real NVML reaches them: ``nvmlDeviceGetMigDeviceHandleByIndex`` over
the instances that exist at that moment (instances can be created and destroyed over time).
GPM samples are real ctypes pointers, as ``nvmlGpmSampleAlloc`` returns; a metric between two
samples is the exact mean of the spec's curve over the time between them.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from exporter.nvml.library import lib as pynvml
from exporter.simulate.handles import FakeGpuInstance, FakeHandle, FakeMigHandle, FakeParts
from exporter.simulate.mig_profiles import Profile, geometry, profiles_for
from exporter.simulate.spec import MIB, SimGpm, SimGpu, SimMig


def _error(code: int) -> Exception:
    err: Exception = pynvml.NVMLError(code)
    return err


# GPM metric id -> (curve attribute, scale from the spec's unit to NVML's)
_GPM_METRICS = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: ("gr_engine_active", 100.0),
    pynvml.NVML_GPM_METRIC_SM_UTIL: ("sm_active", 100.0),
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: ("sm_occupancy", 100.0),
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: ("tensor_active", 100.0),
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: ("dram_active", 100.0),
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: ("pcie_tx_bytes", 1.0 / MIB),
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: ("pcie_rx_bytes", 1.0 / MIB),
}

# The names and unit NVML gives each metric (c_nvmlGpmMetric_t.metricInfo), as a real H200
# answered (tests/exporter/data/nvml-h200-580.159.04-busy.json): PCIe in MiB/s.
_GPM_NAMES = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: (b"gract", b"GRAPHICS_UTIL", b"%"),
    pynvml.NVML_GPM_METRIC_SM_UTIL: (b"smutil", b"SM_UTIL", b"%"),
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: (b"smocc", b"SM_OCCUPANCY", b"%"),
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: (b"mmaact", b"ANY_TENSOR_UTIL", b"%"),
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: (b"dram", b"DRAM_BW_UTIL", b"%"),
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: (b"pcitx", b"PCIE_TX_PER_SEC", b"MiB/s"),
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: (b"pcirx", b"PCIE_RX_PER_SEC", b"MiB/s"),
}


class MigGpmMixin(FakeParts):
    """Mixed into FakeNvml, which provides ``gpus``, ``_gpu``, ``_count``, ``sim_time`` and
    the GPM bookkeeping (``_gpm_samples``, ``_keep`` and their lock)."""

    _gpm_samples: dict[int, tuple[int, int | None, float]]
    _gpm_lock: threading.Lock
    _keep: dict[int, Any]

    def _mig(self, handle: FakeMigHandle) -> tuple[SimGpu, SimMig, float]:
        gpu, t = self._gpu(_parent(handle))
        for mig in gpu.live_migs(t):
            if mig.gi_id == handle.gi_id:
                return gpu, mig, t
        raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # the instance was destroyed

    # -- MIG mode and devices ---------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu, t = self._gpu(handle)
        if not _mig_capable(gpu):
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        pending = 1 if gpu.spec.mig is not None else 0  # `nvidia-smi -mig 1` sets the pending
        return [1 if gpu.mig_on(t) else 0, pending]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        gpu, t = self._gpu(handle)
        profiles = profiles_for(gpu.spec.model)
        if profiles is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not gpu.mig_on(t):
            return 0  # as a real H200 with MIG mode disabled answers
        return geometry(profiles)[0]  # one instance per compute slice at most

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: Any, profile: int, version: int = 2
    ) -> Any:
        """The board's profile answering to ``NVML_GPU_INSTANCE_PROFILE_*`` ``profile``
        (regardless of MIG mode, as NVML answers); NOT_SUPPORTED for one it does not have."""
        gpu, _ = self._gpu(handle)
        if "mig_geometry" in gpu.unsupported:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if profile == pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX:
            # newer than driver 580: a real H200 answers INVALID_ARGUMENT, not NOT_SUPPORTED
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        for name, p in (profiles_for(gpu.spec.model) or {}).items():
            if p.nvml_profile == profile:
                info: Any = (
                    pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
                    if version == 2
                    else pynvml.c_nvmlGpuInstanceProfileInfo_t()
                )
                info.id = p.profile_id
                info.sliceCount = p.compute_slices
                info.instanceCount = _instances(gpu, p)
                info.memorySizeMB = p.memory_mib
                info.multiprocessorCount = p.sms
                if version == 2:
                    info.name = f"MIG {name}".encode()
                return info
        raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, handle: Any, profile_id: int, placements: Any, count: Any
    ) -> int:
        """Placements of a profile (by profile id) in memory slices: ``start`` every ``size``
        slices across the GPU's memory; NO_PERMISSION unless privileged (``denied:
        [placements]``); INSUFFICIENT_SIZE when the caller's array is too small."""
        gpu, _ = self._gpu(handle)
        if "placements" in gpu.spec.denied:
            raise _error(pynvml.NVML_ERROR_NO_PERMISSION)
        profiles = profiles_for(gpu.spec.model) or {}
        found = [p for p in profiles.values() if p.profile_id == profile_id]
        if not found:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        size = found[0].memory_slices
        # every `size` memory slices, as many as instances fit (nvidia-smi mig -lgipp on a
        # real H200: 2g.35gb at {0,2,4}:2, not at 6 too — the compute slices run out)
        starts = range(0, geometry(profiles)[1] - size + 1, size)[: _instances(gpu, found[0])]
        n = count._obj  # the c_uint passed by reference, as NVML writes through the pointer
        if placements is None:
            n.value = len(starts)
            return int(pynvml.NVML_SUCCESS)
        if n.value < len(starts):
            n.value = len(starts)
            raise _error(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for i, start in enumerate(starts):
            placements[i].start, placements[i].size = start, size
        n.value = len(starts)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> FakeMigHandle:
        gpu, t = self._gpu(handle)
        live = gpu.live_migs(t)
        if index >= len(live):
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return FakeMigHandle(gpu.index, live[index].gi_id)

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeMigHandle) -> int:
        return self._mig(handle)[1].gi_id

    def nvmlDeviceGetComputeInstanceId(self, handle: FakeMigHandle) -> int:
        self._mig(handle)
        return 0

    def nvmlDeviceGetAttributes(self, handle: FakeMigHandle) -> Any:
        _, mig, _ = self._mig(handle)
        attrs = pynvml.c_nvmlDeviceAttributes()
        attrs.multiprocessorCount = mig.profile.sms
        attrs.gpuInstanceSliceCount = mig.profile.compute_slices
        attrs.computeInstanceSliceCount = mig.profile.compute_slices
        attrs.memorySizeMB = mig.profile.memory_mib
        return attrs

    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gi_id: int) -> FakeGpuInstance:
        gpu, t = self._gpu(handle)
        if "gpu_instances" in gpu.spec.denied:  # no MIG monitor capability
            raise _error(pynvml.NVML_ERROR_NO_PERMISSION)
        if not any(m.gi_id == gi_id for m in gpu.live_migs(t)):
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return FakeGpuInstance(gpu.index, gi_id)

    def nvmlGpuInstanceGetInfo(self, instance: FakeGpuInstance) -> Any:
        _, mig, _ = self._mig(FakeMigHandle(instance.index, instance.gi_id))
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.id = mig.gi_id
        info.profileId = mig.profile.profile_id
        info.placement.start = mig.placement_start
        info.placement.size = mig.profile.memory_slices
        return info

    def nvmlDeviceGetGpuInstanceProfileInfoById(self, handle: Any, profile_id: int) -> Any:
        gpu, _ = self._gpu(handle)
        for mig in gpu.migs:
            if mig.profile.profile_id == profile_id:
                info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
                info.id = profile_id
                info.sliceCount = mig.profile.compute_slices
                info.memorySizeMB = mig.profile.memory_mib
                info.multiprocessorCount = mig.profile.sms
                info.name = f"MIG {mig.profile_name}".encode()
                return info
        raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _mig_memory(self, handle: FakeMigHandle, version: int | None) -> Any:
        _, mig, t = self._mig(handle)
        total = mig.profile.memory_mib
        used = min(total, max(0, round(mig.memory_used_mib.value(t)))) * MIB
        mem = pynvml.c_nvmlMemory_v2_t() if version else pynvml.c_nvmlMemory_t()
        if version:
            mem.version = version
            mem.reserved = 0
        mem.total = total * MIB
        mem.used = used
        mem.free = total * MIB - used
        return mem

    # -- GPM --------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
        gpu, _ = self._gpu(handle)
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        has_gpm = gpu.gpm is not None or bool(gpu.migs)
        support.isSupportedDevice = int(has_gpm and "gpm" not in gpu.unsupported)
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        self._count()
        sample = ctypes.pointer(pynvml.struct_c_nvmlGpmSample_t())
        with self._gpm_lock:
            self._gpm_samples[ctypes.addressof(sample.contents)] = (-1, None, 0.0)
            self._keep[ctypes.addressof(sample.contents)] = sample  # keep the memory alive
        return sample

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self._count()
        address = ctypes.addressof(sample.contents)
        with self._gpm_lock:
            self._gpm_samples.pop(address, None)
            self._keep.pop(address, None)

    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any:
        gpu, t = self._gpu(handle, "gpm")
        if gpu.gpm is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self._record(sample, gpu.index, None, t)
        return sample

    def nvmlGpmMigSampleGet(self, handle: Any, gi_id: int, sample: Any) -> Any:
        gpu, mig, t = self._mig(FakeMigHandle(self._gpu(handle, "gpm")[0].index, gi_id))
        self._record(sample, gpu.index, mig.gi_id, t)
        return sample

    def _record(self, sample: Any, index: int, gi_id: int | None, t: float) -> None:
        address = ctypes.addressof(sample.contents)
        with self._gpm_lock:
            if address not in self._gpm_samples:
                raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            self._gpm_samples[address] = (index, gi_id, t)

    def nvmlGpmMetricsGet(self, metrics_get: Any) -> Any:
        self._count()
        first = self._gpm_samples.get(ctypes.addressof(metrics_get.sample1.contents))
        second = self._gpm_samples.get(ctypes.addressof(metrics_get.sample2.contents))
        if first is None or second is None or first[:2] != second[:2] or first[0] < 0:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        index, gi_id, t1 = first
        t2 = second[2]
        gpu = self.gpus[index]
        source: SimGpm | None = gpu.gpm
        if gi_id is not None:
            source = next(m.gpm for m in gpu.migs if m.gi_id == gi_id)
        for i in range(metrics_get.numMetrics):
            metric = metrics_get.metrics[i]
            spec = _GPM_METRICS.get(metric.metricId)
            if spec is None or source is None:
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            curve = getattr(source, spec[0])
            if t2 > t1:
                mean = (curve.integral(max(t2, 0.0)) - curve.integral(max(t1, 0.0))) / (t2 - t1)
            else:
                mean = curve.value(t2)
            metric.nvmlReturn = pynvml.NVML_SUCCESS
            metric.value = mean * spec[1]
            names = _GPM_NAMES.get(metric.metricId)
            if names is not None:  # NVML fills the metric's names and unit too
                info = metric.metricInfo
                info.shortName, info.longName, info.unit = names
        return metrics_get


def _parent(handle: FakeMigHandle) -> FakeHandle:
    return FakeHandle(handle.index)


def _instances(gpu: SimGpu, p: Profile) -> int:
    """How many instances of a profile fit the GPU: its compute and its memory slices both
    (a real H200: 1g.35gb 4, as memory allows, not 7)."""
    compute, memory = geometry(profiles_for(gpu.spec.model) or {})
    return min(compute // p.compute_slices, memory // p.memory_slices)


def _mig_capable(gpu: SimGpu) -> bool:
    return profiles_for(gpu.spec.model) is not None
