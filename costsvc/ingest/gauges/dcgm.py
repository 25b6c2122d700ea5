"""One hour's facts from NVIDIA's dcgm-exporter and kube-state-metrics (``COSTSVC_SOURCE``
``dcgm-exporter``, or ``auto`` on an hour without our exporter's series): the inputs most GPU
clusters already run, priced with the same rules as our exporter's (docs/cost-model.md,
"dcgm-exporter + kube-state-metrics"). Every label and series name below is upstream's:

- dcgm-exporter 4.x (NVIDIA/dcgm-exporter ``internal/pkg/rendermetrics/render_metrics.go``):
  ``gpu``, ``UUID`` (the physical GPU's, also on a MIG instance's series), ``pci_bus_id``,
  ``device``, ``modelName``, ``GPU_I_PROFILE`` / ``GPU_I_ID`` on MIG instances, ``Hostname``
  (releases up to 4.5.3-4.8.2; ``hostname`` from NVIDIA/dcgm-exporter#655) — the value is the
  ``NODE_NAME`` environment variable, the Kubernetes node name under the GPU Operator
  (``internal/pkg/hostname/hostname.go``). With its Kubernetes mapping on
  (``internal/pkg/transformation/kubernetes.go``, ``const.go``): ``pod``, ``namespace``,
  ``container`` (and ``pod_uid``) on the series of a device a container holds (``pod_name``,
  ``pod_namespace``, ``container_name`` and ``uuid`` for ``UUID`` under
  ``--use-old-namespace``); with
  ``--kubernetes-virtual-gpus`` one copy of each series per sharing container with a ``vgpu``
  label (the replica), ``DCGM_FI_DEV_GPU_UTIL`` of that copy being the container's own
  utilisation from NVML's per-process data (``process_metrics.go``: ``isPerProcessMetric``);
  with DRA, ``dra_claim_name``, ``dra_claim_namespace``, ``dra_driver_name``,
  ``dra_pool_name``, ``dra_device_name`` (and ``dra_mig_profile``, ``dra_mig_device_uuid``).
  Without ``--kubernetes-virtual-gpus`` a time-sliced GPU's series name only one of its
  sharing containers (``toDeviceToPod`` keeps the last one it meets), so on a time-sliced node
  those labels are not used.
- kube-state-metrics v2 (kubernetes/kube-state-metrics ``internal/store/pod.go``,
  ``node.go``): ``kube_pod_container_resource_requests{namespace, pod, uid, container, node,
  resource, unit}`` with the resource name sanitised (``nvidia.com/gpu`` -> ``nvidia_com_gpu``,
  ``nvidia.com/mig-1g.10gb`` -> ``nvidia_com_mig_1g_10gb``, ``nvidia.com/gpu.shared`` ->
  ``nvidia_com_gpu_shared``), emitted whatever the pod's phase; ``kube_pod_status_phase{namespace,
  pod, uid, phase}`` (1 for the current phase); ``kube_node_status_capacity{node, resource,
  unit}``; ``kube_pod_labels`` / ``kube_namespace_labels`` (``label_<key>``).

What is derived, and how exact it is (next to what our exporter measures):

- **GPUs**: a GPU exists while any of ``DCGM_FI_DEV_FB_USED``, ``DCGM_FI_DEV_GPU_UTIL``,
  ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` reports it (between sightings, as with
  ``gpu_device_up``). dcgm-exporter has no "lost" signal: a GPU that falls off the bus is
  silent, so its time is idle but not counted as *unavailable* (our exporter: exact).
- **Whole GPUs and MIG instances**: held while dcgm-exporter's series of the device carry the
  container's ``pod``/``namespace``/``container`` labels (at scrape resolution, as ours).
  A device whose labels name several containers at once (a DRA claim shared by pods) is split
  equally among them. A MIG instance's slices and its GPU's come from the per-model table
  (costsvc/rules/mig.py: ``GPU_I_PROFILE`` on ``modelName``, e.g. ``1g.6gb`` on an A30 is
  1 of 4 compute and 1 of 4 memory slices): dcgm-exporter publishes no geometry. A model or
  profile the table does not know fails the hour naming it (retried), never guessed.
- **Where no labels say which device** (the mapping off, or a time-sliced node without
  ``--kubernetes-virtual-gpus``): a running container's request of ``q`` units of a resource
  on a node is a share ``q / capacity`` of each device of the node's pool for that resource
  (whole GPUs for ``nvidia_com_gpu`` and renamed shared names, the instances of one profile for
  ``nvidia_com_mig_<profile>``), capacity from ``kube_node_status_capacity`` — so replicas =
  capacity / devices. Our exporter knows the exact GPU and replica; this spreads the same
  GPU-hours over the pool. Held while the request series exists and ``kube_pod_status_phase
  {phase="Running"}`` is 1 (a pod that completes stops holding at its next scrape).
- **Utilisation**: ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, else ``DCGM_FI_DEV_GPU_UTIL`` / 100, of
  the device, at sample resolution while held. A time-sliced holder's own usage is known only
  from ``--kubernetes-virtual-gpus``' per-container ``DCGM_FI_DEV_GPU_UTIL``; otherwise its
  efficiency is unknown (our exporter: per-container SM utilisation); a pool holder without
  time-slicing gets the utilisation of each pool device it is spread over.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from costsvc.ingest.gauges.holding_hour import GaugeHour, grouped, measure, merged
from costsvc.ingest.gauges.power import add_energy
from costsvc.ingest.gauges.sampled import Piece, overlap, summed
from costsvc.ingest.hour import (
    MAX_GAP,
    PRESENCE_GAP,
    add_gpu,
    pod_and_namespace_labels,
    pod_controllers,
    us,
)
from costsvc.ingest.prom import Series
from costsvc.rules.attribution import Holding, HourFacts, with_geometry
from costsvc.rules.energy import ENERGY
from costsvc.rules.mig import (
    Geometry,
    UnknownMigGeometry,
    billed_share,
    known_geometry,
    profile_slices,
)

PRESENCE = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
REQUESTS = 'kube_pod_container_resource_requests{resource=~"nvidia_com_.+"}'
RUNNING = 'kube_pod_status_phase{phase="Running"}'
CAPACITY = 'kube_node_status_capacity{resource=~"nvidia_com_.+"}'
READS = (
    *((name, PRESENCE_GAP) for name in PRESENCE),
    (ENERGY, MAX_GAP),
    (REQUESTS, MAX_GAP),
    (RUNNING, MAX_GAP),
)
Unit = tuple[str, str, str]  # cluster, UUID, GPU_I_ID ("" for a whole GPU)
Who = tuple[str, str, str]  # namespace, pod, container


def mig_slices(profile: str, model: str) -> tuple[int, int, Geometry]:
    """(compute, memory) slices of the MIG instance of ``profile`` on a ``model`` GPU, and the
    GPU's geometry, from the per-model table; :class:`UnknownMigGeometry` naming what it
    does not know."""
    gpu = known_geometry(model, where=f" (MIG profile {profile or '?'})")
    found = profile_slices(model, profile)
    if found is None:
        raise UnknownMigGeometry(
            f"MIG profile {profile or '(none)'} of {model} is not in kube/mig_profiles.py: "
            "its slices are not guessed"
        )
    return found[0], found[1], gpu


def resource_of(profile: str) -> str:
    """kube-state-metrics' name of the MIG resource (mixed strategy) of a profile."""
    return "nvidia_com_mig_" + re.sub(r"[^a-zA-Z0-9_]", "_", profile)


