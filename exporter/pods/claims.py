"""Who holds what, as the kubelet says it: containers, the device ids they were allocated, and
the time-slice replicas each shared device advertises."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True, order=True)
class Holder:
    """A container that holds GPU devices."""

    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, slots=True)
class Claim:
    """One device id a container was allocated: ``base`` is a GPU-/MIG- UUID, ``replica`` the
    time-slice replica number when the id had a ``::N`` suffix."""

    holder: Holder
    resource: str
    base: str
    replica: int | None = None


@dataclass(frozen=True, slots=True)
class Assignments:
    """One answer of the kubelet: every device id held by a container on this node, and how
    many time-slice replicas each shared device advertises."""

    claims: tuple[Claim, ...]
    replicas: dict[str, int]


class AssignmentSource(Protocol):
    def assignments(self) -> Assignments | None:
        """The current assignments, or None when the source cannot answer (it counts why)."""
        ...


PidOwner = Callable[[int], "Holder | None"]
