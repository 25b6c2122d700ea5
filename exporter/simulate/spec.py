"""The fleet spec: a YAML description of one simulated GPU node for the fake NVML.

Times are seconds since the spec's ``epoch`` (an ISO-8601 instant; by default the moment the
simulation starts). Any numeric reading may be given as a curve:

    power_w: 350                                   # constant
    power_w: {points: [[0, 100], [60, 700]]}       # linear between points, held outside
    power_w: {steps: [[0, 100], [60, 700]], period: 120}   # held until the next point; repeats
    power_w: {sine: {min: 200, max: 650, period: 600, phase: 0}}

Counters are lists of events ``{t: 12.5, count: 3}``; a counter's value at t is its base plus
the counts of the events at or before t. See examples/ and docs/simulate.md.
"""

from __future__ import annotations

import math
import uuid
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError, model_validator

from exporter.simulate.curves import Curve, CurveField, Shifted, build_curve
from exporter.simulate.mig_profiles import BY_MODEL, Profile, geometry, profiles_for
from exporter.simulate.pods import PodSpec, resolve_device_id
from exporter.simulate.spec_parts import (
    ClockEvent,
    Clocks,
    Ecc,
    Event,
    Feature,
    Gpm,
    Hang,
    NonNegative,
    Nvlink,
    RemappedRows,
    SpecModel,
    Temperatures,
    Utilization,
    Xid,
)

MIB = 1024 * 1024


class SpecError(ValueError):
    """A fleet spec that cannot be used; the message names the file, the place and the reason."""


# NVML queries a spec can refuse with NO_PERMISSION: "gpu_instances" is the GPU-instance
# lookup, which needs the MIG monitor capability
Denied = Literal["gpu_instances", "placements"]


class ProcessSpec(SpecModel):
    """A compute process on a GPU (inside a MIG instance when ``gi_id`` is set)."""

    pid: Annotated[int, Field(ge=1)]
    gi_id: Annotated[int, Field(ge=1, le=14)] | None = None
    memory_used_mib: CurveField = 0.0
    sm_util: CurveField = 0.0  # per-process SM utilisation, percent
    started_at: float | None = None
    ended_at: float | None = None