@dataclass
class Device:
    """A device unit: a whole GPU or a MIG instance, and what it reported in the hour."""

    unit: Unit
    node: str
    model: str
    profile: str = ""
    share: Decimal = Decimal(1)  # of the physical GPU
    compute: int | None = None
    memory: int | None = None
    util: list[Piece] | None = None
    holders: dict[tuple[Who, str], list[Series]] = field(default_factory=dict)  # (who, vgpu)
    own_util: dict[Who, list[Series]] = field(default_factory=dict)  # per-container GPU_UTIL


def _uuid(lab: dict[str, str]) -> str:
    """The GPU's UUID: ``UUID``, or ``uuid`` under ``--use-old-namespace`` (gpu_collector.go)."""
    return lab.get("UUID") or lab.get("uuid", "")


def _holder(lab: dict[str, str]) -> Who | None:
    """The container dcgm-exporter's Kubernetes mapping names on a series: ``namespace``,
    ``pod``, ``container``, or under ``--use-old-namespace`` ``pod_namespace``, ``pod_name``,
    ``container_name`` (transformation/const.go); None when it names none."""
    if lab.get("pod"):
        return (lab.get("namespace", ""), lab["pod"], lab.get("container", ""))
    if lab.get("pod_name"):
        return (lab.get("pod_namespace", ""), lab["pod_name"], lab.get("container_name", ""))
    return None


