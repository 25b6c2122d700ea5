"""The parts of a fleet spec's GPU entry (exporter/simulate/spec.py): its readings as curves,
its counters as events, clock events, NVLink, GPM activity and hangs; the features it can mark
unsupported; and the base of every model of the spec."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from exporter.simulate.curves import CurveField

# Names of NVML features a spec can mark unsupported (the fake answers NOT_SUPPORTED).
Feature = Literal[
    "utilization",
    "encoder_utilization",
    "decoder_utilization",
    "memory_reserved",
    "temperature",
    "memory_temperature",
    "power",
    "power_limit",
    "energy",
    "clocks",
    "pcie_replay",
    "ecc",
    "remapped_rows",
    "xid_events",
    "clock_event_reasons",
    "violations",
    "nvlink",
    "serial",
    "vbios",
    "gpm",
    "processes",
    "process_utilization",
    "mig_geometry",
]

ClockEventReason = Literal[
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
]

NvlinkCounter = Literal["replay", "recovery", "crc_flit", "crc_data"]


class SpecModel(BaseModel):
    """A part of a fleet spec: unknown keys refused, the value frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


NonNegative = Annotated[float, Field(ge=0)]


class Event(SpecModel):
    t: float
    count: Annotated[int, Field(ge=0)] = 1


class Utilization(SpecModel):
    gpu: CurveField = 0.0
    memory: CurveField = 0.0
    encoder: CurveField = 0.0
    decoder: CurveField = 0.0


class Temperatures(SpecModel):
    gpu: CurveField = 35.0
    memory: CurveField = 40.0


class Clocks(SpecModel):
    sm: CurveField = 1980.0
    memory: CurveField = 2619.0


class Ecc(SpecModel):
    corrected_volatile: list[Event] = []
    uncorrected_volatile: list[Event] = []
    corrected_aggregate_base: Annotated[int, Field(ge=0)] = 0
    uncorrected_aggregate_base: Annotated[int, Field(ge=0)] = 0


class RemappedRows(SpecModel):
    correctable: Annotated[int, Field(ge=0)] = 0
    uncorrectable: Annotated[int, Field(ge=0)] = 0
    pending: bool = False
    failure: bool = False


class Xid(SpecModel):
    t: float
    xid: Annotated[int, Field(ge=1)]


class ClockEvent(SpecModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    start: Annotated[float, Field(alias="from")]
    end: Annotated[float, Field(alias="to")]
    reasons: list[ClockEventReason]

    @model_validator(mode="after")
    def _ordered(self) -> ClockEvent:
        if self.end <= self.start:
            raise ValueError("'to' must be after 'from'")
        return self


class NvlinkError(SpecModel):
    t: float
    link: Annotated[int, Field(ge=0, le=17)]
    counter: NvlinkCounter
    count: Annotated[int, Field(ge=0)] = 1


class Nvlink(SpecModel):
    links: Annotated[int, Field(ge=0, le=18)] = 0
    errors: list[NvlinkError] = []
    # data throughput summed over the links, KiB/s: NVML's NVLINK_THROUGHPUT_DATA counters are
    # their exact integrals (KiB since boot)
    rx_kib_per_s: CurveField = 0.0
    tx_kib_per_s: CurveField = 0.0

    @model_validator(mode="after")
    def _links_exist(self) -> Nvlink:
        for e in self.errors:
            if e.link >= self.links:
                raise ValueError(f"error on link {e.link} but the GPU has {self.links} links")
        return self


class Gpm(SpecModel):
    """Profiling activity, as ratios 0..1 (PCIe in bytes/s): what NVML GPM measures between
    two samples. A GPU without ``gpm`` answers that GPM is not supported."""

    gr_engine_active: CurveField = 0.0
    sm_active: CurveField = 0.0
    sm_occupancy: CurveField = 0.0
    tensor_active: CurveField = 0.0
    dram_active: CurveField = 0.0
    pcie_tx_bytes: CurveField = 0.0
    pcie_rx_bytes: CurveField = 0.0


class Hang(SpecModel):
    """From ``from`` on, every NVML call about this GPU blocks, until ``to`` (never, if absent):
    a GPU whose driver stopped answering."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    start: Annotated[float, Field(alias="from")]
    end: Annotated[float | None, Field(alias="to")] = None

    @model_validator(mode="after")
    def _ordered(self) -> Hang:
        if self.end is not None and self.end <= self.start:
            raise ValueError("'to' must be after 'from'")
        return self
