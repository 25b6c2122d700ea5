"""The MIG profiles of each MIG-capable GPU model: the one table, read by the cost service
(costsvc/rules/mig.py: a GPU's geometry where its exporter published none, rightsizing's
options) and by the exporter's fake NVML (exporter/simulate/mig_profiles.py). Pure.

Facts from NVIDIA's MIG user guide, "Supported MIG Profiles"
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html): the
profile names, their compute slices (of 7; of 4 on the A30) and memory slices (of 8; of 4 on
the A30). Usable memory, profile ids and SMs per profile are what ``nvidia-smi mig -lgip``
reports on the board where we have it (H100 80GB, A100 40/80GB, A30; H200 — read on a lent
machine, tests/exporter/data/nvml-h200-580.159.04-mig.json); elsewhere the memory is the
gigabytes of the profile's name, in 10^9 bytes, and the ids and SMs are unknown (None).
Media-extension (``+me``) variants have the same compute and memory as their base profile and
are not listed.
"""

from __future__ import annotations

from typing import NamedTuple

MIB = 1 << 20
GB = 10**9


class MigProfile(NamedTuple):
    name: str
    compute_slices: int
    memory_slices: int
    memory_bytes: int  # usable memory
    profile_id: int | None = None  # nvidia-smi mig -lgip's "ID"; None: not read from a board
    sms: int | None = None  # streaming multiprocessors; None: not read from a board


class MigTable(NamedTuple):
    compute_slices: int  # of the whole GPU: 7 (4 on the A30)
    memory_slices: int  # 8 (4 on the A30)
    profiles: tuple[MigProfile, ...]  # smallest first


# a board's kinds of profile, smallest first: (compute slices, memory slices, the profile id
# nvidia-smi mig -lgip shows), the same on every board of that geometry; the last, the whole GPU
SEVEN_EIGHT = ((1, 1, 19), (1, 2, 15), (2, 2, 14), (3, 4, 9), (4, 4, 5), (7, 8, 0))
FOUR_FOUR = ((1, 1, 14), (2, 2, 5), (4, 4, 0))  # the A30's


def _board(
    kinds: tuple[tuple[int, int, int], ...],
    names: str,
    mib: tuple[int, ...] = (),
    sms: tuple[int, ...] = (),
) -> MigTable:
    """A board's table: its profiles' ``names`` (one per kind) with, where read from the
    board, their usable MiB and SMs — else the gigabytes of the names, ids and SMs unknown."""
    profiles = []
    for i, (name, (compute, memory, pid)) in enumerate(zip(names.split(), kinds, strict=True)):
        if mib:
            profiles.append(MigProfile(name, compute, memory, mib[i] * MIB, pid, sms[i]))
        else:
            size = int(name.split(".")[1].removesuffix("gb")) * GB
            profiles.append(MigProfile(name, compute, memory, size))
    whole = profiles[-1]
    return MigTable(whole.compute_slices, whole.memory_slices, tuple(profiles))


H100_80GB = _board(
    SEVEN_EIGHT,
    "1g.10gb 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb",
    (9856, 19968, 19968, 40192, 40192, 80768),
    (16, 26, 32, 60, 64, 132),
)
H100_94GB = _board(SEVEN_EIGHT, "1g.12gb 1g.24gb 2g.24gb 3g.47gb 4g.47gb 7g.94gb")
# A real H200's NVML (memorySizeMB) and nvidia-smi mig -lgip, driver 580.159.04: 16 GiB for
# "1g.18gb", not 18 GB
H200_141GB = _board(
    SEVEN_EIGHT,
    "1g.18gb 1g.35gb 2g.35gb 3g.71gb 4g.71gb 7g.141gb",
    (16384, 33280, 33280, 71424, 71424, 143360),
    (16, 26, 32, 60, 64, 132),
)
A100_80GB = _board(
    SEVEN_EIGHT,
    "1g.10gb 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb",
    (9728, 19968, 19968, 40192, 40192, 80896),
    (14, 14, 28, 42, 56, 98),
)
A100_40GB = _board(
    SEVEN_EIGHT,
    "1g.5gb 1g.10gb 2g.10gb 3g.20gb 4g.20gb 7g.40gb",
    (4864, 9856, 9856, 19968, 19968, 40192),
    (14, 14, 28, 42, 56, 98),
)
# the A30's -lgip: 5.81, 11.69 and 23.44 GiB; 14, 28 and 56 SMs
A30_24GB = _board(FOUR_FOUR, "1g.6gb 2g.12gb 4g.24gb", (5952, 11968, 24000), (14, 28, 56))

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
