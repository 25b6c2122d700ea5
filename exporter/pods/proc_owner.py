"""PID -> container, through ``/proc/<pid>/cgroup`` and the pod directory.

The cgroup path names the pod's UID and the container's id in every layout kubelets use
(kubelet pkg/kubelet/cm/cgroup_manager_linux.go; containerd's CRI names a container's scope
``cri-containerd-<id>.scope`` under systemd and ``<id>`` under cgroupfs; CRI-O
internal/config/cgmgr: ``crio-<id>.scope`` under systemd, ``crio-<id>`` under cgroupfs):

    v2, systemd driver:   0::/kubepods.slice/kubepods-burstable.slice/
                          kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope
    v2, cgroupfs driver:  0::/kubepods/burstable/pod<uid>/<id>       (CRI-O: .../crio-<id>)
    v1, systemd driver:   12:memory:/kubepods.slice/.../crio-<id>.scope   (or docker-<id>.scope)
    v1, cgroupfs driver:  11:memory:/kubepods/burstable/pod<uid>/<id>
    Guaranteed pods have no QoS level in the path.

The path is relative to the *reading* process's cgroup namespace (cgroup_namespaces(7)). With
cgroup v2 containerd and CRI-O give every container, the exporter's included, a private cgroup
namespace, so the paths it reads start at its own cgroup: ``0::/../../kubepods-besteffort-
pod<uid>.slice/cri-containerd-<id>.scope``, or under cgroupfs ``0::/../../../burstable/
pod<uid>/<id>`` (no ``kubepods`` left in it). The pod UID and container id are still there and
are used. ``0::/`` is a process in the exporter's own cgroup: it names no pod.

The pod directory then gives namespace, pod name and container name. A PID whose cgroup names
no pod, or a pod or container the directory does not know, maps to nobody: it is counted by the
caller, never guessed. A /proc that is missing, or that does not show the processes NVML
reports (no ``hostPID``, a wrong ``--path.procfs``), is said once and counted
(``gpu_exporter_errors_total{source="proc"}``). The /proc root is injectable for tests and
simulate mode.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from exporter.pods.claims import Holder
from exporter.pods.directory import PodDirectory

log = logging.getLogger(__name__)

NOT_FOUND_BEFORE_WARNING = 3  # PIDs missing from /proc, none found, before it is called foreign

_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)
_CONTAINER = re.compile(
    r"^(?:cri-containerd-|crio-|docker-|containerd-)?([0-9a-f]{64})(?:\.scope)?$"
)


@dataclass(frozen=True, slots=True)
class CgroupOwner:
    pod_uid: str
    container_id: str


def parse_cgroup(text: str) -> CgroupOwner | None:
    """The pod and container a process belongs to, from its /proc/<pid>/cgroup."""
    unified: list[str] = []
    legacy: list[str] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            (unified if parts[0] == "0" else legacy).append(parts[2])
    paths = unified + legacy  # the v2 line first, then any v1 hierarchy
    for path in paths:
        pod = _POD_UID.search(path)
        if pod is None:
            continue
        # the container's own cgroup is the segment after the pod's; a process may sit in a
        # sub-cgroup of it (e.g. .../cri-containerd-<id>.scope/init.scope)
        for segment in path[pod.end() :].split("/"):
            container = _CONTAINER.match(segment)
            if container:
                return CgroupOwner(pod.group(1).replace("_", "-"), container.group(1))
    return None


class ProcOwner:
    """Callable PID -> :class:`Holder` (or None), for :func:`exporter.pods.shares.attribute`."""

    def __init__(
        self,
        directory: PodDirectory,
        proc_root: str | Path = "/proc",
        on_error: Callable[[str, str], None] | None = None,
        cache_seconds: float = 30.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._directory = directory
        self._root = str(proc_root)
        self._on_error = on_error
        # A process never changes cgroup, so its parse is kept for a while: 1,000 GPU processes
        # would otherwise mean 1,000 file reads per collection. The short lifetime bounds the
        # damage of a PID reused by another process (rare: Linux cycles through pid_max).
        self._cache: dict[int, tuple[float, CgroupOwner | None]] = {}
        self._cache_seconds = cache_seconds
        self._monotonic = monotonic
        self._found = 0
        self._not_found = 0
        self.missing = not os.path.isdir(self._root)
        if self.missing:
            log.warning(
                "%s is not a directory (--path.procfs): GPU processes cannot be mapped to "
                "containers, every one is counted as unattributed",
                self._root,
            )
            self._count("missing")

    def _count(self, kind: str) -> None:
        if self._on_error is not None:
            self._on_error("proc", kind)

    def owner_of(self, pid: int) -> CgroupOwner | None:
        now = self._monotonic()
        hit = self._cache.get(pid)
        if hit is not None and hit[0] > now:
            return hit[1]
        if self.missing:
            self._count("missing")
            return None
        try:
            with open(f"{self._root}/{pid}/cgroup") as f:
                owner = parse_cgroup(f.read())
        except FileNotFoundError:  # exited since NVML listed it, or /proc is not the host's
            self._not_found += 1
            self._count("not_found")
            if self._found == 0 and self._not_found == NOT_FOUND_BEFORE_WARNING:
                log.warning(
                    "none of the GPU processes NVML reports is in %s: it is not the host's "
                    "/proc (the DaemonSet needs hostPID, or the host's /proc mounted and "
                    "--path.procfs pointing at it)",
                    self._root,
                )
            return None
        except OSError:
            self._count("read")
            return None
        self._found += 1
        if len(self._cache) > 65536:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
        self._cache[pid] = (now + self._cache_seconds, owner)
        return owner

    def __call__(self, pid: int) -> Holder | None:
        owner = self.owner_of(pid)
        if owner is None:
            return None
        pod = self._directory.get(owner.pod_uid)
        if pod is None:
            return None
        container = pod.containers.get(owner.container_id)
        if container is None:
            return None
        return Holder(pod.namespace, pod.name, container)
