"""PID -> container from /proc/<pid>/cgroup, in the forms real kubelets and runtimes write."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.pods.claims import Holder
from exporter.pods.directory import PodDirectory, PodInfo
from exporter.pods.proc_owner import CgroupOwner, ProcOwner, parse_cgroup

UID = "0f5c8a2e-1b7d-4c7a-9a51-3e2f6d8b9c10"
UID_ = UID.replace("-", "_")
CID = "abababababababababababababababababababababababababababababababab"


@pytest.mark.parametrize(
    "text",
    [
        # cgroup v2, systemd driver, containerd, burstable QoS
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
        f"cri-containerd-{CID}.scope\n",
        # cgroup v2, systemd driver, guaranteed QoS (no QoS level), CRI-O
        f"0::/kubepods.slice/kubepods-pod{UID_}.slice/crio-{CID}.scope\n",
        # cgroup v1, systemd driver, several hierarchies, docker
        f"12:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice"
        f"/docker-{CID}.scope\n11:cpu,cpuacct:/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{UID_}.slice/docker-{CID}.scope\n1:name=systemd:/kubepods.slice"
        f"/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/docker-{CID}.scope\n",
        # cgroup v1, cgroupfs driver
        f"11:memory:/kubepods/burstable/pod{UID}/{CID}\n10:pids:/kubepods/burstable/pod{UID}/{CID}\n",
        # cgroup v2, cgroupfs driver, guaranteed
        f"0::/kubepods/pod{UID}/{CID}\n",
        # hybrid: an empty unified line and v1 lines
        f"0::/\n5:devices:/kubepods/besteffort/pod{UID}/{CID}\n",
        # a process in a sub-cgroup of its container (a container managing its own cgroups)
        f"0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope/init.scope\n",
        # cgroup v2, cgroupfs driver, burstable, containerd (the container's cgroup is its id)
        f"0::/kubepods/burstable/pod{UID}/{CID}\n",
        # cgroup v2, cgroupfs driver, CRI-O (internal/config/cgmgr: crio-<id> under cgroupfs)
        f"0::/kubepods/besteffort/pod{UID}/crio-{CID}\n",
        # read from a private cgroup namespace (the exporter's own, cgroup v2's default):
        # paths are relative to the exporter's cgroup, systemd driver ...
        f"0::/../../kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
        f"0::/../../../kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
        f"cri-containerd-{CID}.scope\n",
        # ... and cgroupfs driver, where no "kubepods" is left in the path
        f"0::/../../../burstable/pod{UID}/{CID}\n",
        f"0::/../pod{UID}/crio-{CID}\n",
    ],
)
def test_pod_and_container_from_every_layout(text: str) -> None:
    assert parse_cgroup(text) == CgroupOwner(UID, CID)


@pytest.mark.parametrize(
    "text",
    [
        "0::/system.slice/nvidia-persistenced.service\n",  # a host daemon
        "0::/user.slice/user-1000.slice/session-3.scope\n",  # a login session
        f"0::/docker/{CID}\n",  # a docker container outside Kubernetes
        f"0::/kubepods.slice/kubepods-pod{UID_}.slice/crio-conmon-{CID}.scope\n",  # conmon
        f"0::/kubepods.slice/kubepods-pod{UID_}.slice\n",  # the pod's own slice, no container
        "0::/\n",  # the reader's own cgroup, seen from its private cgroup namespace
        "0::/../init.scope\n",  # a sibling outside any pod, from a private namespace
        "",
    ],
)
def test_no_pod_means_none(text: str) -> None:
    assert parse_cgroup(text) is None


def test_owner_through_the_pod_directory(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(f"0::/kubepods/pod{UID}/{CID}\n")
    (tmp_path / "43").mkdir()
    (tmp_path / "43" / "cgroup").write_text(f"0::/kubepods/pod{UID}/{'cd' * 32}\n")
    directory = PodDirectory([PodInfo(UID, "ml", "train-0", {}, {CID: "trainer"})])
    owner = ProcOwner(directory, tmp_path)
    assert owner(42) == Holder("ml", "train-0", "trainer")
    assert owner(43) is None  # a container the directory does not know
    assert owner(44) is None  # the process has exited
    directory.remove(UID)
    assert owner(42) is None  # the pod is gone


def test_cgroup_parse_is_cached_for_a_while(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    cgroup = tmp_path / "42" / "cgroup"
    cgroup.write_text(f"0::/kubepods/pod{UID}/{CID}\n")
    now = [0.0]
    owner = ProcOwner(PodDirectory(), tmp_path, cache_seconds=30, monotonic=lambda: now[0])
    assert owner.owner_of(42) == CgroupOwner(UID, CID)
    cgroup.write_text("0::/system.slice/other.service\n")  # PID 42 reused by a host process
    now[0] = 29.0
    assert owner.owner_of(42) == CgroupOwner(UID, CID)  # not read again within the lifetime
    now[0] = 31.0
    assert owner.owner_of(42) is None  # read again after it


def test_a_missing_proc_is_said_at_start_up_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    errors: list[tuple[str, str]] = []
    owner = ProcOwner(PodDirectory(), tmp_path / "no-such-proc", lambda s, k: errors.append((s, k)))
    assert errors == [("proc", "missing")]  # at start-up, before any process is looked up
    assert "is not a directory (--path.procfs)" in caplog.text
    assert owner(1234) is None
    assert errors == [("proc", "missing")] * 2  # and for every process it cannot look up


def test_a_foreign_proc_is_said_once_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The container's own /proc (no hostPID): the host PIDs NVML reports are not in it."""
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "cgroup").write_text("0::/\n")  # the exporter itself, PID 1 in its pod
    errors: list[tuple[str, str]] = []
    owner = ProcOwner(PodDirectory(), tmp_path, lambda s, k: errors.append((s, k)))
    assert errors == []
    for pid in (48211, 48377, 51002, 51003):
        assert owner(pid) is None
    assert errors == [("proc", "not_found")] * 4
    warnings = [r.getMessage() for r in caplog.records if "not the host's" in r.getMessage()]
    assert len(warnings) == 1 and str(tmp_path) in warnings[0]
    assert "hostPID" in warnings[0]
