"""A /proc tree for simulate mode: ``/proc/<pid>/cgroup`` for every PID of the spec's pods,
in the exact forms kubelets write them (cgroup v1 and v2; systemd and cgroupfs drivers;
containerd, CRI-O and docker ids; and as seen from the exporter's own private cgroup
namespace, where paths are relative to its cgroup), so the exporter's real cgroup parser runs
over it."""

from __future__ import annotations

import posixpath
from pathlib import Path

from exporter.simulate.pods import ContainerSpec, PodSpec, container_id

_V1_CONTROLLERS = ("memory", "cpu,cpuacct", "pids", "devices")
# Where the exporter's own container sits (a best-effort pod), for the "-cgroupns" layouts:
# /proc/<pid>/cgroup paths are relative to the reader's cgroup namespace root
# (cgroup_namespaces(7)).
_EXPORTER_CGROUP = {
    "systemd": "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
    "5e1f0c6a_2b3d_4e5f_8a9b_0c1d2e3f4a5b.slice/cri-containerd-" + "e" * 64 + ".scope",
    "cgroupfs": "/kubepods/besteffort/pod5e1f0c6a-2b3d-4e5f-8a9b-0c1d2e3f4a5b/" + "e" * 64,
}
_SCOPE_PREFIX = {"containerd": "cri-containerd-", "crio": "crio-", "docker": "docker-"}


def cgroup_path(pod: PodSpec, container: ContainerSpec) -> str:
    uid = pod.pod_uid()
    cid = container_id(pod, container)
    systemd = "systemd" in container.cgroup
    qos = "" if pod.qos == "guaranteed" else pod.qos
    if systemd:
        slice_uid = uid.replace("-", "_")
        parts = ["/kubepods.slice"]
        if qos:
            parts.append(f"kubepods-{qos}.slice")
            parts.append(f"kubepods-{qos}-pod{slice_uid}.slice")
        else:
            parts.append(f"kubepods-pod{slice_uid}.slice")
        parts.append(f"{_SCOPE_PREFIX[container.runtime]}{cid}.scope")
        return "/".join(parts)
    return "/".join(["/kubepods", *([qos] if qos else []), f"pod{uid}", cid])


def cgroup_file(pod: PodSpec, container: ContainerSpec) -> str:
    path = cgroup_path(pod, container)
    if container.cgroup.endswith("-cgroupns"):
        own = _EXPORTER_CGROUP["systemd" if "systemd" in container.cgroup else "cgroupfs"]
        path = "/" + posixpath.relpath(path, own)
    if container.cgroup.startswith("v2"):
        return f"0::{path}\n"
    lines = [f"{12 - i}:{ctrl}:{path}" for i, ctrl in enumerate(_V1_CONTROLLERS)]
    lines.append(f"1:name=systemd:{path}")
    return "\n".join(lines) + "\n"


def write_proc_tree(root: Path, pods: list[PodSpec], host_pids: tuple[int, ...] = ()) -> None:
    """Write the cgroup files; ``host_pids`` get a host (non-pod) cgroup."""
    for pod in pods:
        for container in pod.containers:
            for pid in container.pids:
                d = root / str(pid)
                d.mkdir(parents=True, exist_ok=True)
                (d / "cgroup").write_text(cgroup_file(pod, container))
    for pid in host_pids:
        d = root / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup").write_text("0::/system.slice/nv-hostengine.service\n")
