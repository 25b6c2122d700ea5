"""Pods in a fleet spec: who holds which GPU, MIG instance or time-slice replica, and which
PIDs run in which container. Simulate mode serves them through a real kubelet pod-resources
gRPC server and a /proc tree of cgroup files, so the exporter's real client and parser run.

Device ids may be written literally (``GPU-…``, ``MIG-…``, ``GPU-…::2``) or as references to the
spec's own GPUs, resolved after expansion:

    gpu0          the whole GPU with index 0          -> GPU-<uuid>
    gpu0/gi3      its MIG instance with GI id 3        -> MIG-<uuid>
    gpu0::2       time-slice replica 2 of GPU 0        -> GPU-<uuid>::2
    gpu0/gi3::1   replica 1 of that MIG instance       -> MIG-<uuid>::1
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

_REF = re.compile(r"^gpu(\d+)(?:/gi(\d+))?(?:::(\d+))?$")

Runtime = Literal["containerd", "crio", "docker"]
# "-cgroupns": as an exporter with a private cgroup namespace reads it (cgroup v2's default for
# containers): relative to the exporter's own cgroup
CgroupLayout = Literal[
    "v2-systemd",
    "v1-systemd",
    "v1-cgroupfs",
    "v2-cgroupfs",
    "v2-systemd-cgroupns",
    "v2-cgroupfs-cgroupns",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeviceClaim(_Model):
    resource: str = "nvidia.com/gpu"
    ids: list[str]


class ClaimUse(_Model):
    """A DRA resource claim the container uses. Several containers (of one pod or several)
    naming the same claim share its devices. ``devices``: spec references (``gpu0``: the
    simulated driver's device ``gpu-0``; ``gpu0/gi3``: its MIG device ``gpu-0-mig-3``) or
    literal device names (of another driver, or missing from every ResourceSlice)."""

    name: Annotated[str, Field(min_length=1)]
    namespace: str | None = None  # default: the pod's
    driver: str = "gpu.nvidia.com"
    pool: str | None = None  # default: the node's name (as NVIDIA's driver names its pool)
    devices: Annotated[list[str], Field(min_length=1)]


class HamiDevice(_Model):
    """What HAMi's scheduler gave the container of one GPU (its allocation annotation)."""

    gpu: Annotated[str, Field(pattern=r"^gpu\d+$")]
    memory_mib: Annotated[int, Field(ge=0)]
    cores: Annotated[int, Field(ge=0, le=100)] = 0  # 0: no core limit


class ContainerSpec(_Model):
    name: Annotated[str, Field(min_length=1)]
    id: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    runtime: Runtime = "containerd"
    cgroup: CgroupLayout = "v2-systemd"
    devices: list[DeviceClaim] = []
    claims: list[ClaimUse] = []  # DRA
    hami: list[HamiDevice] = []  # HAMi: served as HAMi's annotation and virtual device ids
    pids: list[Annotated[int, Field(ge=1)]] = []


class PodSpec(_Model):
    namespace: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    uid: str | None = None
    qos: Literal["guaranteed", "burstable", "besteffort"] = "burstable"
    labels: dict[str, str] = {}
    containers: list[ContainerSpec]
    started_at: float | None = None
    ended_at: float | None = None
    # Succeeded / Failed: the pod finished, yet its kubelet still lists its devices (kubelets
    # before the fix of kubernetes#119423 do, until the pod is deleted)
    phase: Literal["Running", "Succeeded", "Failed"] = "Running"

    def alive(self, t: float) -> bool:
        start = self.started_at if self.started_at is not None else float("-inf")
        end = self.ended_at if self.ended_at is not None else float("inf")
        return start <= t < end

    def pod_uid(self) -> str:
        return self.uid or str(
            uuid.uuid5(uuid.NAMESPACE_URL, f"gpu-finops-sim/pod/{self.namespace}/{self.name}")
        )


def container_id(pod: PodSpec, container: ContainerSpec) -> str:
    if container.id:
        return container.id
    seed = f"{pod.namespace}/{pod.name}/{container.name}".encode()
    return hashlib.sha256(seed).hexdigest()


def resolve_device_id(ref: str, gpu_uuids: list[str], mig_uuids: dict[tuple[int, int], str]) -> str:
    """A spec reference (gpu0, gpu0/gi3, gpu0::2) as the id the device plugin would report;
    anything else is passed through as written."""
    m = _REF.match(ref)
    if m is None:
        return ref
    index, gi, replica = int(m.group(1)), m.group(2), m.group(3)
    if index >= len(gpu_uuids):
        raise ValueError(f"{ref}: there is no GPU {index}")
    if gi is None:
        base = gpu_uuids[index]
    else:
        found = mig_uuids.get((index, int(gi)))
        if found is None:
            raise ValueError(f"{ref}: GPU {index} has no MIG instance with GI id {gi}")
        base = found
    return base if replica is None else f"{base}::{replica}"


def referenced_gpu(ref: str) -> int | None:
    """The GPU index a spec reference points at (``gpu1::2`` -> 1), None for literal ids."""
    m = _REF.match(ref)
    return int(m.group(1)) if m else None


def dra_device_name(ref: str) -> str:
    """A spec reference as the simulated DRA driver's device name (``gpu0`` -> ``gpu-0``,
    ``gpu0/gi3`` -> ``gpu-0-mig-3``); anything else as written."""
    m = _REF.match(ref)
    if m is None or m.group(3) is not None:
        return ref
    index, gi = int(m.group(1)), m.group(2)
    return f"gpu-{index}" if gi is None else f"gpu-{index}-mig-{int(gi)}"


def hami_annotation(pod: PodSpec, gpu_uuids: list[str]) -> str:
    """HAMi's ``hami.io/vgpu-devices-allocated`` for the pod: ``UUID,NVIDIA,MiB,cores:`` per
    device, ``;`` after each container (Project-HAMi/HAMi pkg/device/devices.go)."""
    out = []
    for c in pod.containers:
        devices = "".join(
            f"{gpu_uuids[int(d.gpu[3:])]},NVIDIA,{d.memory_mib},{d.cores}:" for d in c.hami
        )
        out.append(devices + ";")
    return "".join(out)
