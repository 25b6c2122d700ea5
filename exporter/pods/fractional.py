"""Fractional GPU allocations: HAMi's pod annotations, and memory-profile vGPU resources.

**HAMi** (Project-HAMi/HAMi) shares a GPU by memory and cores: a container asks for
``nvidia.com/gpu`` with ``nvidia.com/gpumem`` (MiB) and ``nvidia.com/gpucores`` (% of the SMs;
pkg/scheduler/config/config.go, ``defaultCores: 0`` = no core limit). HAMi's scheduler writes
what it placed into the pod annotation ``hami.io/vgpu-devices-allocated``
(pkg/device/nvidia/device.go); the format (pkg/device/devices.go ``EncodeContainerDevices``,
``DecodePodDevices``) is, per device, ``UUID,Type,UsedMem,UsedCores`` followed by ``:``
(``OneContainerMultiDeviceSplitSymbol``), and the containers' lists joined by ``;``
(``OnePodMultiContainerSplitSymbol``), empty entries kept so that entry i is container i of the
pod: its init containers, then its containers (``CollapseInitContainerUsage``). For example::

    GPU-8f2c1d90-3e5a-4b17-9c2e-5da9abb51763,NVIDIA,4096,30:;

is one container holding 4096 MiB and 30 % of the cores of that GPU. HAMi's device plugin
reports virtual device ids to the kubelet (``<GPU uuid>-<n>``, one per split:
pkg/device-plugin/nvidiadevice/nvinternal/rm/devices.go); the annotation, not those ids, says
which GPU a container got.

**Memory-profile vGPU**: a device plugin hands out profiles of a fixed memory size under one
resource name each (e.g. ``nvidia.com/vgpu-8g``); the exporter is told each resource's profile
memory (``--pod-resources.vgpu-profiles RESOURCE=MiB,…``) and reads the device id as any other.

The share of the physical GPU (docs/metrics.md): memory share = MiB / the GPU's memory; compute
share = cores / 100, or, for a container without a core limit (cores 0) or a profile vGPU, its
memory share — it may run on any free SM, but its place on the GPU was sized by memory.
"""

from __future__ import annotations

from dataclasses import dataclass

HAMI_ALLOCATED = "hami.io/vgpu-devices-allocated"
HAMI_RESOURCE = "nvidia.com/gpu"  # HAMi's resourceCountName for NVIDIA GPUs


@dataclass(frozen=True, slots=True)
class FractionalDevice:
    uuid: str
    memory_mib: int
    cores: int | None  # % of the SMs; None: no core limit


def parse_hami(annotation: str, containers: list[str]) -> dict[str, tuple[FractionalDevice, ...]]:
    """Container name -> the devices HAMi allocated it. ``containers``: the pod's init
    containers then its containers, in spec order. A malformed device entry is skipped (HAMi
    would refuse it too); entries beyond the pod's containers are ignored."""
    out: dict[str, tuple[FractionalDevice, ...]] = {}
    entries = annotation.split(";")
    for name, entry in zip(containers, entries, strict=False):
        devices = []
        for item in entry.split(":"):
            fields = item.split(",")
            if len(fields) < 4 or not fields[0]:
                continue
            try:
                memory, cores = int(fields[2]), int(fields[3])
            except ValueError:
                continue
            if memory < 0 or not 0 <= cores <= 100:
                continue
            devices.append(FractionalDevice(fields[0], memory, cores or None))
        if devices:
            out[name] = tuple(devices)
    return out


def parse_profiles(entries: tuple[str, ...]) -> dict[str, int]:
    """``RESOURCE=MiB`` flag values -> {resource: MiB}; raises ValueError on a bad entry."""
    out: dict[str, int] = {}
    for entry in entries:
        resource, sep, mib = entry.partition("=")
        if not sep or not resource.strip() or not mib.strip().isdigit() or int(mib) <= 0:
            raise ValueError(f"{entry!r}: expected RESOURCE=MiB, e.g. nvidia.com/vgpu-8g=8192")
        out[resource.strip()] = int(mib)
    return out
