"""MIG profile names and memory slices from a MIG device's own attributes (pure).

NVIDIA's device plugin and GPU operator name MIG devices this way (NVIDIA go-nvlib,
``pkg/nvlib/device/mig_profile.go``: ``getMigMemorySizeGB`` and ``MigProfileInfo.String``); the
exporter uses it when NVML refuses the GPU-instance lookup, so names stay canonical.
"""

from __future__ import annotations

import math

MIB = 1024 * 1024
GIB = 1024 * MIB


# go-nvlib names a profile by its memory in eighths of the GPU's, whatever the GPU's memory
# slices (``getMigMemorySizeGB``: ``fracDenominator = 8``): a naming rule, not a geometry
NAME_FRACTION = 8


def mig_memory_slices(memory_mb: int, total_bytes: int, gpu_memory_slices: int) -> int:
    """Memory slices of a MIG device of ``memory_mb`` on a GPU of ``gpu_memory_slices``: its
    fraction of the GPU's memory rounded up to whole slices (as go-nvlib rounds to eighths)."""
    if total_bytes <= 0:
        return 0
    return math.ceil(memory_mb * MIB * gpu_memory_slices / total_bytes)


def mig_profile_name(gi_slices: int, ci_slices: int, memory_mb: int, total_bytes: int) -> str:
    """The canonical MIG profile name from a MIG device's attributes, as NVIDIA's device plugin
    and GPU operator derive it (go-nvlib getMigMemorySizeGB and MigProfileInfo.String): the
    memory is the device's share of the GPU rounded up to eighths, times the GPU's memory in
    whole GiB (rounded up), e.g. 40192 MiB of an 81559 MiB H100 -> "3g.40gb"; a compute
    instance smaller than its GPU instance is written "1c.3g.40gb"."""
    eighths = mig_memory_slices(memory_mb, total_bytes, NAME_FRACTION)
    total_gb = -(-total_bytes // GIB) if total_bytes > 0 else 0
    # go-nvlib rounds with Go's math.Round: halves away from zero (Python's round() would make
    # the H200's 3g and 4g profiles, 4/8 of 141 GiB = 70.5, "70gb" where NVML says "71gb")
    gb = math.floor(eighths / NAME_FRACTION * total_gb + 0.5) if total_gb else memory_mb // 1024
    if ci_slices == gi_slices:
        return f"{gi_slices}g.{gb}gb"
    return f"{ci_slices}c.{gi_slices}g.{gb}gb"
