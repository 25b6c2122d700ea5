"""One snapshot of every GPU per collection (:mod:`exporter.snapshot`), read through the NVML
boundary.

Discovery (after NVML init, and again when the device count changes) settles each GPU's
identity; a collection then only reads values. A GPU that answers "lost" is reported down and
its values are left out; a field a GPU does not support is simply absent. Nothing here runs on
the scrape path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from exporter.catalogue import VIOLATION_SERIES
from exporter.nvml import library as nv
from exporter.nvml.boundary import Nvml
from exporter.nvml.results import (
    Device,
    EventSet,
    Failed,
    Failure,
    GpuLost,
    MigInstance,
    Outcome,
    T,
)
from exporter.snapshot import GpuIdentity, GpuState, MigState, ProcessSample

log = logging.getLogger(__name__)

MIB = 1024 * 1024


@dataclass(slots=True)
class _Gpu:
    """What the sampler keeps about one GPU between collections."""

    identity: GpuIdentity
    device: Device | None
    events: EventSet | None = None
    nvlinks: tuple[int, ...] = ()
    last_xid: int = 0
    xid_counts: dict[int, int] = field(default_factory=dict)
    mig_enabled: bool = False
    gpm: bool = False
    # the previous GPM sample, of the whole GPU (key None) or of each MIG GPU instance
    gpm_prev: dict[int | None, object] = field(default_factory=dict)
    process_samples_since: int = 0  # NVML timestamp (us) of the newest process sample seen


class _Lost(Exception):
    pass


ErrorSink = Callable[[str, str], None]


class _Ok(Protocol):
    def __call__(self, outcome: Outcome[T]) -> T | None: ...


class GpuSampler:
    def __init__(
        self,
        nvml: Nvml,
        collectors: Iterable[str],
        on_error: ErrorSink,
    ) -> None:
        self._nvml = nvml
        self._on = frozenset(collectors)
        self._on_error = on_error
        self._gpus: list[_Gpu] = []
        self._driver_version = ""

    # -- discovery --------------------------------------------------------------------------

    def discover(self) -> None:
        """(Re)learn the GPUs; a failed read is counted through ``on_error``."""
        self.close()
        driver = self._nvml.driver_version()
        self._driver_version = "" if isinstance(driver, Failure) else driver
        count = self._nvml.device_count()
        if isinstance(count, Failure):
            self._on_error("nvml", "query")
            count = 0
        self._gpus = [self._discover_one(i) for i in range(count)]
        log.info("found %d GPU(s): %s", len(self._gpus), ", ".join(self.models()) or "none")

    def models(self) -> list[str]:
        return [g.identity.model for g in self._gpus]

    def _discover_one(self, index: int) -> _Gpu:
        dev = self._nvml.device(index)
        if isinstance(dev, Failure):
            self._on_error("nvml", "gpu_lost" if isinstance(dev, GpuLost) else "query")
            return _Gpu(self._identity(index, "", "", "", "", ""), None)

        def txt(value: Outcome[str]) -> str:
            return "" if isinstance(value, Failure) else value

        identity = self._identity(
            index,
            txt(self._nvml.uuid(dev)),
            txt(self._nvml.name(dev)),
            txt(self._nvml.pci_bus_id(dev)),
            txt(self._nvml.serial(dev)),
            txt(self._nvml.vbios_version(dev)),
        )
        gpu = _Gpu(identity, dev)
        mig = self._nvml.mig_enabled(dev)
        gpu.mig_enabled = mig is True
        gpu.gpm = "profiling" in self._on and self._nvml.gpm_supported(dev)
        if "xid" in self._on:
            events = self._nvml.xid_event_set(dev)
            gpu.events = None if isinstance(events, Failure) else events
        if "nvlink_links" in self._on:
            links = []
            for link in range(nv.NVLINK_MAX_LINKS):
                active = self._nvml.nvlink_active(dev, link)
                if isinstance(active, Failure):
                    break
                if active:
                    links.append(link)
            gpu.nvlinks = tuple(links)
        return gpu

    def _identity(
        self, index: int, uuid: str, model: str, pci: str, serial: str, vbios: str
    ) -> GpuIdentity:
        return GpuIdentity(
            index, uuid, model, pci, f"nvidia{index}", serial, vbios, self._driver_version
        )

    def close(self) -> None:
        for gpu in self._gpus:
            if gpu.events is not None:
                self._nvml.free_event_set(gpu.events)
                gpu.events = None
            for sample in gpu.gpm_prev.values():
                self._nvml.gpm_free(sample)
            gpu.gpm_prev.clear()

    def device_count_changed(self) -> bool:
        count = self._nvml.device_count()
        return not isinstance(count, Failure) and count != len(self._gpus)

    # -- collection -------------------------------------------------------------------------

    def sample(self) -> list[GpuState]:
        states = []
        for gpu in self._gpus:
            if gpu.device is None:  # lost at discovery or since: try to get it back
                dev = self._nvml.device(gpu.identity.index)
                if isinstance(dev, Failure):
                    self._on_error("nvml", "gpu_lost" if isinstance(dev, GpuLost) else "query")
                    states.append(GpuState(gpu.identity, up=False))
                    continue
                gpu.device = dev
            try:
                states.append(self._read(gpu, gpu.device))
            except _Lost:
                self._on_error("nvml", "gpu_lost")
                log.warning("GPU %d (%s) is lost", gpu.identity.index, gpu.identity.uuid)
                gpu.device = None
                states.append(GpuState(gpu.identity, up=False))
        return states

    def _read(self, gpu: _Gpu, dev: Device) -> GpuState:
        nvml, on = self._nvml, self._on
        values: dict[str, float] = {}
        state = GpuState(gpu.identity, up=True, values=values, mig_enabled=gpu.mig_enabled)

        def ok(outcome: Outcome[T]) -> T | None:
            if isinstance(outcome, Failure):
                if isinstance(outcome, GpuLost):
                    raise _Lost
                if isinstance(outcome, Failed):
                    self._on_error("nvml", "query")
                return None
            return outcome

        if "utilization" in on:
            util = ok(nvml.utilization(dev))
            if util is not None:
                values["DCGM_FI_DEV_GPU_UTIL"], values["DCGM_FI_DEV_MEM_COPY_UTIL"] = util
            if (enc := ok(nvml.encoder_utilization(dev))) is not None:
                values["DCGM_FI_DEV_ENC_UTIL"] = enc
            if (dec := ok(nvml.decoder_utilization(dev))) is not None:
                values["DCGM_FI_DEV_DEC_UTIL"] = dec
        if gpu.mig_enabled:  # memory and activity belong to the instances
            if "mig" in on and (instances := ok(nvml.mig_instances(dev))) is not None:
                state.instances = [self._read_instance(gpu, dev, i, ok) for i in instances]
                live = {i.gi_id for i in instances}
                for gi in [g for g in gpu.gpm_prev if g is not None and g not in live]:
                    nvml.gpm_free(gpu.gpm_prev.pop(gi))
        else:
            if "memory" in on:
                self._read_memory(dev, values, ok)
            if gpu.gpm:
                values.update(self._gpm(gpu, dev, None, ok))
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
        if "xid" in on and gpu.events is not None:
            xids = ok(nvml.drain_xids(dev, gpu.events))
            for xid in xids or ():
                gpu.xid_counts[xid] = gpu.xid_counts.get(xid, 0) + 1
                gpu.last_xid = xid
                log.warning("GPU %d: XID %d", gpu.identity.index, xid)
            values["DCGM_FI_DEV_XID_ERRORS"] = gpu.last_xid
            state.xid_counts = dict(gpu.xid_counts)
        if "clock_events" in on:
            reasons = ok(nvml.clock_event_reasons(dev))
            if reasons is not None:
                values["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] = reasons
                state.clock_event_reasons = reasons
            for policy, series in _VIOLATION_READS:
                ns = ok(nvml.violation_ns(dev, policy))
                if ns is not None:
                    values[series] = ns // 1000
        if "processes" in on:
            self._read_processes(gpu, dev, state, ok)
        if "nvlink" in on and (totals := ok(nvml.nvlink_error_totals(dev))) is not None:
            state.nvlink_totals = totals
        if "nvlink_links" in on:
            for link in gpu.nvlinks:
                for counter_name, counter in nv.NVLINK_COUNTERS.items():
                    n = ok(nvml.nvlink_error_counter(dev, link, counter))
                    if n is not None:
                        state.nvlink[(counter_name, link)] = n
        return state

    def _read_memory(self, dev: Device, values: dict[str, float], ok: _Ok) -> None:
        mem = ok(self._nvml.memory(dev))
        if mem is not None:
            total, used, free, reserved = mem
            values["DCGM_FI_DEV_FB_FREE"] = free // MIB
            values["DCGM_FI_DEV_FB_USED"] = used // MIB
            if reserved is not None:
                values["DCGM_FI_DEV_FB_RESERVED"] = reserved // MIB
            values["DCGM_FI_DEV_FB_TOTAL"] = total // MIB

    def _read_processes(self, gpu: _Gpu, dev: Device, state: GpuState, ok: _Ok) -> None:
        procs = ok(self._nvml.running_processes(dev))
        if not procs:
            return
        util: dict[int, float] | None = None
        if not gpu.mig_enabled:  # NVML has no per-process samples inside MIG instances
            answer = ok(self._nvml.process_sm_utilization(dev, gpu.process_samples_since))
            if answer is not None:
                util, gpu.process_samples_since = answer
        state.processes = [
            ProcessSample(
                p.pid, p.used_bytes, p.gi_id, None if util is None else util.get(p.pid, 0.0)
            )
            for p in procs
        ]

    def _read_instance(self, gpu: _Gpu, dev: Device, inst: MigInstance, ok: _Ok) -> MigState:
        state = MigState(inst)
        if "memory" in self._on:
            self._read_memory(inst.device, state.values, ok)
            state.values.pop("DCGM_FI_DEV_FB_RESERVED", None)
        if gpu.gpm:
            state.values.update(self._gpm(gpu, dev, inst.gi_id, ok))
        return state

    def _gpm(self, gpu: _Gpu, dev: Device, gi_id: int | None, ok: _Ok) -> dict[str, float]:
        """Profiling values between the previous collection's GPM sample and a new one."""
        sample = ok(self._nvml.gpm_sample(dev, gi_id))
        if sample is None:
            return {}
        previous = gpu.gpm_prev.pop(gi_id, None)
        gpu.gpm_prev[gi_id] = sample
        if previous is None:  # the first sample: a rate needs two
            return {}
        values = ok(self._nvml.gpm_metrics(dev, previous, sample))
        self._nvml.gpm_free(previous)
        return values or {}


_ECC_READS = (
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", nv.ECC_CORRECTED, nv.ECC_VOLATILE),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", nv.ECC_UNCORRECTED, nv.ECC_VOLATILE),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", nv.ECC_CORRECTED, nv.ECC_AGGREGATE),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", nv.ECC_UNCORRECTED, nv.ECC_AGGREGATE),
)


_VIOLATION_READS = tuple((nv.PERF_POLICIES[k], name) for k, name in VIOLATION_SERIES.items())