def collect_dcgm(w: GaugeHour, facts: HourFacts) -> None:
    """The hour's GPUs, holdings and labels from dcgm-exporter + kube-state-metrics."""
    devices: dict[Unit, Device] = {}
    by_gpu: dict[tuple[str, str], list[Series]] = {}
    seen: dict[str, list[Series]] = {name: w.raw(name, PRESENCE_GAP) for name in PRESENCE}
    for name, found in seen.items():
        for s in found:
            lab = s.labels
            cluster, uuid, gi = w.cluster_of(lab), _uuid(lab), lab.get("GPU_I_ID", "")
            if not uuid:
                continue
            by_gpu.setdefault((cluster, uuid), []).append(s)
            node = lab.get("Hostname") or lab.get("hostname", "")
            d = devices.get((cluster, uuid, gi))
            if d is None:
                d = devices[(cluster, uuid, gi)] = Device((cluster, uuid, gi), node, "")
            d.model = lab.get("modelName", d.model)
            if gi:
                d.profile = lab.get("GPU_I_PROFILE", d.profile)
            who = _holder(lab)
            if who is not None:
                vgpu = lab.get("vgpu", "")
                d.holders.setdefault((who, vgpu), []).append(s)
                if vgpu and name == "DCGM_FI_DEV_GPU_UTIL":
                    d.own_util.setdefault(who, []).append(s)  # the container's own, per process
    for (cluster, uuid), group in sorted(by_gpu.items()):
        present = us(w.present(merged(group)))
        if present > 0:
            add_gpu(facts, cluster, uuid, group[-1].labels, present)
    mig_gpus = {(c, uuid) for c, uuid, gi in devices if gi}
    for unit in [u for u in devices if not u[2] and u[:2] in mig_gpus]:
        # a MIG GPU's own series: dcgm-exporter labels them with one of its instances' pods
        # (toDeviceToPod maps the parent UUID too); the instances are what is held
        del devices[unit]
    mig_geometry: dict[tuple[str, str], Geometry] = {}
    for d in devices.values():
        if d.unit[2]:
            d.compute, d.memory, gpu = mig_slices(d.profile, d.model)
            d.share = billed_share(d.compute, d.memory, gpu, "compute")  # as our exporter's
            mig_geometry[d.unit[:2]] = gpu
    with_geometry(facts, mig_geometry)
    _utilisation(w, seen, devices)
    capacity = _capacity(w)
    nodes: dict[Node, list[Device]] = {}
    for d in devices.values():
        nodes.setdefault((d.unit[0], d.node), []).append(d)
    held: dict[tuple[Unit, Who], Holding] = {}
    labelled = _from_labels(w, devices, nodes, capacity, held)
    _from_requests(w, nodes, capacity, labelled, held)
    facts.holdings.extend(h for h in held.values() if h.share_seconds > 0)
    add_energy(w, facts)
    pod_and_namespace_labels(w, facts)
    pod_controllers(w, facts)


def _utilisation(w: GaugeHour, seen: dict[str, list[Series]], devices: dict[Unit, Device]) -> None:
    """Each device's utilisation 0..1: the profiling field where it has one, else GPU_UTIL %
    (the device-level series: per-container copies of ``--kubernetes-virtual-gpus`` aside)."""
    for name, scale in (("DCGM_FI_DEV_GPU_UTIL", 100), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1)):
        units: dict[Unit, list[Series]] = {}
        for s in seen[name]:
            lab = s.labels
            if name == "DCGM_FI_DEV_GPU_UTIL" and lab.get("vgpu"):
                continue
            units.setdefault((w.cluster_of(lab), _uuid(lab), lab.get("GPU_I_ID", "")), []).append(s)
        for unit, group in units.items():
            if unit in devices:
                devices[unit].util = [(a, b, v / scale) for a, b, v in w.pieces(merged(group))]


Node = tuple[str, str]  # cluster, node
Capacity = dict[Node, dict[str, Decimal]]  # per node: resource -> units


def _capacity(w: GaugeHour) -> Capacity:
    """kube_node_status_capacity of the nvidia resources, as last reported in the hour."""
    out: Capacity = {}
    for s in w.raw(CAPACITY):
        inside = [v for t, v in s.samples if t < w.t1]
        if inside:
            lab = s.labels
            node = (w.cluster_of(lab), lab.get("node", ""))
            out.setdefault(node, {})[lab.get("resource", "")] = inside[-1]
    return out


def _pool(mine: Iterable[Device], resource: str) -> list[Device]:
    """The devices of a node (``mine``) that a resource name hands out."""
    if resource.startswith("nvidia_com_mig_"):
        return [d for d in mine if d.unit[2] and resource_of(d.profile) == resource]
    whole = [d for d in mine if not d.unit[2]]
    return whole or [d for d in mine if d.unit[2]]  # MIG "single" strategy: instances as GPUs


def _replicas(mine: list[Device], capacity: dict[str, Decimal], d: Device) -> Decimal:
    """How many containers may hold ``d`` at once (time-slicing), from its node's capacity."""
    best = Decimal(1)
    for resource, units in capacity.items():
        pool = _pool(mine, resource)
        if units > 0 and d in pool:
            best = max(best, units / len(pool))
    return best