class MigInstanceSpec(SpecModel):
    """One MIG GPU instance (with one compute instance spanning it)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    profile: str
    gi_id: Annotated[int, Field(ge=1, le=14)] | None = None
    memory_used_mib: CurveField = 0.0
    gpm: Gpm = Gpm()
    created_at: float | None = None
    destroyed_at: float | None = None


class GpuSpec(SpecModel):
    count: Annotated[int, Field(ge=1, le=1024)] = 1
    model: Annotated[str, Field(min_length=1)]
    uuid: str | None = None
    pci_bus_id: str | None = None
    serial: str | None = None
    vbios: str = "96.00.99.00.01"
    memory_total_mib: Annotated[int, Field(gt=0)]
    memory_reserved_mib: Annotated[int, Field(ge=0)] = 0
    memory_used_mib: CurveField = 0.0
    utilization: Utilization = Utilization()
    power_w: CurveField = 70.0
    power_limit_w: Annotated[float, Field(gt=0)] = 700.0
    temperature_c: Temperatures = Temperatures()
    clocks_mhz: Clocks = Clocks()
    energy_mj_at_start: Annotated[int, Field(ge=0)] = 0
    pcie_replays: list[Event] = []
    ecc: Ecc = Ecc()
    remapped_rows: RemappedRows = RemappedRows()
    xid: list[Xid] = []
    clock_events: list[ClockEvent] = []
    nvlink: Nvlink = Nvlink()
    lost_at: float | None = None
    hangs: list[Hang] = []
    unsupported: list[Feature] = []
    denied: list[Denied] = []
    phase_step_s: float = 0.0
    gpm: Gpm | None = None
    mig: list[MigInstanceSpec] | None = None
    mig_enabled_at: float | None = None  # MIG mode off before this (`nvidia-smi -mig 1` then)
    processes: list[ProcessSpec] = []
    time_slicing_replicas: Annotated[int, Field(ge=2, le=64)] | None = None

    @model_validator(mode="after")
    def _mig_layout_fits(self) -> GpuSpec:
        if self.mig is None:
            if self.mig_enabled_at is not None:
                raise ValueError("mig_enabled_at needs a mig layout")
            return self
        profiles = profiles_for(self.model)
        if profiles is None:
            raise ValueError(f"{self.model!r} has no MIG profiles (known: {sorted(BY_MODEL)})")
        for i, inst in enumerate(self.mig):
            if inst.profile not in profiles:
                raise ValueError(
                    f"mig[{i}]: profile {inst.profile!r} does not exist on {self.model} "
                    f"(choose from {', '.join(profiles)})"
                )
        # at every moment an instance appears, the live ones must fit in the GPU's slices
        gpu_compute, gpu_memory = geometry(profiles)
        moments = {0.0} | {i.created_at for i in self.mig if i.created_at is not None}
        for t in sorted(moments):
            live = [i for i in self.mig if _alive(i, t)]
            compute = sum(profiles[i.profile].compute_slices for i in live)
            memory = sum(profiles[i.profile].memory_slices for i in live)
            if compute > gpu_compute or memory > gpu_memory:
                raise ValueError(
                    f"at t={t:g} the MIG instances need {compute}/{gpu_compute} compute and "
                    f"{memory}/{gpu_memory} memory slices: they do not fit"
                )
        ids = [i.gi_id for i in self.mig if i.gi_id is not None]
        if len(ids) != len(set(ids)):
            raise ValueError("MIG gi_id values must be unique")
        return self

    @model_validator(mode="after")
    def _single_identity(self) -> GpuSpec:
        if self.count > 1 and (self.uuid or self.pci_bus_id or self.serial):
            raise ValueError("uuid, pci_bus_id and serial can only be given when count is 1")
        if self.memory_reserved_mib >= self.memory_total_mib:
            raise ValueError("memory_reserved_mib must be below memory_total_mib")
        return self


class FleetSpec(SpecModel):
    hostname: Annotated[str, Field(min_length=1)] = "sim-node"
    driver_version: str = "550.90.07"
    epoch: datetime | None = None
    nvml_init_fails_until: NonNegative = 0.0
    gpus: list[GpuSpec] = []
    pods: list[PodSpec] = []
    # memory-profile vGPU resources served by the node: resource -> profile MiB
    vgpu_profiles: dict[str, Annotated[int, Field(gt=0)]] = {}

    @model_validator(mode="after")
    def _pods_reference_real_devices(self) -> FleetSpec:
        gpus = expand(self)
        uuids = [g.uuid for g in gpus]
        migs = {(g.index, m.gi_id): m.uuid for g in gpus for m in g.migs}
        for p, pod in enumerate(self.pods):
            for c, container in enumerate(pod.containers):
                for d, claim in enumerate(container.devices):
                    for ref in claim.ids:
                        try:
                            resolve_device_id(ref, uuids, migs)
                        except ValueError as exc:
                            raise ValueError(
                                f"pods[{p}].containers[{c}].devices[{d}]: {exc}"
                            ) from None
                for h, hami in enumerate(container.hami):
                    if int(hami.gpu[3:]) >= len(gpus):
                        raise ValueError(f"pods[{p}].containers[{c}].hami[{h}]: no {hami.gpu}")
        return self


def _alive(inst: MigInstanceSpec, t: float) -> bool:
    created = inst.created_at if inst.created_at is not None else float("-inf")
    destroyed = inst.destroyed_at if inst.destroyed_at is not None else float("inf")
    return created <= t < destroyed


class SimGpm:
    def __init__(self, spec: Gpm, curve: Any) -> None:
        self.gr_engine_active = curve(spec.gr_engine_active)
        self.sm_active = curve(spec.sm_active)
        self.sm_occupancy = curve(spec.sm_occupancy)
        self.tensor_active = curve(spec.tensor_active)
        self.dram_active = curve(spec.dram_active)
        self.pcie_tx_bytes = curve(spec.pcie_tx_bytes)
        self.pcie_rx_bytes = curve(spec.pcie_rx_bytes)


class SimProcess:
    def __init__(self, spec: ProcessSpec, curve: Any) -> None:
        self.spec = spec
        self.memory_used_mib = curve(spec.memory_used_mib)
        self.sm_util = curve(spec.sm_util)

    def alive(self, t: float) -> bool:
        start = self.spec.started_at if self.spec.started_at is not None else float("-inf")
        end = self.spec.ended_at if self.spec.ended_at is not None else float("inf")
        return start <= t < end


class SimMig:
    """One simulated MIG instance of a SimGpu."""

    def __init__(
        self,
        spec: MigInstanceSpec,
        gi_id: int,
        profile: Profile,
        parent_uuid: str,
        placement: int,
        curve: Any,
    ) -> None:
        self.spec = spec
        self.gi_id = gi_id
        self.profile_name = spec.profile
        self.profile = profile
        self.placement_start = placement
        self.uuid = "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"{parent_uuid}/gi/{gi_id}"))
        self.memory_used_mib = curve(spec.memory_used_mib)
        self.gpm = SimGpm(spec.gpm, curve)

    def alive(self, t: float) -> bool:
        return _alive(self.spec, t)


# Typical PCI buses of an 8-GPU HGX board; more GPUs go to further PCI domains.
_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


class SimGpu:
    """One simulated GPU with its curves built and its identity settled."""

    def __init__(self, spec: GpuSpec, index: int, replica: int, hostname: str) -> None:
        self.spec = spec
        self.index = index
        offset = replica * spec.phase_step_s

        def curve(field: CurveField) -> Curve:
            built = build_curve(field)
            return Shifted(built, offset) if offset else built

        self.uuid = spec.uuid or "GPU-" + str(
            uuid.uuid5(uuid.NAMESPACE_URL, f"gpu-finops-sim/{hostname}/{index}")
        )
        self.pci_bus_id = spec.pci_bus_id or f"{index // 8:08X}:{_BUSES[index % 8]:02X}:00.0"
        self.serial = spec.serial or f"1654923{index:06d}"
        self.unsupported = frozenset(spec.unsupported)
        self.memory_used_mib = curve(spec.memory_used_mib)
        self.util_gpu = curve(spec.utilization.gpu)
        self.util_memory = curve(spec.utilization.memory)
        self.util_encoder = curve(spec.utilization.encoder)
        self.util_decoder = curve(spec.utilization.decoder)
        self.power_w = curve(spec.power_w)
        self.temp_gpu = curve(spec.temperature_c.gpu)
        self.temp_memory = curve(spec.temperature_c.memory)
        self.clock_sm = curve(spec.clocks_mhz.sm)
        self.clock_memory = curve(spec.clocks_mhz.memory)
        self.gpm = SimGpm(spec.gpm, curve) if spec.gpm is not None else None
        self.migs: list[SimMig] = []
        self.mig_geometry: tuple[int, int] | None = None  # (compute, memory) slices
        if spec.mig is not None:
            profiles = profiles_for(spec.model) or {}
            self.mig_geometry = geometry(profiles)
            used_ids = {i.gi_id for i in spec.mig if i.gi_id is not None}
            free_ids = (n for n in range(1, 15) if n not in used_ids)
            placement = 0
            for inst in spec.mig:
                gi_id = inst.gi_id if inst.gi_id is not None else next(free_ids)
                profile = profiles[inst.profile]
                self.migs.append(SimMig(inst, gi_id, profile, self.uuid, placement, curve))
                placement = (placement + profile.memory_slices) % self.mig_geometry[1]
        self.processes = [SimProcess(p, curve) for p in spec.processes]
        self.nvlink_rx = curve(spec.nvlink.rx_kib_per_s)
        self.nvlink_tx = curve(spec.nvlink.tx_kib_per_s)
        xids = [(x.t, x.xid) for x in spec.xid]
        if spec.lost_at is not None:
            xids.append((spec.lost_at, 79))  # "GPU has fallen off the bus"
        self.xids = sorted(xids)

    def mig_on(self, t: float) -> bool:
        at = self.spec.mig_enabled_at
        return self.spec.mig is not None and (at is None or t >= at)

    def live_migs(self, t: float) -> list[SimMig]:
        """The MIG instances that exist at t (none while MIG mode is off)."""
        return [m for m in self.migs if m.alive(t)] if self.mig_on(t) else []

    def hang_ends(self, t: float) -> float | None:
        """While a hang holds at t: when it ends (inf: never); None when none holds."""
        for hang in self.spec.hangs:
            end = math.inf if hang.end is None else hang.end
            if hang.start <= t < end:
                return end
        return None


def load(path: str | Path) -> FleetSpec:
    """Read and validate a fleet spec; :class:`SpecError` names the file, place and reason."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" line {where.line + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise SpecError(f"{path}:{at}: {problem}") from None
    return parse(raw, str(path))


def parse(raw: Any, source: str = "<spec>") -> FleetSpec:
    if not isinstance(raw, dict):
        raise SpecError(f"{source}: the top level must be a mapping")
    try:
        return FleetSpec.model_validate(raw)
    except ValidationError as exc:
        # A curve is "a number or a mapping": pydantic reports both branches of that union.
        # When the input was a mapping, the number branch's complaint is noise; drop it.
        found: dict[str, str] = {}
        for err in exc.errors(include_url=False):
            where = _where(err["loc"])
            if err["type"] in {"float_type", "float_parsing"} and isinstance(err["input"], dict):
                continue
            found.setdefault(where, err["msg"])
        where, msg = next(iter(found.items()))
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise SpecError(f"{source}: {where}: {msg}{more}") from None


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in {"float", "CurveSpec", "function-after[_one_shape(), CurveSpec]"}:
            continue  # pydantic's name for a union member, not a place in the file
        else:  # a key of the file: at most 64 characters of it quoted
            name = str(part)[:64]
            out += f".{name}" if out else name
    return out or "(top level)"


def expand(spec: FleetSpec) -> list[SimGpu]:
    gpus: list[SimGpu] = []
    for entry in spec.gpus:
        for replica in range(entry.count):
            gpus.append(SimGpu(entry, len(gpus), replica, spec.hostname))
    return gpus
