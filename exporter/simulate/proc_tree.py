"""A /proc tree for simulate mode: ``/proc/<pid>/cgroup`` for every PID of the spec's pods,
in the exact forms kubelets write them (cgroup v1 and v2; systemd and cgroupfs drivers;
containerd, CRI-O and docker ids), so the exporter's real cgroup parser runs over it."""

from __future__ import annotations

from pathlib import Path

from exporter.simulate.pods import ContainerSpec, PodSpec, container_id

_V1_CONTROLLERS = ("memory", "cpu,cpuacct", "pids", "devices")
_SCOPE_PREFIX = {"containerd": "cri-containerd-", "crio": "crio-", "docker": "docker-"}


def cgroup_path(pod: PodSpec, container: ContainerSpec) -> str:
    uid = pod.pod_uid()
    cid = container_id(pod, container)
    systemd = container.cgroup.endswith("systemd")
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
