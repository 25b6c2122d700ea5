"""What our exporter's series describe, whichever rule reads an hour of them: a GPU (cluster,
``UUID``), a holding (cluster, ``UUID``, ``GPU_I_ID``, ``namespace``, ``pod``, ``container``),
a holding's facts, the hour's MIG instances, and what an hour's facts need besides its GPUs and
holdings (geometry, energy, pod labels, controllers).

Series are grouped by what they describe, not by their full label set: a GPU whose driver was
upgraded mid-hour (a new ``DCGM_FI_DRIVER_VERSION`` label, so a new series) is still one GPU,
and a container's hold on it is still one holding. Every series belongs to the cluster named by
its ``cluster`` label, or to the configured cluster when it has none.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from costsvc.ingest.gauges.power import add_energy
from costsvc.ingest.hour import HourReads, pod_and_namespace_labels, pod_controllers
from costsvc.rules.attribution import GpuKey, Holding, HourFacts, with_geometry
from costsvc.rules.energy import Measured
from costsvc.rules.mig import Geometry, geometry


def gpu_key(w: HourReads) -> Callable[[dict[str, str]], GpuKey]:
    """What one GPU is: (cluster, ``UUID``)."""
    return lambda lab: (w.cluster_of(lab), lab.get("UUID", ""))


def holding_key(w: HourReads) -> Callable[[dict[str, str]], tuple[str, ...]]:
    """What one holding is: (cluster, ``UUID``, ``GPU_I_ID``, ``namespace``, ``pod``,
    ``container``) — its ``resource`` label is informational."""
    unit_of = unit_key(w)
    return lambda lab: (
        *unit_of(lab),
        lab.get("namespace", ""),
        lab.get("pod", ""),
        lab.get("container", ""),
    )


def unit_key(w: HourReads) -> Callable[[dict[str, str]], tuple[str, ...]]:
    return lambda lab: (w.cluster_of(lab), lab.get("UUID", ""), lab.get("GPU_I_ID", ""))


Slices = dict[tuple[str, ...], tuple[int, int]]  # (cluster, UUID, GPU_I_ID) -> its slices


def holding_of(
    key: tuple[str, ...],
    labels: dict[str, str],
    slices: Slices,
    share: Decimal,
    busy: Decimal | None,
    own_sm: Decimal | None,
    shared: bool,
    memory_share: Decimal | None,
) -> Holding:
    """A holding's facts (``key``: :func:`holding_key`'s; ``labels``: one of its series'):
    on a MIG instance, the instance's slices, id and profile (both reads, gauges and
    integrals); through a DRA claim, the claim (``claim_namespace``/``claim``)."""
    cluster, uuid, gi, ns, pod, container = key
    compute, memory = slices.get((cluster, uuid, gi), (0, 0)) if gi else (0, 0)
    return Holding(
        uuid,
        ns,
        pod,
        container,
        share,
        busy,
        own_sm or Decimal(0),
        shared,
        compute or None,
        memory if compute else None,
        int(gi) if gi else None,
        labels.get("GPU_I_PROFILE", "") if gi else "",
        memory_share,
        claim_of(labels),
        cluster=cluster,
    )


def claim_of(labels: dict[str, str]) -> str:
    """The DRA claim a holding's series names (exporter/render/families.py ``_claim_pairs``),
    ``<namespace>/<name>``; "" for none."""
    name = labels.get("claim", "")
    return f"{labels.get('claim_namespace', '')}/{name}" if name else ""


Published = dict[tuple[str, str], Geometry | None]  # per GPU with MIG instances: its geometry


def mig_instances(w: HourReads) -> tuple[Slices, Published]:
    """The hour's MIG instances (``gpu_mig_instance_info``): each one's compute and memory
    slices, and each MIG GPU's geometry where its exporter read it from the GPU."""
    unit_of = unit_key(w)
    slices: Slices = {}
    published: Published = {}
    for lab in w.latest("gpu_mig_instance_info"):
        key = unit_of(lab)
        slices[key] = (int(lab.get("compute_slices") or 0), int(lab.get("memory_slices") or 0))
        gpu_c, gpu_m = lab.get("gpu_compute_slices"), lab.get("gpu_memory_slices")
        told = Geometry(int(gpu_c), int(gpu_m)) if gpu_c and gpu_m else None
        gpu = (key[0], key[1])
        published[gpu] = told or published.get(gpu)
    return slices, published


def finish(
    w: HourReads,
    facts: HourFacts,
    published: Published,
    energy: dict[GpuKey, Measured] | None = None,
) -> None:
    """What an hour's facts need besides its GPUs and holdings: each MIG GPU's geometry,
    energy (``energy``: where the caller read it), pod and namespace labels, controllers."""
    # each MIG GPU's geometry by the one rule: the exporter's (read from the GPU), else the
    # table's by model; None (unknown) prices the compute basis only (costsvc/rules/attribution.py)
    mig_gpus = set(published) | {h.gpu for h in facts.holdings if h.gi_id is not None}
    geometries = {
        g.key: geometry(g.model, published.get(g.key)) for g in facts.gpus if g.key in mig_gpus
    }
    with_geometry(facts, {key: gpu for key, gpu in geometries.items() if gpu is not None})
    add_energy(w, facts, energy)
    pod_and_namespace_labels(w, facts)
    pod_controllers(w, facts)
