"""Everything around the fake NVML that makes a simulated node look like a Kubernetes node:
a real pod-resources gRPC server on a unix socket answering from the spec, the pods' /proc
cgroup files, and the pod directory (what the Kubernetes API would say about them)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from exporter.pods.directory import PodDirectory, PodInfo
from exporter.pods.fractional import parse_hami
from exporter.pods.slices import SliceDevice, SliceDirectory
from exporter.simulate.fake_nvml import FakeNvml
from exporter.simulate.kubelet import KubeletServicer, serve, spec_answer
from exporter.simulate.pods import container_id, hami_annotation
from exporter.simulate.proc_tree import write_proc_tree
from exporter.simulate.spec import FleetSpec, SimGpu


class SimulatedNode:
    def __init__(self, spec: FleetSpec, fake: FakeNvml, workdir: Path | None = None) -> None:
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="gpu-exporter-sim-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc_root = self.workdir / "proc"
        pod_pids = {pid for pod in spec.pods for c in pod.containers for pid in c.pids}
        host_pids = tuple(sorted({p.spec.pid for g in fake.gpus for p in g.processes} - pod_pids))
        self.proc_root.mkdir(exist_ok=True)  # a /proc, if an empty one, even without pods
        write_proc_tree(self.proc_root, spec.pods, host_pids)
        self.directory = PodDirectory(
            PodInfo(
                pod.pod_uid(),
                pod.namespace,
                pod.name,
                dict(pod.labels),
                {container_id(pod, c): c.name for c in pod.containers},
                pod.phase,
                parse_hami(
                    hami_annotation(pod, [g.uuid for g in fake.gpus]),
                    [c.name for c in pod.containers],
                )
                if any(c.hami for c in pod.containers)
                else {},
            )
            for pod in spec.pods
        )
        self.slices = SliceDirectory(
            [(f"{spec.hostname}-gpu.nvidia.com", slice_of(fake.gpus, spec.hostname))]
        )
        # unix socket paths are limited to ~107 bytes: keep it short, whatever the workdir
        self._socket_dir = Path(tempfile.mkdtemp(prefix="kl-"))
        self.socket_path = str(self._socket_dir / "kubelet.sock")
        self.servicer = KubeletServicer(
            lambda: spec_answer(spec.pods, fake.gpus, fake.sim_time, spec.hostname)
        )
        self._server: Any = serve(self.socket_path, self.servicer)

    def stop(self) -> None:
        self._server.stop(0)
        shutil.rmtree(self._socket_dir, ignore_errors=True)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def slice_of(gpus: list[SimGpu], node: str) -> list[SliceDevice]:
    """The ResourceSlice NVIDIA's DRA driver would publish for these GPUs (pool: the node):
    ``gpu-<i>`` (type gpu, uuid) and, for each MIG instance, ``gpu-<i>-mig-<gi>`` (type mig,
    uuid, parentUUID, profile)."""
    out = []
    for g in gpus:
        out.append(SliceDevice("gpu.nvidia.com", node, f"gpu-{g.index}", "gpu", g.uuid))
        for m in g.migs:
            out.append(
                SliceDevice(
                    "gpu.nvidia.com",
                    node,
                    f"gpu-{g.index}-mig-{m.gi_id}",
                    "mig",
                    m.uuid,
                    g.uuid,
                    m.profile_name,
                )
            )
    return out
