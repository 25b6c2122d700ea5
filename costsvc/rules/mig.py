"""A MIG GPU's geometry and a MIG instance's billed share — the cost service's one rule for
each. Pure.

**The geometry** (:func:`geometry`): a GPU's MIG slices are those its exporter read from the
GPU itself and published (``gpu_compute_slices``/``gpu_memory_slices`` on
``gpu_mig_instance_info``: exporter/nvml/boundary.py ``mig_geometry``); where none was published
(dcgm-exporter's series, an older exporter) they come from the per-model table
(kube/mig_profiles.py, NVIDIA's MIG user guide) by the GPU's model; a model the table does not
know is unknown — :class:`UnknownMigGeometry`, the hour fails naming it and is retried — never
a guess such as 7 and 8. Used by the ingest of both sources (costsvc/ingest/gauges/exporter.py,
costsvc/ingest/gauges/dcgm.py), attribution's memory basis (costsvc/rules/attribution.py) and
rightsizing (costsvc/advice/rightsizing.py, costsvc/advice/run.py).

**The billed share** (:func:`billed_share`): the share of its GPU a MIG instance is billed for
— its compute slices of the GPU's on the compute basis, its memory slices of the GPU's on the
memory basis (the cost model's ``mig_share_basis``), the GPU's slices by the geometry rule.
"""

from __future__ import annotations

from decimal import Decimal
from typing import NamedTuple

from kube.mig_profiles import BY_MODEL


class Geometry(NamedTuple):
    """A MIG-capable GPU's slices: 7 compute and 8 memory on an A100 or H100, 4 and 4 on an
    A30."""

    compute_slices: int
    memory_slices: int


class UnknownMigGeometry(Exception):
    """MIG instances on a GPU whose geometry nobody knows: neither published by its exporter
    nor in the table. The hour fails (and is retried) rather than guess."""


def geometry(model: str, published: Geometry | None = None) -> Geometry | None:
    """The rule: the GPU's own (``published`` by its exporter), else the table's for
    ``model``; None when neither knows."""
    if published is not None:
        return published
    table = BY_MODEL.get(model)
    return None if table is None else Geometry(table.compute_slices, table.memory_slices)


def known_geometry(model: str, published: Geometry | None = None, where: str = "") -> Geometry:
    """:func:`geometry`, or :class:`UnknownMigGeometry` naming the model."""
    found = geometry(model, published)
    if found is None:
        raise UnknownMigGeometry(
            f"MIG geometry of {model or 'a GPU without modelName'}{where} unknown: its exporter "
            "did not publish gpu_compute_slices/gpu_memory_slices and kube/mig_profiles.py "
            "does not know the model (never guessed)"
        )
    return found


def profile_slices(model: str, profile: str) -> tuple[int, int] | None:
    """(compute, memory) slices of a MIG profile name (``1g.6gb``, ``3g.40gb+me``, a compute
    instance's ``1c.3g.40gb`` counting its GPU instance) on ``model``, from the table; None
    when the model or profile is not in it."""
    table = BY_MODEL.get(model)
    if table is None:
        return None
    name = profile.split("+", 1)[0]
    name = name.split(".", 1)[1] if name.count(".") == 2 else name  # "1c.3g.40gb" -> its GI
    for p in table.profiles:
        if p.name == name:
            return p.compute_slices, p.memory_slices
    return None


def billed_share(compute_slices: int, memory_slices: int, gpu: Geometry, basis: str) -> Decimal:
    """The share of its GPU a MIG instance of ``compute_slices`` and ``memory_slices`` is billed
    for on ``basis`` (``compute`` or ``memory``): its slices of that kind over the GPU's
    (``gpu``: by :func:`geometry`, the published geometry first)."""
    if basis == "memory":
        return Decimal(memory_slices) / gpu.memory_slices
    return Decimal(compute_slices) / gpu.compute_slices
