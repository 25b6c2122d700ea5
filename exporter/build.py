"""Build a running exporter from its :class:`~exporter.flags.Settings`.

The parts: the NVML library (the real one, or a simulated node's fake NVML from a fleet spec,
with its kubelet pod-resources server and /proc tree), self-metrics, the kubelet client, the
pod directory (and its watch on the Kubernetes API), the /proc owner lookup, and the
collection loop over all of them. ``gpu-exporter`` (:mod:`exporter.cli`) and ``make demo``
(:mod:`demo`) both build through :func:`build`.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.collection import Exporter
from exporter.flags import Settings, UsageError
from exporter.nvml.boundary import Nvml
from exporter.pods.assignments import PodResourcesAssignments
from exporter.pods.device_ids import DEFAULT_RESOURCES
from exporter.pods.directory import PodDirectory
from exporter.pods.fractional import parse_profiles
from exporter.pods.kubelet.client import PodResourcesClient
from exporter.pods.proc_owner import ProcOwner
from exporter.pods.slice_watch import SliceWatcher
from exporter.pods.slices import SliceDirectory
from exporter.pods.watch import PodWatcher
from exporter.render.label_text import pod_label_renderer
from exporter.selfmetrics import SelfMetrics
from exporter.simulate.fake_nvml import FakeNvml
from exporter.simulate.node import SimulatedNode
from exporter.simulate.spec import FleetSpec, SpecError, load
from kube.client import core_api, resource_api


@dataclass
class Built:
    """A built exporter and what was started for it; :meth:`stop` stops those."""

    exporter: Exporter
    directory: PodDirectory
    slices: SliceDirectory = field(default_factory=SliceDirectory)
    spec: FleetSpec | None = None  # simulate mode: the fleet spec
    node: SimulatedNode | None = None  # simulate mode: its kubelet server and /proc tree
    watcher: PodWatcher | None = None  # the pod watch on the Kubernetes API, where enabled
    slice_watcher: SliceWatcher | None = None  # the ResourceSlice watch, where enabled
    stops: list[Callable[[], None]] = field(default_factory=list)

    def stop(self) -> None:
        for stop in self.stops:
            stop()


def build(
    settings: Settings,
    *,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
) -> Built:
    """Everything ``gpu-exporter`` runs, built from its settings; the collection loop is not
    started yet. A broken spec or kubeconfig raises :class:`UsageError`."""
    try:
        profiles = parse_profiles(settings.vgpu_profiles)
    except ValueError as exc:  # (before anything is started)
        raise UsageError(f"--pod-resources.vgpu-profiles: {exc}") from None
    library: Any = None
    mode = "nvml"
    socket_path, procfs = settings.pod_resources_socket, settings.procfs
    directory = PodDirectory()
    slices = SliceDirectory()
    spec: FleetSpec | None = None
    node: SimulatedNode | None = None
    stops: list[Callable[[], None]] = []
    if settings.simulate is not None:
        spec, node, library = _simulated(settings.simulate, clock)
        mode = "simulate"
        socket_path, procfs = node.socket_path, str(node.proc_root)
        directory = node.directory
        slices = node.slices
        stops.append(node.stop)
        profiles = {**spec.vgpu_profiles, **profiles}
    hostname = settings.hostname or (spec.hostname if spec is not None else None)
    hostname = hostname or os.environ.get("NODE_NAME") or socket.gethostname()

    nvml = Nvml(library)
    stats = SelfMetrics(nvml.bindings_version(), mode)
    assignments = PodResourcesAssignments(
        PodResourcesClient(socket_path, settings.pod_resources_timeout),
        stats.count_error,
        DEFAULT_RESOURCES + settings.resource_names,
        slices=slices,
        pods=directory,
        profiles=profiles,
    )
    watcher, slice_watcher = _watch(settings, hostname, directory, slices, stats, stops)
    pod_labels = pod_label_renderer(directory, settings.pod_labels) if settings.pod_labels else None
    exporter = Exporter(
        nvml,
        hostname,
        settings.collectors,
        settings.collect_interval,
        mode=mode,
        clock=clock,
        monotonic=monotonic,
        stats=stats,
        assignments=assignments if "processes" in settings.collectors else None,
        owner=ProcOwner(directory, procfs, stats.count_error, monotonic=monotonic),
        pod_labels=pod_labels,
        finished_pod=directory.finished,
        hostname_label=settings.hostname_label,
        pod_uid=lambda namespace, name: getattr(directory.by_name(namespace, name), "uid", None),
    )
    return Built(exporter, directory, slices, spec, node, watcher, slice_watcher, stops)


def _simulated(path: Path, clock: Callable[[], float]) -> tuple[FleetSpec, SimulatedNode, FakeNvml]:
    """Simulate mode: the fleet spec, its node (kubelet server and /proc tree, started) and
    its fake NVML. A broken spec raises :class:`UsageError`."""
    try:
        spec = load(path)
    except SpecError as exc:
        raise UsageError(f"--simulate {exc}") from None
    library = FakeNvml(spec, now=clock)
    return spec, SimulatedNode(spec, library), library


def _watch(
    settings: Settings,
    hostname: str,
    directory: PodDirectory,
    slices: SliceDirectory,
    stats: SelfMetrics,
    stops: list[Callable[[], None]],
) -> tuple[PodWatcher | None, SliceWatcher | None]:
    """The watches on the Kubernetes API (this node's pods and its ResourceSlices), started,
    where the API is configured or the exporter runs in a cluster (never in simulate mode);
    (None, None) elsewhere. A broken kubeconfig raises :class:`UsageError`."""
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if settings.simulate is not None or not (
        settings.kube_api_url or settings.kubeconfig or in_cluster
    ):
        return None, None
    node_name = settings.kube_node_name or os.environ.get("NODE_NAME") or hostname
    try:
        api = core_api(settings.kubeconfig, settings.kube_api_url)
    except Exception as exc:  # a broken kubeconfig is a start-up error
        raise UsageError(f"--kubernetes.kubeconfig: {exc}") from None
    watcher = PodWatcher(directory, node_name, api, stats.count_error)
    watcher.start()
    stops.append(watcher.stop)
    slice_watcher = SliceWatcher(slices, node_name, resource_api(api), stats.count_error)
    slice_watcher.start()
    stops.append(slice_watcher.stop)
    return watcher, slice_watcher
