"""Real MIG GPU-instance profiles, as NVML reports them, for the fake NVML: the per-model table
of kube/mig_profiles.py (NVIDIA's MIG user guide, "Supported MIG Profiles"; figures of
``nvidia-smi mig -lgip`` on the respective boards) seen as NVML answers it.

Per GPU model: profile name -> (NVML profile id, compute slices, memory slices, memory MiB,
SMs, the ``NVML_GPU_INSTANCE_PROFILE_*`` it answers to). Only models whose profiles were read
from a board (ids and SMs known) are offered. A GPU's geometry is that of its largest profile,
the whole GPU (:func:`geometry`), as the exporter reads it from NVML.
"""

from __future__ import annotations

from typing import NamedTuple

from exporter.nvml.library import lib as pynvml
from kube.mig_profiles import BY_MODEL as TABLES
from kube.mig_profiles import MigProfile, MigTable

# (compute, memory) slices -> the NVML_GPU_INSTANCE_PROFILE_* a profile answers to
NVML_PROFILES = {
    (1, 1): pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE,
    (1, 2): pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2,  # 1g with 2 memory slices
    (2, 2): pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE,
    (3, 4): pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE,
    (4, 4): pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE,
    (7, 8): pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE,
}


class Profile(NamedTuple):
    profile_id: int
    compute_slices: int
    memory_slices: int
    memory_mib: int
    sms: int
    nvml_profile: int  # NVML_GPU_INSTANCE_PROFILE_*


def _as_nvml(p: MigProfile) -> Profile | None:
    """A profile as NVML answers it; None where it was not read from a board."""
    if p.profile_id is None or p.sms is None:
        return None
    slices = (p.compute_slices, p.memory_slices)
    return Profile(p.profile_id, *slices, p.memory_bytes >> 20, p.sms, NVML_PROFILES[slices])


def _profiles(table: MigTable) -> dict[str, Profile] | None:
    found = {p.name: _as_nvml(p) for p in table.profiles}
    return None if None in found.values() else {k: v for k, v in found.items() if v is not None}


BY_MODEL = {
    model: profiles for model, table in TABLES.items() if (profiles := _profiles(table)) is not None
}


def profiles_for(model: str) -> dict[str, Profile] | None:
    return BY_MODEL.get(model)


def geometry(profiles: dict[str, Profile]) -> tuple[int, int]:
    """(compute, memory) slices of the GPU: those of its largest profile, the whole GPU."""
    full = max(profiles.values(), key=lambda p: (p.compute_slices, p.memory_slices))
    return full.compute_slices, full.memory_slices
