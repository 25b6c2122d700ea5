"""Pods of this node from the Kubernetes API: the official client against a loopback server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from exporter.catalogue import COLLECTORS
from exporter.collection import Exporter
from exporter.nvml.boundary import Nvml
from exporter.pods.assignments import PodResourcesAssignments
from exporter.pods.directory import PodDirectory
from exporter.pods.kubelet.client import PodResourcesClient
from exporter.pods.proc_owner import ProcOwner
from exporter.pods.watch import PodWatcher
from exporter.render.label_text import pod_label_renderer
from exporter.selfmetrics import SelfMetrics
from exporter.simulate.fake_nvml import FakeNvml
from exporter.simulate.node import SimulatedNode
from exporter.simulate.pods import container_id
from exporter.simulate.spec import FleetSpec, parse
from kube.client import core_api
from tests.conftest import ManualClock
from tests.exporter.helpers import Rig, serve, value
from tests.kubeapi import KubeApi, pod_json, wait_until

CID = {"a": "a1" * 32, "b": "b2" * 32, "c": "c3" * 32}


@contextmanager
def exporting(
    spec: FleetSpec, tmp: Path, directory: PodDirectory, **kwargs: Any
) -> Iterator[tuple[Rig, PodResourcesClient]]:
    """The exporter over a simulated node (its real kubelet gRPC server and /proc tree) with the
    pod directory the watch on the API fills (not the spec's), served over HTTP."""
    clock = ManualClock()
    fake = FakeNvml(spec, now=clock)
    sim = SimulatedNode(spec, fake, tmp)
    client = PodResourcesClient(sim.socket_path)
    try:
        nvml = Nvml(fake)
        stats = SelfMetrics(nvml.bindings_version(), "test")
        exporter = Exporter(
            nvml,
            "n1",
            COLLECTORS,
            5.0,
            clock=clock,
            monotonic=clock,
            stats=stats,
            assignments=PodResourcesAssignments(client, stats.count_error),
            owner=ProcOwner(directory, sim.proc_root),
            **kwargs,
        )
        yield serve(clock, fake, exporter), client
    finally:
        client.close()
        sim.stop()


@pytest.fixture
def api() -> Iterator[KubeApi]:
    server = KubeApi()
    yield server
    server.stop()


class Errors:
    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def __call__(self, source: str, kind: str) -> None:
        self.counts[(source, kind)] = self.counts.get((source, kind), 0) + 1


@pytest.fixture
def watch(api: KubeApi) -> Iterator[Callable[..., tuple[PodDirectory, PodWatcher, Errors]]]:
    started: list[PodWatcher] = []

    def start(node: str = "n1") -> tuple[PodDirectory, PodWatcher, Errors]:
        directory, errors = PodDirectory(), Errors()
        w = PodWatcher(directory, node, core_api(host=api.url), errors, retry_delay=0.05)
        w.start()
        started.append(w)
        assert w.synced.wait(10)
        return directory, w, errors

    yield start
    for w in started:
        w.stop()


def test_lists_the_nodes_pods_then_follows_the_watch(api: KubeApi, watch: Any) -> None:
    api.put(pod_json("ml", "a", "uid-a", "n1", {"team": "nlp"}, {"main": CID["a"]}))
    api.put(pod_json("ml", "other-node", "uid-x", "n2", {}, {"main": CID["c"]}))
    directory, _, _ = watch("n1")
    assert len(directory) == 1  # only this node's pods, by field selector
    assert directory.get("uid-a") is not None
    assert directory.get("uid-a").containers == {CID["a"]: "main"}  # type: ignore[union-attr]
    assert any(r.get("fieldSelector") == ["spec.nodeName=n1"] for r in api.requests)
    wait_until(lambda: api.watches() == 1)

    api.put(pod_json("ml", "a", "uid-a", "n1", {"team": "vision"}, {"main": CID["a"]}))
    wait_until(lambda: directory.get("uid-a").labels == {"team": "vision"})  # type: ignore[union-attr]
    api.put(pod_json("ml", "b", "uid-b", "n1", {"team": "search"}, {"w": CID["b"]}))
    wait_until(lambda: directory.get("uid-b") is not None)
    api.delete("uid-a")
    wait_until(lambda: directory.get("uid-a") is None)
    assert len(directory) == 1


def test_410_gone_recovers_the_state(api: KubeApi, watch: Any) -> None:
    api.put(pod_json("ml", "a", "uid-a", "n1", {}, {"main": CID["a"]}))
    directory, _, _ = watch("n1")
    wait_until(lambda: api.watches() == 1)
    api.expire_watches()
    # a pod created while the watch is broken must still be found
    api.put(pod_json("ml", "b", "uid-b", "n1", {}, {"main": CID["b"]}))
    wait_until(lambda: directory.get("uid-b") is not None)
    assert directory.get("uid-a") is not None


def test_api_down_keeps_the_last_known_pods_and_counts(api: KubeApi, watch: Any) -> None:
    api.put(pod_json("ml", "a", "uid-a", "n1", {"team": "nlp"}, {"main": CID["a"]}))
    directory, _, errors = watch("n1")
    wait_until(lambda: api.watches() == 1)
    api.stop()
    wait_until(lambda: sum(errors.counts.values()) >= 2)
    assert set(errors.counts) <= {("kubernetes", "watch"), ("kubernetes", "list")}
    assert directory.get("uid-a") is not None  # last known labels stay


def test_pod_labels_and_pid_mapping_come_from_the_api(
    api: KubeApi, watch: Any, tmp_path: Path
) -> None:
    """The exporter with a real kubelet socket, real /proc files and pods from the API."""
    raw = {
        "hostname": "n1",
        "gpus": [
            {
                "model": "NVIDIA H100 80GB HBM3",
                "memory_total_mib": 81559,
                "time_slicing_replicas": 2,
                "processes": [{"pid": 10, "sm_util": 40}, {"pid": 20, "sm_util": 5}],
            }
        ],
        "pods": [
            {
                "namespace": "ml",
                "name": "p1",
                "labels": {"team": "spec-only"},
                "containers": [
                    {
                        "name": "main",
                        "pids": [10],
                        "devices": [{"resource": "nvidia.com/gpu", "ids": ["gpu0::0"]}],
                    }
                ],
            },
            {
                "namespace": "ml",
                "name": "p2",
                "containers": [
                    {
                        "name": "main",
                        "pids": [20],
                        "devices": [{"resource": "nvidia.com/gpu", "ids": ["gpu0::1"]}],
                    }
                ],
            },
        ],
    }
    spec = parse(raw)
    for p, team in zip(spec.pods, ("nlp", 'has "quotes"\nand newline'), strict=True):
        api.put(
            pod_json(
                p.namespace,
                p.name,
                p.pod_uid(),
                "n1",
                {"team": team, "stage": "dev"},
                {c.name: container_id(p, c) for c in p.containers},
            )
        )
    directory, _, _ = watch("n1")
    labels = pod_label_renderer(directory, ("team", "stage", "project"))
    with exporting(spec, tmp_path, directory, pod_labels=labels) as (r, _):
        r.collect()
        r.clock.advance(5)
        m = r.collect()
    share = {s.labels["pod"]: s.labels for s in m["gpu_allocation_share"]}
    assert share["p1"]["label_team"] == "nlp"
    assert share["p2"]["label_team"] == 'has "quotes"\nand newline'
    assert share["p1"]["label_project"] == ""  # a key the pod lacks: empty, same label set
    sm = {s.labels["pod"]: s.value for s in m["gpu_container_sm_utilization_ratio"]}
    assert sm == pytest.approx({"p1": 0.40, "p2": 0.05})
    assert value(m, "gpu_unattributed_processes", gpu="0") == 0


def finished(pod: dict[str, Any], phase: str) -> dict[str, Any]:
    """The pod as the API serves it once it has finished: phase and terminated containers."""
    pod["status"]["phase"] = phase
    for c in pod["status"]["containerStatuses"]:
        exit_code = 0 if phase == "Succeeded" else 1
        reason = "Completed" if phase == "Succeeded" else "Error"
        c["state"] = {"terminated": {"exitCode": exit_code, "reason": reason}}
        c["ready"] = False
    return pod


def test_devices_of_finished_pods_are_never_attributed(
    api: KubeApi, watch: Any, tmp_path: Path
) -> None:
    """A kubelet before the fix of kubernetes#119423 lists the GPU of a Succeeded pod next to
    the running pod it was given to since, and the GPU of a Failed pod: the real gRPC server
    answers so, the pod list from the API says which pods finished."""
    done, failed, running, new = (("ml", n) for n in ("done", "crashed", "serving", "next"))
    spec = parse(
        {
            "hostname": "n1",
            "gpus": [{"count": 3, "model": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559}],
            "pods": [
                {"namespace": ns, "name": name, "containers": [{"name": "main", "devices": ids}]}
                for (ns, name), ids in (
                    (done, [{"ids": ["gpu0"]}]),
                    (new, [{"ids": ["gpu0"]}]),  # the device manager gave GPU 0 to a new pod
                    (failed, [{"ids": ["gpu1"]}]),
                    (running, [{"ids": ["gpu2"]}]),
                )
            ],
        }
    )
    for p, phase in zip(spec.pods, ("Succeeded", "Running", "Failed", "Running"), strict=True):
        raw = pod_json(p.namespace, p.name, p.pod_uid(), "n1", {}, {"main": "d" * 64})
        api.put(finished(raw, phase) if phase != "Running" else raw)
    directory, _, _ = watch("n1")
    # the API's pod list says which pods finished, not the spec
    with exporting(spec, tmp_path, directory, finished_pod=directory.finished) as (r, client):
        m = r.collect()
        listed = {(e.pod, e.device_ids) for e in client.containers()}  # type: ignore[union-attr]
    assert {pod for pod, _ in listed} == {"done", "next", "crashed", "serving"}
    shares = {(s.labels["gpu"], s.labels["pod"]): s.value for s in m["gpu_allocation_share"]}
    assert shares == {("0", "next"): 1.0, ("2", "serving"): 1.0}
    # GPU 0 has one holder again, so its DCGM series name it; GPU 1 nobody
    temp = {s.labels["gpu"]: s.labels.get("pod") for s in m["DCGM_FI_DEV_GPU_TEMP"]}
    assert temp == {"0": "next", "1": None, "2": "serving"}
    assert value(m, "gpu_exporter_finished_pod_device_ids") == 2