def _from_labels(
    w: GaugeHour,
    devices: dict[Unit, Device],
    nodes: dict[Node, list[Device]],
    capacity: Capacity,
    held: dict[tuple[Unit, Who], Holding],
) -> set[tuple[str, str, bool]]:
    """Holdings named by dcgm-exporter's pod labels; the pools they cover, as (cluster,
    node, MIG instance?) — there kube-state-metrics' requests are not used."""
    covered: set[tuple[str, str, bool]] = set()
    for d in devices.values():
        if not d.holders:
            continue
        where = (d.unit[0], d.node)
        replicas = _replicas(nodes[where], capacity.get(where, {}), d)
        virtual = any(vgpu for _, vgpu in d.holders)
        if replicas > 1 and not virtual:
            continue  # dcgm-exporter names one of the sharing containers: use the requests
        covered.add((d.unit[0], d.node, bool(d.unit[2])))
        present = {key: w.pieces(merged(group)) for key, group in d.holders.items()}
        count = summed([(a, b, Decimal(1)) for a, b, _ in p] for p in present.values())
        for (who, vgpu), p in sorted(present.items()):
            if vgpu:  # one replica of the GPU
                share = [(a, b, d.share / replicas) for a, b, _ in p]
            else:  # the device, or an equal part of it when several hold it at once
                share = [(a, b, d.share / n) for a, b, _, n in overlap(p, count)]
            shared = bool(vgpu) or any(n > 1 for _, _, _, n in overlap(p, count))
            own = None
            if vgpu and who in d.own_util:
                own = [(a, b, v / 100) for a, b, v in w.function(d.own_util[who])]
            _add(held, d, who, share, shared, own)
    return covered


def _from_requests(
    w: GaugeHour,
    nodes: dict[Node, list[Device]],
    capacity: Capacity,
    covered: set[tuple[str, str, bool]],
    held: dict[tuple[Unit, Who], Holding],
) -> None:
    """Holdings from kube-state-metrics' requests, spread over the node's pool."""
    running = {
        key: w.function(group)
        for key, group in grouped(
            w,
            RUNNING,
            lambda lab: (w.cluster_of(lab), lab.get("namespace", ""), lab.get("pod", "")),
        ).items()
    }
    requests = grouped(
        w,
        REQUESTS,
        lambda lab: (
            w.cluster_of(lab),
            lab.get("node", ""),
            lab.get("resource", ""),
            lab.get("namespace", ""),
            lab.get("pod", ""),
            lab.get("container", ""),
        ),
    )
    for (cluster, node, resource, ns, pod, container), group in sorted(requests.items()):
        pool = _pool(nodes.get((cluster, node), []), resource)
        if not pool or (cluster, node, resource.startswith("nvidia_com_mig_")) in covered:
            continue
        units = capacity.get((cluster, node), {}).get(resource) or Decimal(len(pool))
        run = running.get((cluster, ns, pod), [])
        # q units requested x running (0/1): the container's units held over time
        q = [(a, b, v * r) for a, b, v, r in overlap(w.function(group), run)]
        shared = units > len(pool)  # time-sliced: the replica's own usage is unknown
        for d in pool:
            share = [(a, b, v / units * d.share) for a, b, v in q]
            _add(held, d, (ns, pod, container), share, shared, None)


def _add(
    held: dict[tuple[Unit, Who], Holding],
    d: Device,
    who: Who,
    share: list[Piece],
    shared: bool,
    own: list[Piece] | None,
) -> None:
    seconds, used_ratio, own_seconds = measure(
        share, [], None if shared else d.util, own if shared else None
    )
    seconds = us(seconds)
    if seconds <= 0:
        return
    if shared:
        busy = None if own_seconds is None else min(seconds, us(own_seconds))
    else:
        busy = None if used_ratio is None else us(seconds * min(used_ratio, Decimal(1)))
    ns, pod, container = who
    key = (d.unit, who)
    before = held.get(key)
    if before is not None:  # the same container on the same device through two resources
        seconds += before.share_seconds
        if busy is not None and before.busy_share_seconds is not None:
            busy += before.busy_share_seconds
        else:
            busy = None
    gi = d.unit[2]
    held[key] = Holding(
        d.unit[1],
        ns,
        pod,
        container,
        seconds,
        busy,
        us(own_seconds) if own_seconds is not None else Decimal(0),
        shared,
        d.compute if gi else None,
        d.memory if gi else None,
        int(gi) if gi else None,
        d.profile if gi else "",
        cluster=d.unit[0],
    )
