"""One collection's picture of the node's GPUs: plain data, no Prometheus text.

:mod:`exporter.sampler` fills it from NVML; :mod:`exporter.pods.shares` reads it to say who
holds what; :mod:`exporter.render` turns it into series (and owns every label).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.nvml.results import MigGeometry, MigInstance


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """What names a GPU, settled at discovery."""

    index: int
    uuid: str
    model: str
    pci_bus_id: str
    device: str  # nvidia<index>
    serial: str
    vbios: str
    driver_version: str


@dataclass(slots=True)
class MigState:
    instance: MigInstance
    values: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProcessSample:
    pid: int
    used_bytes: int | None
    gi_id: int | None
    sm_utilization: float | None  # 0..1 since the last collection; None where unknown


@dataclass(slots=True)
class GpuState:
    """One GPU at one collection: its readings by series name, and what else was read."""

    identity: GpuIdentity
    up: bool
    down_reason: str = ""  # why it is down: "lost" (off the bus) or "hung" (NVML does not answer)
    values: dict[str, float] = field(default_factory=dict)
    mig_enabled: bool = False
    mig_geometry: MigGeometry | None = None  # a MIG GPU's slices, where NVML tells them
    memory_bytes: int = 0  # the framebuffer's size (from discovery); 0 when unknown
    instances: list[MigState] = field(default_factory=list)
    processes: list[ProcessSample] = field(default_factory=list)

    last_xid: int | None = None  # None: XIDs of this GPU are not listened to
    xid_counts: dict[int, int] = field(default_factory=dict)
    clock_event_reasons: int | None = None
    nvlink: dict[tuple[str, int], int] = field(default_factory=dict)
    nvlink_totals: dict[str, int] = field(default_factory=dict)

    def down(self, reason: str) -> GpuState:
        """This GPU reported down: its identity and XIDs only, no value series."""
        return GpuState(
            self.identity,
            up=False,
            down_reason=reason,
            last_xid=self.last_xid,
            xid_counts=self.xid_counts,
        )
