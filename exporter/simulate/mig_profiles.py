"""Real MIG GPU-instance profiles, as NVML reports them, for the fake NVML.

Per GPU model: profile name -> (NVML profile id, compute slices, memory slices, memory MiB,
SMs, the ``NVML_GPU_INSTANCE_PROFILE_*`` it answers to). Figures are those of
``nvidia-smi mig -lgip`` on the respective boards (the A30's: IDs 14, 5 and 0, 5.81, 11.69
and 23.44 GiB, 14, 28 and 56 SMs); fractions as in NVIDIA's MIG user guide, "Supported MIG
Profiles". A GPU's geometry is that of its largest profile, the whole GPU (:func:`geometry`),
as the exporter reads it from NVML.
"""

from __future__ import annotations

from typing import NamedTuple

from exporter.nvml.library import lib as pynvml

ONE = pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE
ONE_DOUBLE_MEMORY = pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2  # 1g with 2 memory slices
TWO = pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE
THREE = pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE
FOUR = pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE
SEVEN = pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE


class Profile(NamedTuple):
    profile_id: int
    compute_slices: int
    memory_slices: int
    memory_mib: int
    sms: int
    nvml_profile: int  # NVML_GPU_INSTANCE_PROFILE_*


H100_80GB = {
    "1g.10gb": Profile(19, 1, 1, 9856, 16, ONE),
    "1g.20gb": Profile(15, 1, 2, 19968, 26, ONE_DOUBLE_MEMORY),
    "2g.20gb": Profile(14, 2, 2, 19968, 32, TWO),
    "3g.40gb": Profile(9, 3, 4, 40192, 60, THREE),
    "4g.40gb": Profile(5, 4, 4, 40192, 64, FOUR),
    "7g.80gb": Profile(0, 7, 8, 80768, 132, SEVEN),
}
A100_80GB = {
    "1g.10gb": Profile(19, 1, 1, 9728, 14, ONE),
    "1g.20gb": Profile(15, 1, 2, 19968, 14, ONE_DOUBLE_MEMORY),
    "2g.20gb": Profile(14, 2, 2, 19968, 28, TWO),
    "3g.40gb": Profile(9, 3, 4, 40192, 42, THREE),
    "4g.40gb": Profile(5, 4, 4, 40192, 56, FOUR),
    "7g.80gb": Profile(0, 7, 8, 80896, 98, SEVEN),
}
A100_40GB = {
    "1g.5gb": Profile(19, 1, 1, 4864, 14, ONE),
    "1g.10gb": Profile(15, 1, 2, 9856, 14, ONE_DOUBLE_MEMORY),
    "2g.10gb": Profile(14, 2, 2, 9856, 28, TWO),
    "3g.20gb": Profile(9, 3, 4, 19968, 42, THREE),
    "4g.20gb": Profile(5, 4, 4, 19968, 56, FOUR),
    "7g.40gb": Profile(0, 7, 8, 40192, 98, SEVEN),
}
# A real H200's, as its NVML answered (tests/exporter/data/nvml-h200-580.159.04-mig.json; its
# nvidia-smi mig -lgip there too): NVML's memory figures are well below the names' "gb"
H200_141GB = {
    "1g.18gb": Profile(19, 1, 1, 16384, 16, ONE),
    "1g.35gb": Profile(15, 1, 2, 33280, 26, ONE_DOUBLE_MEMORY),
    "2g.35gb": Profile(14, 2, 2, 33280, 32, TWO),
    "3g.71gb": Profile(9, 3, 4, 71424, 60, THREE),
    "4g.71gb": Profile(5, 4, 4, 71424, 64, FOUR),
    "7g.141gb": Profile(0, 7, 8, 143360, 132, SEVEN),
}
A30_24GB = {
    "1g.6gb": Profile(14, 1, 1, 5952, 14, ONE),
    "2g.12gb": Profile(5, 2, 2, 11968, 28, TWO),
    "4g.24gb": Profile(0, 4, 4, 24000, 56, FOUR),
}

BY_MODEL = {
    "NVIDIA H100 80GB HBM3": H100_80GB,
    "NVIDIA H100 PCIe": H100_80GB,
    "NVIDIA H200": H200_141GB,
    "NVIDIA A100-SXM4-80GB": A100_80GB,
    "NVIDIA A100 80GB PCIe": A100_80GB,
    "NVIDIA A100-SXM4-40GB": A100_40GB,
    "NVIDIA A100-PCIE-40GB": A100_40GB,
    "NVIDIA A30": A30_24GB,
}


def profiles_for(model: str) -> dict[str, Profile] | None:
    return BY_MODEL.get(model)


def geometry(profiles: dict[str, Profile]) -> tuple[int, int]:
    """(compute, memory) slices of the GPU: those of its largest profile, the whole GPU."""
    full = max(profiles.values(), key=lambda p: (p.compute_slices, p.memory_slices))
    return full.compute_slices, full.memory_slices
