"""Who holds what, as the kubelet says it: containers, the device ids they were allocated (by a
device plugin, or through a DRA resource claim), the time-slice replicas each shared device
advertises, and the fractional allocations HAMi and memory-profile vGPU plugins make."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True, order=True)
class Holder:
    """A container that holds GPU devices."""

    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, slots=True, order=True)
class ClaimRef:
    """A DRA ResourceClaim (``resource.k8s.io``) by namespace and name."""

    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Claim:
    """One device id a container was allocated: ``base`` is a GPU-/MIG- UUID, ``replica`` the
    time-slice replica number when the id had a ``::N`` suffix.

    ``claim``: the DRA resource claim the device was allocated through (``resource`` is then
    the DRA driver's name). ``memory_mib`` set: a fractional allocation of the GPU (HAMi, or a
    memory-profile vGPU) of that much device memory, with ``cores`` % of its SMs (None: no
    compute limit)."""

    holder: Holder
    resource: str
    base: str
    replica: int | None = None
    claim: ClaimRef | None = None
    cores: int | None = None
    memory_mib: int | None = None


@dataclass(frozen=True, slots=True)
class Assignments:
    """One answer of the kubelet: every device id held by a container on this node, and how
    many time-slice replicas each shared device advertises."""

    claims: tuple[Claim, ...]
    replicas: dict[str, int]
    # DRA devices of this answer by outcome: "gpu" (a GPU driver's device found in a
    # ResourceSlice), "other_driver" (not a GPU driver: ignored), "not_in_slice" (in no
    # ResourceSlice of this node: counted, never guessed), "no_uuid" (in a slice without a
    # uuid attribute, or a parentUUID and profile to match a MIG partition by)
    dra_devices: dict[str, int] = field(default_factory=dict)


class AssignmentSource(Protocol):
    # why the source could not answer last time (for /health: degraded), None when it did
    problem: str | None

    def assignments(self) -> Assignments | None:
        """The current assignments, or None when the source cannot answer (it counts why)."""
        ...


PidOwner = Callable[[int], "Holder | None"]
