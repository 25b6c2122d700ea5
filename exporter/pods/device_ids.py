"""Device ids as NVIDIA's (and GKE's) device plugins report them to the kubelet.

    GPU-<uuid>                whole GPU                      key GPU-<uuid>
    MIG-<uuid>                MIG instance                   key MIG-<uuid>
    MIG-GPU-<uuid>/<gi>/<ci>  MIG instance, legacy form      key GPU-<uuid>/gi<gi>
    <any of the above>::N     time-slicing replica N         same key, replica N
    nvidia<N>                 GKE whole GPU (minor N)        key nvidia<N>
    nvidia<N>/gi<M>           GKE MIG instance               key nvidia<N>/gi<M>
    nvidia<N>/vgpu<K>         GKE time-sharing replica K     key nvidia<N>, replica K
    nvidia<N>/gi<M>/vgpu<K>   GKE time-sharing on a MIG      key nvidia<N>/gi<M>, replica K
                              partition, replica K

GKE's forms are those of its device plugin (GoogleCloudPlatform/container-engine-accelerators:
pkg/gpu/nvidia/mig/mig.go names a partition ``nvidia<N>/gi<M>``; pkg/gpu/nvidia/manager.go
appends ``/vgpu<K>`` to a device id for each time-sharing client).

A DRA device of a partitionable GPU that the driver has not created yet has no UUID in its
ResourceSlice, only its GPU and MIG profile: its key is ``GPU-<uuid>/mig-profile/<profile>``,
which matches the GPU's one MIG instance of that profile (none when there are several: never
guessed).

Keys are what :mod:`exporter.pods.shares` matches against the GPUs and MIG instances NVML
reports. An id in none of these forms is :data:`UNKNOWN` — counted, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_REPLICA = re.compile(r"^(?P<base>.+?)::(?P<n>\d+)$")
_GPU = re.compile(rf"^GPU-{_UUID}$")
_MIG = re.compile(rf"^MIG-{_UUID}$")
_MIG_LEGACY = re.compile(rf"^MIG-(?P<gpu>GPU-{_UUID})/(?P<gi>\d+)/(?P<ci>\d+)$")
_GKE = re.compile(r"^nvidia(?P<n>\d+)(?:/gi(?P<gi>\d+))?(?:/vgpu(?P<vgpu>\d+))?$")

DEFAULT_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*")


@dataclass(frozen=True, slots=True)
class DeviceRef:
    key: str  # what to match against NVML's devices; "" when unknown
    replica: int | None = None


UNKNOWN = DeviceRef("")


def parse_device_id(device_id: str) -> DeviceRef:
    replica: int | None = None
    base = device_id
    m = _REPLICA.match(device_id)
    if m:
        base, replica = m.group("base"), int(m.group("n"))
    if _GPU.match(base) or _MIG.match(base):
        return DeviceRef(base, replica)
    if legacy := _MIG_LEGACY.match(base):
        return DeviceRef(f"{legacy.group('gpu')}/gi{int(legacy.group('gi'))}", replica)
    if (gke := _GKE.match(base)) and replica is None:
        key = f"nvidia{int(gke.group('n'))}"
        if gke.group("gi") is not None:
            key += f"/gi{int(gke.group('gi'))}"
        vgpu = gke.group("vgpu")
        return DeviceRef(key, None if vgpu is None else int(vgpu))
    return UNKNOWN


def is_gpu_resource(resource: str, patterns: tuple[str, ...] = DEFAULT_RESOURCES) -> bool:
    return any(fnmatchcase(resource, p) for p in patterns)


def mig_profile_key(gpu_uuid: str, profile: str) -> str:
    """The key of the one MIG instance of ``profile`` on that GPU (see above)."""
    return f"{gpu_uuid}/mig-profile/{profile}"
