"""What a read through the NVML boundary gives: a plain value or a typed :class:`Failure`,
and the device, event-set, MIG-instance and process records it hands out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, Union

from exporter.nvml.library import lib

T = TypeVar("T")


class Failure:
    """Why an NVML read gave no value."""

    __slots__ = ("code", "function")
    kind: ClassVar[str] = "other"

    def __init__(self, code: int, function: str) -> None:
        self.code = code
        self.function = function

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.function}: {error_text(self.code)})"


class NotSupported(Failure):
    """The device, driver or bindings do not support this query. The value is simply absent."""

    kind = "not_supported"


class GpuLost(Failure):
    """The GPU fell off the bus or needs a reset."""

    kind = "gpu_lost"


class NoPermission(Failure):
    """The caller lacks a privilege the query needs (e.g. the MIG monitor capability for GPU
    instance lookups)."""

    kind = "no_permission"


class Failed(Failure):
    """Any other NVML error (timeouts, unknown)."""

    kind = "other"


# A read gives either its value or a Failure.
ReadResult = Union[T, Failure]  # noqa: UP007  (a generic alias; `T | Failure` cannot be subscripted)

_NOT_SUPPORTED_CODES = frozenset({lib.NVML_ERROR_NOT_SUPPORTED, lib.NVML_ERROR_FUNCTION_NOT_FOUND})
_LOST_CODES = frozenset(
    {
        lib.NVML_ERROR_GPU_IS_LOST,
        lib.NVML_ERROR_RESET_REQUIRED,
        getattr(lib, "NVML_ERROR_GPU_NOT_FOUND", 28),
    }
)


def error_text(code: int) -> str:
    text = lib.NVMLError._errcode_to_string.get(code)
    return text if text is not None else f"NVML error {code}"


def classify(code: int, function: str) -> Failure:
    if code in _NOT_SUPPORTED_CODES:
        return NotSupported(code, function)
    if code in _LOST_CODES:
        return GpuLost(code, function)
    if code == lib.NVML_ERROR_NO_PERMISSION:
        return NoPermission(code, function)
    return Failed(code, function)


def text(value: Any) -> str:
    """NVML strings arrive as bytes or str depending on the bindings' version."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


class NvmlInitError(Exception):
    """NVML could not be initialised (no driver, no library, no permission)."""

    def __init__(self, failure: Failure, detail: str) -> None:
        super().__init__(detail)
        self.failure = failure


@dataclass(frozen=True, slots=True)
class Device:
    """A device handle plus the name used when logging about it."""

    index: int
    handle: Any


@dataclass(frozen=True, slots=True)
class EventSet:
    handle: Any


@dataclass(frozen=True, slots=True)
class MigGeometry:
    """A MIG-capable GPU's slices: 7 compute and 8 memory on an A100 or H100, 4 and 4 on an
    A30 — what its full-GPU GPU-instance profile spans, as NVML reports it."""

    compute_slices: int
    memory_slices: int


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG device (a GPU instance with its compute instance) of a physical GPU."""

    device: Device  # the MIG device handle, with the parent's index
    uuid: str
    gi_id: int
    ci_id: int
    profile: str  # e.g. "1g.10gb"
    compute_slices: int  # of the GPU's (MigGeometry)
    memory_slices: int
    # why the GPU-instance lookup failed, if it did (the profile is then derived from the MIG
    # device's own attributes); not part of the instance's identity
    lookup_failure: Failure | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    used_bytes: int | None  # None where the driver cannot tell
    gi_id: int | None  # the MIG GPU instance it runs in, None outside MIG


@dataclass(frozen=True, slots=True)
class NvlinkReading:
    """One field-values read of a GPU's NVLink counters, summed over its links."""

    errors: dict[str, int]  # error counter name -> count (the counters the GPU supports)
    data_kib: int | None  # NVLink data received + transmitted since boot, KiB; None: unsupported
    stamp_us: int  # NVML's timestamp of the throughput values (us since the epoch)
