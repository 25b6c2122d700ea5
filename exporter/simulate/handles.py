"""The handles the fake NVML hands out where real NVML hands out opaque pointers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FakeHandle:
    """A whole GPU."""

    index: int


@dataclass(frozen=True, slots=True)
class FakeMigHandle:
    """A MIG device: a GPU instance of a GPU."""

    index: int  # the parent GPU
    gi_id: int


@dataclass(frozen=True, slots=True)
class FakeGpuInstance:
    index: int
    gi_id: int
