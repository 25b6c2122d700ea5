"""Who holds which part of which GPU, and how much of it they use. Pure: no I/O.

Inputs are one collection's GPU states (identity, MIG instances, processes), the containers'
device claims (from the kubelet's pod-resources API), the time-slice replica count per device
(from its allocatable resources) and a PID -> container lookup (cgroup + pod directory).

Shares follow the default rule (``gpu_allocation_share`` in docs/metrics.md): a whole GPU = 1;
a MIG instance = its compute slices / the GPU's (its MIG geometry, read from NVML: 7 on an A100
or H100, 4 on an A30; a GPU whose geometry NVML does not tell gets no MIG shares, and the cost
service's per-model table decides); a time-slice replica = 1 / the replicas advertised for
that GPU (or MIG instance); a device held through a DRA claim = the unit's share split equally
over every container holding it through a claim (a claim used by three pods: a third each,
never duplicated); a fractional allocation (HAMi, memory-profile vGPU) = cores / 100 (compute)
and MiB / the GPU's memory (memory), see :mod:`exporter.pods.fractional`. Each holding has a
memory share too (whole GPU 1, MIG instance memory slices / the GPU's, replica 1 / replicas). A GPU
whose holdings add up to more than 1 on either basis (HAMi allows over-subscription) is
published as it is and flagged. Device-wide values are never copied under a pod's labels
unless exactly one container holds the whole device. A claim of a pod whose phase is Succeeded
or Failed is never attributed: kubelets before the fix of kubernetes#119423 keep listing the
devices of finished pods, which the device manager has already handed to someone else; such
claims are counted instead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from exporter.pods.claims import Claim, ClaimRef, Holder
from exporter.pods.device_ids import mig_profile_key
from exporter.snapshot import GpuState

_MIB = 1 << 20
_EPSILON = 1e-9  # float sums of exact thirds and sevenths


@dataclass(frozen=True, slots=True)
class Unit:
    """A device unit: a whole GPU (gi_id None) or one MIG instance of it."""

    gpu_index: int
    gi_id: int | None


@dataclass(slots=True)
class Attribution:
    # (unit, holder, resource) -> share of the physical GPU (compute basis)
    shares: dict[tuple[Unit, Holder, str], float] = field(default_factory=dict)
    # the same keys -> share of the physical GPU's memory
    memory_shares: dict[tuple[Unit, Holder, str], float] = field(default_factory=dict)
    # the same keys -> the DRA claim the holding is through
    claims: dict[tuple[Unit, Holder, str], ClaimRef] = field(default_factory=dict)
    # (unit, holder) -> the DRA claim, for the per-container usage series
    usage_claims: dict[tuple[Unit, Holder], ClaimRef] = field(default_factory=dict)
    # gpu index -> (Σ compute shares, Σ memory shares), for every GPU with holdings
    sums: dict[int, tuple[float, float]] = field(default_factory=dict)
    # gpu index -> (Σ compute shares > 1, Σ memory shares > 1), for every GPU with holdings
    oversubscribed: dict[int, tuple[bool, bool]] = field(default_factory=dict)
    # units held by exactly one container: their series may carry that container's labels
    exclusive: dict[Unit, Holder] = field(default_factory=dict)
    # (unit, holder) -> (SM utilisation 0..1 or None, memory bytes)
    usage: dict[tuple[Unit, Holder], tuple[float | None, int]] = field(default_factory=dict)
    unattributed_processes: dict[int, int] = field(default_factory=dict)  # gpu index -> count
    unknown_device_ids: int = 0
    finished_pod_device_ids: int = 0


Units = dict[str, tuple[Unit, float, float]]  # device key -> (unit, compute, memory share)
# DRA: unit -> the (holder, resource, claim) holding it, split equally afterwards
Claimed = dict[Unit, dict[tuple[Holder, str], ClaimRef]]


def attribute(
    states: Iterable[GpuState],
    claims: Iterable[Claim],
    replicas_of: dict[str, int],
    owner: Callable[[int], Holder | None],
    finished: Callable[[str, str], bool] | None = None,
) -> Attribution:
    """Each container's shares of the GPUs it holds, and its usage of them. ``finished(
    namespace, pod)``: the pod's phase is Succeeded or Failed."""
    states = list(states)
    units, unit_shares, memory_of = _units(states)
    out = Attribution()
    holders, fractional_units, claimed = _add_claims(
        out, claims, units, memory_of, replicas_of, finished
    )
    _add_claimed(out, claimed, unit_shares)
    _add_sums(out)
    for unit, held_by in holders.items():
        if len(held_by) == 1 and unit not in fractional_units:
            out.exclusive[unit] = next(iter(held_by))
    _add_usage(out, states, owner)
    return out


