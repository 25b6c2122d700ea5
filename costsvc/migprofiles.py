"""MIG GPU-instance profiles per GPU model, for rightsizing. Pure data.

Facts from NVIDIA's MIG user guide, "Supported MIG Profiles"
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html): the
profile names, their compute slices (of 7; of 4 on the A30) and memory slices (of 8; of 4 on
the A30). Usable memory per profile is what ``nvidia-smi mig -lgip`` reports on the board
where we have it (H100 80GB, A100 40/80GB); elsewhere the gigabytes of the profile's name,
in 10^9 bytes. Media-extension (``+me``) variants have the same compute and memory as their
base profile and are not listed: rightsizing picks a size, not a media engine.
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
H200_141GB = MigTable(
    7,
    8,
    tuple(
        _gb(n, c, m)
        for n, c, m in (
            ("1g.18gb", 1, 1),
            ("1g.35gb", 1, 2),
            ("2g.35gb", 2, 2),
            ("3g.71gb", 3, 4),
            ("4g.71gb", 4, 4),
            ("7g.141gb", 7, 8),
        )
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
