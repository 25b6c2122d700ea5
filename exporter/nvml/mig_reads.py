"""The MIG reads of the NVML boundary: whether MIG is on, the GPU's MIG geometry and the MIG
devices that exist now. Every NVML function is called through the boundary's one call
(:meth:`exporter.nvml.boundary.Nvml._call`), so an ``NVMLError`` is still caught in one place;
:class:`~exporter.nvml.boundary.Nvml` hands these reads out as its ``mig_*`` methods."""

from __future__ import annotations

import ctypes
from typing import Any, Protocol

from exporter.nvml.library import (
    FUNCTION_MISSING,
    GPU_INSTANCE_PROFILES,
    ONE_SLICE_PROFILE,
    PLACEMENT,
    lib,
)
from exporter.nvml.mig_names import mig_memory_slices, mig_profile_name
from exporter.nvml.results import (
    Device,
    Failure,
    GpuLost,
    MigGeometry,
    MigInstance,
    NotSupported,
    ReadResult,
    text,
)


class Call(Protocol):
    """The boundary's one call: NVML function ``name`` for GPU ``device`` (-1: none), its
    value or a typed :class:`Failure` (``quiet``: an unsupported function is not logged)."""

    def __call__(self, device: int, name: str, *args: Any, quiet: bool = False) -> Any: ...