def _units(states: list[GpuState]) -> tuple[Units, dict[Unit, tuple[float, float]], dict[int, int]]:
    """Every device key a claim may name (exporter.pods.device_ids), with its unit and that
    unit's shares of the physical GPU; each unit's shares; each GPU's framebuffer bytes."""
    units: Units = {}
    memory_of: dict[int, int] = {}  # gpu index -> framebuffer bytes
    unit_shares: dict[Unit, tuple[float, float]] = {}
    for s in states:
        index, gpu_uuid = s.identity.index, s.identity.uuid
        memory_of[index] = s.memory_bytes
        whole = (Unit(index, None), 1.0, 1.0)
        units[s.identity.device] = whole  # GKE: nvidia<N>
        unit_shares[whole[0]] = whole[1:]
        if gpu_uuid:
            units[gpu_uuid] = whole
        profiles = Counter(inst.instance.profile for inst in s.instances)
        geometry = s.mig_geometry
        for inst in s.instances:
            if geometry is None:  # unknown: no share is guessed (the exporter counts it)
                break
            i = inst.instance
            part = (
                Unit(index, i.gi_id),
                i.compute_slices / geometry.compute_slices,
                i.memory_slices / geometry.memory_slices,
            )
            units[i.uuid] = part
            unit_shares[part[0]] = part[1:]
            units[f"{s.identity.device}/gi{i.gi_id}"] = part  # GKE: nvidia<N>/gi<M>
            if gpu_uuid:
                units[f"{gpu_uuid}/gi{i.gi_id}"] = part  # legacy MIG-GPU-<uuid>/<gi>/<ci>
                if profiles[i.profile] == 1:  # DRA: a partition named by GPU and profile
                    units[mig_profile_key(gpu_uuid, i.profile)] = part
    return units, unit_shares, memory_of


def _add_claims(
    out: Attribution,
    claims: Iterable[Claim],
    units: Units,
    memory_of: dict[int, int],
    replicas_of: dict[str, int],
    finished: Callable[[str, str], bool] | None,
) -> tuple[dict[Unit, set[Holder]], set[Unit], Claimed]:
    """Add the shares of the claims of running pods: a whole unit, a replica of it, or a
    fractional allocation; answers each unit's holders, the units held fractionally, and the
    DRA claims (split equally by :func:`_add_claimed`)."""
    holders: dict[Unit, set[Holder]] = {}
    fractional_units: set[Unit] = set()
    claimed: Claimed = {}
    for claim in claims:
        if finished is not None and finished(claim.holder.namespace, claim.holder.pod):
            out.finished_pod_device_ids += 1
            continue
        found = units.get(claim.base) if claim.base else None
        if found is None:
            out.unknown_device_ids += 1
            continue
        unit, share, memory = found
        holders.setdefault(unit, set()).add(claim.holder)
        key = (unit, claim.holder, claim.resource)
        if claim.claim is not None:
            claimed.setdefault(unit, {}).setdefault((claim.holder, claim.resource), claim.claim)
            continue
        if claim.memory_mib is not None:
            fractional_units.add(unit)
            total = memory_of.get(unit.gpu_index, 0)
            memory = min(claim.memory_mib * _MIB / total, 1.0) if total else 0.0
            share = claim.cores / 100 * share if claim.cores is not None else memory
        elif claim.replica is not None:
            replicas = max(replicas_of.get(claim.base, 1), 1)
            share /= replicas
            memory /= replicas
        out.shares[key] = out.shares.get(key, 0.0) + share
        out.memory_shares[key] = out.memory_shares.get(key, 0.0) + memory
    return holders, fractional_units, claimed


def _add_claimed(
    out: Attribution, claimed: Claimed, unit_shares: dict[Unit, tuple[float, float]]
) -> None:
    """Add the DRA claims' shares: each unit's split equally over the containers holding it
    through a claim."""
    for unit, held in claimed.items():
        share, memory = unit_shares[unit]
        n = len(held)
        for (claimant, resource), ref in held.items():
            key = (unit, claimant, resource)
            out.shares[key] = out.shares.get(key, 0.0) + share / n
            out.memory_shares[key] = out.memory_shares.get(key, 0.0) + memory / n
            out.claims[key] = ref
            out.usage_claims.setdefault((unit, claimant), ref)


def _add_sums(out: Attribution) -> None:
    """Each held GPU's summed shares on either basis, and whether they pass 1."""
    compute_sum: dict[int, float] = {}
    memory_sum: dict[int, float] = {}
    for key, held_share in out.shares.items():
        index = key[0].gpu_index
        compute_sum[index] = compute_sum.get(index, 0.0) + held_share
        memory_sum[index] = memory_sum.get(index, 0.0) + out.memory_shares.get(key, 0.0)
    for index, compute_total in compute_sum.items():
        out.sums[index] = (compute_total, memory_sum[index])
        out.oversubscribed[index] = (
            compute_total > 1 + _EPSILON,
            memory_sum[index] > 1 + _EPSILON,
        )


def _add_usage(
    out: Attribution, states: list[GpuState], owner: Callable[[int], Holder | None]
) -> None:
    """Each holder's SM utilisation and memory on each unit, from its processes (``owner``:
    a PID's container); the processes of no container counted per GPU."""
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
