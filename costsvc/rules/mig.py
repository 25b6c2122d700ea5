"""A MIG GPU's geometry — the one rule of the cost service for it — and the MIG profiles per
GPU model. Pure.

**The rule** (:func:`geometry`): a GPU's MIG slices are those its exporter read from the GPU
itself and published (``gpu_compute_slices``/``gpu_memory_slices`` on
``gpu_mig_instance_info``: exporter/nvml/boundary.py ``mig_geometry``); where none was published
(dcgm-exporter's series, an older exporter) they come from this table by the GPU's model; a
model the table does not know is unknown — :class:`UnknownMigGeometry`, the hour fails naming
it and is retried — never a guess such as 7 and 8. Used by the ingest of both sources
(costsvc/ingest/gauges/exporter.py, costsvc/ingest/gauges/dcgm.py), attribution's memory basis
(costsvc/rules/attribution.py) and rightsizing (costsvc/advice/rightsizing.py).

Facts from NVIDIA's MIG user guide, "Supported MIG Profiles"
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html): the
profile names, their compute slices (of 7; of 4 on the A30) and memory slices (of 8; of 4 on
the A30). Usable memory per profile is what ``nvidia-smi mig -lgip`` reports on the board
where we have it (H100 80GB, A100 40/80GB, H200 — read on a lent machine); elsewhere the
gigabytes of the profile's name, in 10^9 bytes. Media-extension (``+me``) variants have the
same compute and memory as their base profile and are not listed: rightsizing picks a size,
not a media engine.
"""

from __future__ import annotations

from typing import NamedTuple

MIB = 1 << 20
GB = 10**9


class MigProfile(NamedTuple):
    name: str
    compute_slices: int
    memory_slices: int
    memory_bytes: int


class Geometry(NamedTuple):
    """A MIG-capable GPU's slices: 7 compute and 8 memory on an A100 or H100, 4 and 4 on an
    A30."""

    compute_slices: int
    memory_slices: int


class UnknownMigGeometry(Exception):
    """MIG instances on a GPU whose geometry nobody knows: neither published by its exporter
    nor in the table. The hour fails (and is retried) rather than guess."""


class MigTable(NamedTuple):
    compute_slices: int  # of the whole GPU: 7 (4 on the A30)
    memory_slices: int  # 8 (4 on the A30)
    profiles: tuple[MigProfile, ...]  # smallest first


def _mib(name: str, c: int, m: int, mib: int) -> MigProfile:
    return MigProfile(name, c, m, mib * MIB)


def _gb(name: str, c: int, m: int) -> MigProfile:
    return MigProfile(name, c, m, int(name.split(".")[1].removesuffix("gb")) * GB)


H100_80GB = MigTable(
    7,
    8,
    (
        _mib("1g.10gb", 1, 1, 9856),
        _mib("1g.20gb", 1, 2, 19968),
        _mib("2g.20gb", 2, 2, 19968),
        _mib("3g.40gb", 3, 4, 40192),
        _mib("4g.40gb", 4, 4, 40192),
        _mib("7g.80gb", 7, 8, 80768),
    ),
)
H100_94GB = MigTable(
    7,
    8,
    tuple(
        _gb(n, c, m)
        for n, c, m in (
            ("1g.12gb", 1, 1),
            ("1g.24gb", 1, 2),
            ("2g.24gb", 2, 2),
            ("3g.47gb", 3, 4),
            ("4g.47gb", 4, 4),
            ("7g.94gb", 7, 8),
        )
    ),
)
# A real H200's NVML (memorySizeMB) and nvidia-smi mig -lgip, driver 580.159.04
# (tests/exporter/data/nvml-h200-580.159.04-mig.json): 16 GiB for "1g.18gb", not 18 GB
H200_141GB = MigTable(
    7,
    8,
    (
        _mib("1g.18gb", 1, 1, 16384),
        _mib("1g.35gb", 1, 2, 33280),
        _mib("2g.35gb", 2, 2, 33280),
        _mib("3g.71gb", 3, 4, 71424),
        _mib("4g.71gb", 4, 4, 71424),
        _mib("7g.141gb", 7, 8, 143360),
    ),
)
A100_80GB = MigTable(
    7,
    8,
    (
        _mib("1g.10gb", 1, 1, 9728),
        _mib("1g.20gb", 1, 2, 19968),
        _mib("2g.20gb", 2, 2, 19968),
        _mib("3g.40gb", 3, 4, 40192),
        _mib("4g.40gb", 4, 4, 40192),
        _mib("7g.80gb", 7, 8, 80896),
    ),
)
A100_40GB = MigTable(
    7,
    8,
    (
        _mib("1g.5gb", 1, 1, 4864),
        _mib("1g.10gb", 1, 2, 9856),
        _mib("2g.10gb", 2, 2, 9856),
        _mib("3g.20gb", 3, 4, 19968),
        _mib("4g.20gb", 4, 4, 19968),
        _mib("7g.40gb", 7, 8, 40192),
    ),
)
A30_24GB = MigTable(
    4,
    4,
    tuple(_gb(n, c, m) for n, c, m in (("1g.6gb", 1, 1), ("2g.12gb", 2, 2), ("4g.24gb", 4, 4))),
)

# modelName as NVML reports it (the DCGM ``modelName`` label)
BY_MODEL = {
    "NVIDIA H100 80GB HBM3": H100_80GB,
    "NVIDIA H100 PCIe": H100_80GB,
    "NVIDIA H100 NVL": H100_94GB,
    "NVIDIA H200": H200_141GB,
    "NVIDIA H200 NVL": H200_141GB,
    "NVIDIA A100-SXM4-80GB": A100_80GB,
    "NVIDIA A100 80GB PCIe": A100_80GB,
    "NVIDIA A100-SXM4-40GB": A100_40GB,
    "NVIDIA A100-PCIE-40GB": A100_40GB,
    "NVIDIA A30": A30_24GB,
}


def mig_table(model: str) -> MigTable | None:
    """The model's MIG profiles, or None where the model has no MIG (or is not known)."""
    return BY_MODEL.get(model)


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
            "did not publish gpu_compute_slices/gpu_memory_slices and costsvc/rules/mig.py "
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
