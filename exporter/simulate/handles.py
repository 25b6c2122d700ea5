"""The handles the fake NVML hands out where real NVML hands out opaque pointers, and
:class:`FakeParts`, what the fake's mixins (MIG and GPM, events) rely on FakeNvml for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exporter.simulate.spec import SimGpu


class FakeParts:
    """Declared here, provided by FakeNvml."""

    gpus: list[SimGpu]

    def _gpu(self, handle: Any, feature: str | None = None) -> tuple[SimGpu, float]:
        raise NotImplementedError

    def _count(self) -> None:
        raise NotImplementedError

    def sim_time(self) -> float:
        raise NotImplementedError


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
