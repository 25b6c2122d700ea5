"""Real MIG GPU-instance profiles, as NVML reports them, for the fake NVML.

Per GPU model: profile name -> (NVML profile id, compute slices of 7, memory slices of 8,
memory MiB, SMs). Figures are those of `nvidia-smi mig -lgip` on the respective boards.
"""

from __future__ import annotations

from typing import NamedTuple


class Profile(NamedTuple):
    profile_id: int
    compute_slices: int
    memory_slices: int
    memory_mib: int
    sms: int


H100_80GB = {
    "1g.10gb": Profile(19, 1, 1, 9856, 16),
    "1g.20gb": Profile(15, 1, 2, 19968, 26),
    "2g.20gb": Profile(14, 2, 2, 19968, 32),
    "3g.40gb": Profile(9, 3, 4, 40192, 60),
    "4g.40gb": Profile(5, 4, 4, 40192, 64),
    "7g.80gb": Profile(0, 7, 8, 80768, 132),
}
A100_80GB = {
    "1g.10gb": Profile(19, 1, 1, 9728, 14),
    "1g.20gb": Profile(15, 1, 2, 19968, 14),
    "2g.20gb": Profile(14, 2, 2, 19968, 28),
    "3g.40gb": Profile(9, 3, 4, 40192, 42),
    "4g.40gb": Profile(5, 4, 4, 40192, 56),
    "7g.80gb": Profile(0, 7, 8, 80896, 98),
}
A100_40GB = {
    "1g.5gb": Profile(19, 1, 1, 4864, 14),
    "1g.10gb": Profile(15, 1, 2, 9856, 14),
    "2g.10gb": Profile(14, 2, 2, 9856, 28),
    "3g.20gb": Profile(9, 3, 4, 19968, 42),
    "4g.20gb": Profile(5, 4, 4, 19968, 56),
    "7g.40gb": Profile(0, 7, 8, 40192, 98),
}

BY_MODEL = {
    "NVIDIA H100 80GB HBM3": H100_80GB,
    "NVIDIA H100 PCIe": H100_80GB,
    "NVIDIA A100-SXM4-80GB": A100_80GB,
    "NVIDIA A100 80GB PCIe": A100_80GB,
    "NVIDIA A100-SXM4-40GB": A100_40GB,
    "NVIDIA A100-PCIE-40GB": A100_40GB,
}


def profiles_for(model: str) -> dict[str, Profile] | None:
    return BY_MODEL.get(model)