class MigReads:
    """The MIG reads through one boundary's ``call``, with NVML's profile names cached."""

    def __init__(self, call: Call) -> None:
        self._call = call
        self._profile_names: dict[tuple[int, int], str | None] = {}

    def enabled(self, dev: Device) -> ReadResult[bool]:
        """Whether MIG mode is on (a GPU that cannot do MIG answers NotSupported, quietly)."""
        mode = self._call(dev.index, "nvmlDeviceGetMigMode", dev.handle, quiet=True)
        return mode if isinstance(mode, Failure) else bool(mode[0])

    def geometry(self, dev: Device) -> ReadResult[MigGeometry]:
        """The GPU's MIG geometry from NVML itself: the GPU-instance profile with the most
        slices is the whole GPU (``nvmlDeviceGetGpuInstanceProfileInfo`` of each
        ``NVML_GPU_INSTANCE_PROFILE_*``: 7 slices on an A100 or H100, 4 on an A30); its memory
        slices are the size of its placement (``nvmlDeviceGetGpuInstancePossiblePlacements``,
        ``nvmlGpuInstancePlacement_t.size``: memory slices occupied), or — that call needs a
        privileged user — its memory over that of the one-slice profile (one compute and one
        memory slice). A failure when NVML cannot tell (the cost service then falls back on its
        per-model table, and flags a model it does not know)."""
        infos: dict[int, Any] = {}
        failure: Failure | None = None
        for profile in GPU_INSTANCE_PROFILES:
            info = self._call(
                dev.index, "nvmlDeviceGetGpuInstanceProfileInfo", dev.handle, profile, quiet=True
            )
            if isinstance(info, GpuLost):
                return info
            if isinstance(info, Failure):
                failure = failure or info
            elif int(info.sliceCount) > 0:
                infos[profile] = info
        if not infos:
            assert failure is not None
            return failure
        full = max(infos.values(), key=lambda i: (int(i.sliceCount), int(i.memorySizeMB)))
        memory = self._placement_size(dev, int(full.id))
        if memory is None and ONE_SLICE_PROFILE in infos:
            one = int(infos[ONE_SLICE_PROFILE].memorySizeMB)
            memory = round(int(full.memorySizeMB) / one) if one > 0 else None
        if not memory:
            return failure or NotSupported(FUNCTION_MISSING, "nvmlDeviceGetGpuInstanceProfileInfo")
        return MigGeometry(int(full.sliceCount), memory)

    def _placement_size(self, dev: Device, profile_id: int) -> int | None:
        """Memory slices a placement of the profile occupies (None: NVML would not say)."""
        placements = (PLACEMENT * 8)()
        count = ctypes.c_uint(len(placements))
        done = self._call(
            dev.index,
            "nvmlDeviceGetGpuInstancePossiblePlacements",
            dev.handle,
            profile_id,
            placements,
            ctypes.byref(count),
            quiet=True,
        )
        if isinstance(done, Failure) or count.value < 1:
            return None
        return max(int(placements[i].size) for i in range(min(count.value, len(placements))))

    def instances(
        self, dev: Device, total_bytes: int, geometry: MigGeometry | None
    ) -> ReadResult[list[MigInstance]]:
        """The MIG devices that exist now (they come and go at run time). ``total_bytes`` is
        the physical GPU's memory, for profile names and memory slices (of the GPU's
        ``geometry``) when the GPU-instance lookup is refused."""
        slots = self._call(dev.index, "nvmlDeviceGetMaxMigDeviceCount", dev.handle)
        if isinstance(slots, Failure):
            return slots
        found: list[MigInstance] = []
        for slot in range(int(slots)):
            handle = self._call(
                dev.index, "nvmlDeviceGetMigDeviceHandleByIndex", dev.handle, slot, quiet=True
            )
            if isinstance(handle, Failure):
                if handle.code == lib.NVML_ERROR_NOT_FOUND:
                    continue  # an empty slot
                return handle
            instance = self._instance(dev, Device(dev.index, handle), total_bytes, geometry)
            if isinstance(instance, GpuLost):
                return instance
            if not isinstance(instance, Failure):  # destroyed while we looked: skip it
                found.append(instance)
        return found

    def _instance(
        self, parent: Device, mig: Device, total_bytes: int, geometry: MigGeometry | None
    ) -> ReadResult[MigInstance]:
        uuid = self._call(mig.index, "nvmlDeviceGetUUID", mig.handle)
        gi_id = self._call(mig.index, "nvmlDeviceGetGpuInstanceId", mig.handle)
        ci_id = self._call(mig.index, "nvmlDeviceGetComputeInstanceId", mig.handle)
        attrs = self._call(mig.index, "nvmlDeviceGetAttributes", mig.handle)
        for value in (uuid, gi_id, ci_id, attrs):
            if isinstance(value, Failure):
                return value
        uuid = text(uuid)
        gi_slices = int(attrs.gpuInstanceSliceCount)
        ci_slices = int(attrs.computeInstanceSliceCount) or gi_slices
        memory_mb = int(attrs.memorySizeMB)
        # The GPU-instance lookup needs the MIG monitor capability (root or CAP_SYS_ADMIN hold
        # it implicitly); without it NVML answers NO_PERMISSION and the name and memory slices
        # come from the MIG device's own attributes, as NVIDIA's device plugin names them.
        gi = self._call(parent.index, "nvmlDeviceGetGpuInstanceById", parent.handle, gi_id)
        info = (
            gi
            if isinstance(gi, Failure)
            else self._call(parent.index, "nvmlGpuInstanceGetInfo", gi)
        )
        if isinstance(info, GpuLost):
            return info
        derived = mig_profile_name(gi_slices, ci_slices, memory_mb, total_bytes)
        if isinstance(info, Failure):
            slices = geometry.memory_slices if geometry is not None else 0
            memory = mig_memory_slices(memory_mb, total_bytes, slices)
            return MigInstance(
                mig, uuid, int(gi_id), int(ci_id), derived, gi_slices, memory, lookup_failure=info
            )
        memory = int(info.placement.size)
        name = self._profile_name(parent, int(info.profileId))
        if name is None or ci_slices != gi_slices:
            name = derived  # a compute instance smaller than its GPU instance: "1c.2g.20gb"
        return MigInstance(mig, uuid, int(gi_id), int(ci_id), name, gi_slices, memory)

    def _profile_name(self, parent: Device, profile_id: int) -> str | None:
        """NVML's own name of a GPU-instance profile ("MIG 3g.40gb" -> "3g.40gb"), cached."""
        key = (parent.index, profile_id)
        if key not in self._profile_names:
            info = self._call(
                parent.index, "nvmlDeviceGetGpuInstanceProfileInfoById", parent.handle, profile_id
            )
            name = None if isinstance(info, Failure) else text(info.name).removeprefix("MIG ")
            self._profile_names[key] = name
        return self._profile_names[key]
