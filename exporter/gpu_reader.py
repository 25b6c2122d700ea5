"""One GPU read through the NVML boundary: its discovery (identity, XID registration, NVLink
links) and, each collection, every value into a :class:`~exporter.snapshot.GpuState`.

A :class:`GpuReader` is used by one thread at a time (its worker, :mod:`exporter.workers`). It
keeps what a GPU needs between collections: the previous GPM samples, the process-samples
cursor, the previous NVLink data counter and whether MIG mode is on (read again every
collection, so ``nvidia-smi -mig 1`` is noticed without a restart). A read that answers
"lost" reports the GPU down; a field the GPU does not support is left out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from exporter.catalogue import VIOLATION_SERIES
from exporter.nvml import library as nv
from exporter.nvml.boundary import Nvml, handle_key
from exporter.nvml.results import (
    Device,
    Failed,
    Failure,
    GpuLost,
    MigGeometry,
    MigInstance,
    NoPermission,
    NvlinkReading,
    ReadResult,
    T,
)
from exporter.snapshot import GpuIdentity, GpuState, MigState, ProcessSample
from exporter.xids import XidListener

log = logging.getLogger(__name__)

MIB = 1024 * 1024
NVLINK_BANDWIDTH = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"


class _Lost(Exception):
    pass


class _Ok(Protocol):
    def __call__(self, outcome: ReadResult[T]) -> T | None: ...


@dataclass(slots=True)
class Read:
    """One read of a GPU: its state, and the NVML error kinds it met (counted by the caller)."""

    state: GpuState
    errors: list[tuple[str, str]] = field(default_factory=list)  # (source, kind)


class GpuReader:
    def __init__(
        self,
        nvml: Nvml,
        index: int,
        driver_version: str,
        collectors: Iterable[str],
        xids: XidListener | None,
    ) -> None:
        self._nvml = nvml
        self._on = frozenset(collectors)
        self._xids = xids
        self.index = index
        self._driver_version = driver_version
        self.identity = self._identity("", "", "", "", "")
        self._device: Device | None = None
        self._discovered = False
        self._total_bytes = 0
        self._nvlinks: tuple[int, ...] = ()
        self._mig_enabled = False
        self._mig_geometry: MigGeometry | None = None  # read once NVML tells it
        self._gpm = False
        # the previous GPM sample, of the whole GPU (key None) or of each MIG GPU instance
        self._gpm_prev: dict[int | None, object] = {}
        self._process_samples_since = 0  # NVML timestamp (us) of the newest process sample
        self._nvlink_prev: tuple[int, int] | None = None  # (data KiB, NVML timestamp us)

    def _identity(self, uuid: str, model: str, pci: str, serial: str, vbios: str) -> GpuIdentity:
        return GpuIdentity(
            self.index, uuid, model, pci, f"nvidia{self.index}", serial, vbios, self._driver_version
        )

    # -- discovery --------------------------------------------------------------------------

    def _discover(self, dev: Device) -> None:
        """Identity, XID registration, GPM support and NVLink links; again after a loss, as
        a reset GPU may come back with a new handle. What cannot be read keeps its value."""
        known = self.identity

        def txt(value: ReadResult[str], before: str) -> str:
            return before if isinstance(value, Failure) else value

        nvml = self._nvml
        self.identity = self._identity(
            txt(nvml.uuid(dev), known.uuid),
            txt(nvml.name(dev), known.model),
            txt(nvml.pci_bus_id(dev), known.pci_bus_id),
            txt(nvml.serial(dev), known.serial),
            txt(nvml.vbios_version(dev), known.vbios),
        )
        memory = nvml.memory(dev)
        self._total_bytes = 0 if isinstance(memory, Failure) else memory[0]
        self._gpm = "profiling" in self._on and nvml.gpm_supported(dev)
        if self._xids is not None:
            self._xids.register(dev, handle_key(dev.handle))
        if "nvlink_links" in self._on:
            links = []
            for link in range(nv.NVLINK_MAX_LINKS):
                active = nvml.nvlink_active(dev, link)
                if isinstance(active, Failure):
                    break
                if active:
                    links.append(link)
            self._nvlinks = tuple(links)
        self._mig_geometry = None  # read again: a reset GPU may be another board
        self._discovered = True
        log.info("GPU %d: %s %s", self.index, self.identity.model, self.identity.uuid)

    # -- one read ---------------------------------------------------------------------------

    def read(self) -> Read:
        errors: list[tuple[str, str]] = []
        if self._device is None:  # not found yet, or lost since: try to get it back
            dev = self._nvml.device(self.index)
            if isinstance(dev, Failure):
                return self._down(dev, errors)
            self._device = dev
        try:
            if not self._discovered:
                self._discover(self._device)
            state = self._read(self._device, errors)
        except _Lost:
            log.warning("GPU %d (%s) is lost", self.index, self.identity.uuid)
            self._device = None
            self._discovered = False  # discovered again when it is back
            self._forget_gpm()
            self._nvlink_prev = None
            return self._down(GpuLost(nv.lib.NVML_ERROR_GPU_IS_LOST, "read"), errors)
        if self._xids is not None:
            self._xids.answered(self.index)
        return Read(state, errors)

    def _down(self, failure: Failure, errors: list[tuple[str, str]]) -> Read:
        lost = isinstance(failure, GpuLost)
        errors.append(("nvml", "gpu_lost" if lost else "query"))
        if lost and self._xids is not None:
            self._xids.fell_off_bus(self.index)
        return Read(GpuState(self.identity, up=False, down_reason="lost"), errors)

    def _read(self, dev: Device, errors: list[tuple[str, str]]) -> GpuState:
        """Every value of the GPU this collection reads (``errors``: the NVML error kinds met;
        raises :class:`_Lost` where the GPU is lost)."""
        nvml, on = self._nvml, self._on
        values: dict[str, float] = {}

        def ok(outcome: ReadResult[T]) -> T | None:
            if isinstance(outcome, Failure):
                if isinstance(outcome, GpuLost):
                    raise _Lost
                if isinstance(outcome, Failed):
                    errors.append(("nvml", "query"))
                elif isinstance(outcome, NoPermission):
                    errors.append(("nvml", "no_permission"))
                return None
            return outcome

        # MIG mode is read every collection: `nvidia-smi -mig 1` needs no exporter restart
        enabled = ok(nvml.mig_enabled(dev)) is True
        if enabled != self._mig_enabled:
            log.info("GPU %d: MIG mode is %s", self.index, "on" if enabled else "off")
            self._mig_enabled = enabled
            self._forget_gpm()  # whole-GPU and per-instance samples do not mix
        state = GpuState(
            self.identity,
            up=True,
            values=values,
            mig_enabled=self._mig_enabled,
            memory_bytes=self._total_bytes,
        )
        if "utilization" in on:
            self._read_utilization(dev, values, ok)
        if self._mig_enabled:  # memory and activity belong to the instances
            self._read_mig(dev, state, errors, ok)
        else:
            if "memory" in on:
                self._read_memory(dev, values, ok)
            if self._gpm:
                values.update(self._gpm_values(dev, None, ok))
        self._read_sensors(dev, values, ok)
        self._read_faults(dev, state, ok)
        if "processes" in on:
            self._read_processes(dev, state, ok)
        self._read_nvlink(dev, state, ok)
        return state

    def _read_utilization(self, dev: Device, values: dict[str, float], ok: _Ok) -> None:
        """The GPU's, its memory copy engines', its encoders' and decoders' utilisation."""
        nvml = self._nvml
        util = ok(nvml.utilization(dev))
        if util is not None:
            values["DCGM_FI_DEV_GPU_UTIL"], values["DCGM_FI_DEV_MEM_COPY_UTIL"] = util
        if (enc := ok(nvml.encoder_utilization(dev))) is not None:
            values["DCGM_FI_DEV_ENC_UTIL"] = enc
        if (dec := ok(nvml.decoder_utilization(dev))) is not None:
            values["DCGM_FI_DEV_DEC_UTIL"] = dec

    def _read_mig(
        self, dev: Device, state: GpuState, errors: list[tuple[str, str]], ok: _Ok
    ) -> None:
        """A GPU in MIG mode: its geometry, and its instances (their memory and activity);
        the GPM samples of instances gone freed."""
        nvml = self._nvml
        geometry = self._geometry(dev, errors)
        state.mig_geometry = geometry
        found = (
            ok(nvml.mig_instances(dev, self._total_bytes, geometry)) if "mig" in self._on else None
        )
        if found is not None:
            if any(isinstance(i.lookup_failure, NoPermission) for i in found):
                errors.append(("nvml", "no_permission"))
            state.instances = [self._read_instance(dev, i, ok) for i in found]
            live = {i.gi_id for i in found}
            for gi in [g for g in self._gpm_prev if g is not None and g not in live]:
                nvml.gpm_free(self._gpm_prev.pop(gi))

    def _read_sensors(self, dev: Device, values: dict[str, float], ok: _Ok) -> None:
        """Temperatures, power and energy, clocks."""
        nvml, on = self._nvml, self._on
        if "temperature" in on:
            if (temp := ok(nvml.temperature(dev))) is not None:
                values["DCGM_FI_DEV_GPU_TEMP"] = temp
            if (mtemp := ok(nvml.memory_temperature(dev))) is not None:
                values["DCGM_FI_DEV_MEMORY_TEMP"] = mtemp
        if "power" in on:
            if (mw := ok(nvml.power_usage_mw(dev))) is not None:
                values["DCGM_FI_DEV_POWER_USAGE"] = mw / 1000
            if (limit := ok(nvml.power_limit_mw(dev))) is not None:
                values["DCGM_FI_DEV_ENFORCED_POWER_LIMIT"] = limit / 1000
            if (mj := ok(nvml.total_energy_mj(dev))) is not None:
                values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] = mj
        if "clocks" in on:
            if (sm := ok(nvml.clock_mhz(dev, nv.CLOCK_SM))) is not None:
                values["DCGM_FI_DEV_SM_CLOCK"] = sm
            if (memclk := ok(nvml.clock_mhz(dev, nv.CLOCK_MEM))) is not None:
                values["DCGM_FI_DEV_MEM_CLOCK"] = memclk

    def _read_faults(self, dev: Device, state: GpuState, ok: _Ok) -> None:
        """PCIe replays, ECC errors, remapped rows, clock events and violation time."""
        nvml, on, values = self._nvml, self._on, state.values
        if "pcie" in on and (replays := ok(nvml.pcie_replay_counter(dev))) is not None:
            values["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] = replays
        if "ecc" in on:
            for name, err, counter in _ECC_READS:
                count = ok(nvml.total_ecc_errors(dev, err, counter))
                if count is None:
                    break  # ECC off or unsupported: the others will say the same
                values[name] = count
        if "remapped_rows" in on and (rows := ok(nvml.remapped_rows(dev))) is not None:
            (
                values["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"],
                values["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"],
                values["DCGM_FI_DEV_ROW_REMAP_PENDING"],
                values["DCGM_FI_DEV_ROW_REMAP_FAILURE"],
            ) = rows
        if "clock_events" in on:
            reasons = ok(nvml.clock_event_reasons(dev))
            if reasons is not None:
                values["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] = reasons
                state.clock_event_reasons = reasons
            for policy, series in _VIOLATION_READS:
                ns = ok(nvml.violation_ns(dev, policy))
                if ns is not None:
                    values[series] = ns  # DCGM 4.x publishes violation time in ns

    def _read_nvlink(self, dev: Device, state: GpuState, ok: _Ok) -> None:
        """NVLink: the error totals and data bandwidth, and each active link's error counters."""
        nvml, on = self._nvml, self._on
        if "nvlink" in on and (reading := ok(nvml.nvlink_counters(dev))) is not None:
            state.nvlink_totals = reading.errors
            mb_per_s = self._nvlink_bandwidth(reading)
            if mb_per_s is not None:
                state.values[NVLINK_BANDWIDTH] = mb_per_s
        if "nvlink_links" in on:
            for link in self._nvlinks:
                for counter_name, counter in nv.NVLINK_COUNTERS.items():
                    n = ok(nvml.nvlink_error_counter(dev, link, counter))
                    if n is not None:
                        state.nvlink[(counter_name, link)] = n

    def _nvlink_bandwidth(self, reading: NvlinkReading) -> float | None:
        """DCGM's DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL: the NVLink data counters' growth since
        the previous read, per second, / 1000 (DCGM 4.6 ReadAndCacheNvLinkBandwidth: KiB/s
        / 1000, published as MB/s). None for the first read, or when the counter went back."""
        if reading.data_kib is None:
            return None
        previous, self._nvlink_prev = self._nvlink_prev, (reading.data_kib, reading.stamp_us)
        if previous is None:
            return None
        kib, stamp = previous
        seconds = (reading.stamp_us - stamp) / 1e6
        if seconds <= 0 or reading.data_kib < kib:
            return None
        return (reading.data_kib - kib) / seconds / 1000

    def _read_memory(self, dev: Device, values: dict[str, float], ok: _Ok) -> None:
        mem = ok(self._nvml.memory(dev))
        if mem is not None:
            total, used, free, reserved = mem
            values["DCGM_FI_DEV_FB_FREE"] = free // MIB
            values["DCGM_FI_DEV_FB_USED"] = used // MIB
            if reserved is not None:
                values["DCGM_FI_DEV_FB_RESERVED"] = reserved // MIB
            values["DCGM_FI_DEV_FB_TOTAL"] = total // MIB

    def _read_processes(self, dev: Device, state: GpuState, ok: _Ok) -> None:
        procs = ok(self._nvml.running_processes(dev))
        if not procs:
            return
        util: dict[int, float] | None = None
        if not self._mig_enabled:  # NVML has no per-process samples inside MIG instances
            answer = ok(self._nvml.process_sm_utilization(dev, self._process_samples_since))
            if answer is not None:
                util, self._process_samples_since = answer
        state.processes = [
            ProcessSample(
                p.pid, p.used_bytes, p.gi_id, None if util is None else util.get(p.pid, 0.0)
            )
            for p in procs
        ]

    def _geometry(self, dev: Device, errors: list[tuple[str, str]]) -> MigGeometry | None:
        """The GPU's MIG geometry, read until NVML tells it (then kept); a GPU whose geometry
        NVML will not tell is counted every collection (``kind="mig_geometry"``) and its MIG
        instances get no shares: the cost service's per-model table decides, never a guess."""
        if self._mig_geometry is None:
            found = self._nvml.mig_geometry(dev)
            if isinstance(found, GpuLost):
                raise _Lost
            if isinstance(found, Failure):
                errors.append(("nvml", "mig_geometry"))
                return None
            self._mig_geometry = found
        return self._mig_geometry

    def _read_instance(self, dev: Device, inst: MigInstance, ok: _Ok) -> MigState:
        state = MigState(inst)
        if "memory" in self._on:
            self._read_memory(inst.device, state.values, ok)
            state.values.pop("DCGM_FI_DEV_FB_RESERVED", None)
        if self._gpm:
            state.values.update(self._gpm_values(dev, inst.gi_id, ok))
        return state

    def _gpm_values(self, dev: Device, gi_id: int | None, ok: _Ok) -> dict[str, float]:
        """Profiling values between the previous collection's GPM sample and a new one."""
        sample = ok(self._nvml.gpm_sample(dev, gi_id))
        if sample is None:
            return {}
        previous = self._gpm_prev.pop(gi_id, None)
        self._gpm_prev[gi_id] = sample
        if previous is None:  # the first sample: a rate needs two
            return {}
        values = ok(self._nvml.gpm_metrics(dev, previous, sample))
        self._nvml.gpm_free(previous)
        return values or {}

    def _forget_gpm(self) -> None:
        for sample in self._gpm_prev.values():
            self._nvml.gpm_free(sample)
        self._gpm_prev.clear()

    def close(self) -> None:
        """Free what NVML handed out (GPM samples)."""
        self._forget_gpm()


_ECC_READS = (
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", nv.ECC_CORRECTED, nv.ECC_VOLATILE),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", nv.ECC_UNCORRECTED, nv.ECC_VOLATILE),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", nv.ECC_CORRECTED, nv.ECC_AGGREGATE),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", nv.ECC_UNCORRECTED, nv.ECC_AGGREGATE),
)


_VIOLATION_READS = tuple((nv.PERF_POLICIES[k], name) for k, name in VIOLATION_SERIES.items())
