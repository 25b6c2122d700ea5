"""Who holds which part of which GPU, and how much of it they use. Pure: no I/O.

Inputs are one collection's GPU states (identity, MIG instances, processes), the containers'
device claims (from the kubelet's pod-resources API), the time-slice replica count per device
(from its allocatable resources) and a PID -> container lookup (cgroup + pod directory).

Shares follow the default rule (``gpu_allocation_share`` in docs/metrics.md): a whole GPU = 1;
a MIG instance = its compute slices / 7; a time-slice replica = 1 / the replicas advertised for
that GPU (or MIG instance). Device-wide values are never copied under a pod's labels unless
exactly one container holds the device. A claim of a pod whose phase is Succeeded or Failed is
never attributed: kubelets before the fix of kubernetes#119423 keep listing the devices of
finished pods, which the device manager has already handed to someone else; such claims are
counted instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from exporter.pods.claims import Claim, Holder
from exporter.snapshot import GpuState


@dataclass(frozen=True, slots=True)
class Unit:
    """A device unit: a whole GPU (gi_id None) or one MIG instance of it."""

    gpu_index: int
    gi_id: int | None


@dataclass(slots=True)
class Attribution:
    # (unit, holder, resource) -> share of the physical GPU
    shares: dict[tuple[Unit, Holder, str], float] = field(default_factory=dict)
    # units held by exactly one container: their series may carry that container's labels
    exclusive: dict[Unit, Holder] = field(default_factory=dict)
    # (unit, holder) -> (SM utilisation 0..1 or None, memory bytes)
    usage: dict[tuple[Unit, Holder], tuple[float | None, int]] = field(default_factory=dict)
    unattributed_processes: dict[int, int] = field(default_factory=dict)  # gpu index -> count
    unknown_device_ids: int = 0
    finished_pod_device_ids: int = 0


def attribute(
    states: Iterable[GpuState],
    claims: Iterable[Claim],
    replicas: dict[str, int],
    owner: Callable[[int], Holder | None],
    finished: Callable[[str, str], bool] | None = None,
) -> Attribution:
    """``finished(namespace, pod)``: the pod's phase is Succeeded or Failed."""
    states = list(states)
    # device key (see exporter.pods.device_ids) -> (unit, share of the physical GPU)
    units: dict[str, tuple[Unit, float]] = {}
    for s in states:
        index, gpu_uuid = s.identity.index, s.identity.uuid
        whole = (Unit(index, None), 1.0)
        units[s.identity.device] = whole  # GKE: nvidia<N>
        if gpu_uuid:
            units[gpu_uuid] = whole
        for inst in s.instances:
            i = inst.instance
            part = (Unit(index, i.gi_id), i.compute_slices / 7)
            units[i.uuid] = part
            units[f"{s.identity.device}/gi{i.gi_id}"] = part  # GKE: nvidia<N>/gi<M>
            if gpu_uuid:
                units[f"{gpu_uuid}/gi{i.gi_id}"] = part  # legacy MIG-GPU-<uuid>/<gi>/<ci>

    out = Attribution()
    holders: dict[Unit, set[Holder]] = {}
    for claim in claims:
        if finished is not None and finished(claim.holder.namespace, claim.holder.pod):
            out.finished_pod_device_ids += 1
            continue
        found = units.get(claim.base) if claim.base else None
        if found is None:
            out.unknown_device_ids += 1
            continue
        unit, share = found
        if claim.replica is not None:
            share /= max(replicas.get(claim.base, 1), 1)
        key = (unit, claim.holder, claim.resource)
        out.shares[key] = out.shares.get(key, 0.0) + share
        holders.setdefault(unit, set()).add(claim.holder)

    for unit, held_by in holders.items():
        if len(held_by) == 1:
            out.exclusive[unit] = next(iter(held_by))

    for s in states:
        index = s.identity.index
        for proc in s.processes:
            holder = owner(proc.pid)
            if holder is None:
                out.unattributed_processes[index] = out.unattributed_processes.get(index, 0) + 1
                continue
            unit = Unit(index, proc.gi_id)
            sm, mem = out.usage.get((unit, holder), (None, 0))
            if proc.sm_utilization is not None:
                sm = (sm or 0.0) + proc.sm_utilization
            out.usage[(unit, holder)] = (sm, mem + (proc.used_bytes or 0))
    return out
