"""One snapshot of every GPU per collection (:mod:`exporter.snapshot`), read through the NVML
boundary, one thread per GPU.

Discovery (after NVML init, and again when the device count changes) starts a reader thread
per GPU (:mod:`exporter.workers`); each reads its GPU's identity on its first read. A
collection hands every idle thread a read and waits at most ``read_wait`` seconds for them, so
one GPU whose NVML calls hang cannot stall the others: its previous read is served while it is
younger than ``hung_after`` (three collection intervals by default), then the GPU is reported
down (``gpu_device_up 0``, its value series left out), the stuck read is counted
(``gpu_exporter_errors_total{source="nvml",kind="timeout"}``) and said in /health. When NVML
answers again the next read brings the GPU back. A GPU that answers "lost" is reported down
likewise; a field a GPU does not support is simply absent. Nothing here runs on the scrape path.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from exporter.gpu_reader import GpuReader
from exporter.nvml.boundary import Nvml
from exporter.nvml.results import Failure
from exporter.snapshot import GpuState
from exporter.workers import Done, ReadThread
from exporter.xids import XidListener

log = logging.getLogger(__name__)

ErrorSink = Callable[[str, str], None]
STOP_WAIT = 1.0  # seconds, at shutdown, for every reader thread together


class GpuSampler:
    def __init__(
        self,
        nvml: Nvml,
        collectors: Iterable[str],
        on_error: ErrorSink,
        *,
        hung_after: float = 15.0,
        read_wait: float = 2.5,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nvml = nvml
        self._on = frozenset(collectors)
        self._on_error = on_error
        self._hung_after = hung_after
        self._read_wait = read_wait
        self._monotonic = monotonic
        self._finished = threading.Condition()
        self._waiting: set[ReadThread] = set()  # reads of this collection not back yet
        self._threads: list[ReadThread] = []
        self._counted: dict[int, Done] = {}  # per GPU: the read whose errors were counted
        self._hung: set[int] = set()  # GPUs reported hung
        self._xids: XidListener | None = None
        self.problems: list[str] = []  # why GPUs are down, for /health

    # -- discovery --------------------------------------------------------------------------

    def discover(self) -> None:
        """(Re)learn the GPUs; a failed read is counted through ``on_error``."""
        self.close()
        driver = self._nvml.driver_version()
        driver_version = "" if isinstance(driver, Failure) else driver
        count = self._nvml.device_count()
        if isinstance(count, Failure):
            self._on_error("nvml", "query")
            count = 0
        self._xids = XidListener(self._nvml) if "xid" in self._on else None
        self._threads = [
            ReadThread(
                GpuReader(self._nvml, i, driver_version, self._on, self._xids),
                self._finished,
                self._read_back,
                self._monotonic,
            )
            for i in range(count)
        ]
        log.info("found %d GPU(s)", count)

    @property
    def gpu_count(self) -> int:
        return len(self._threads)

    def close(self) -> tuple[bool, bool]:
        """Stop the reader threads and the XID listener, waiting STOP_WAIT s for all of them
        together: (the readers stopped, the listener stopped). A reader still inside NVML is
        stuck there; the listener may just be in its wait. Either way NVML must not be shut
        down under them."""
        for t in self._threads:
            t.stop()
        if self._xids is not None:
            self._xids.stop()
        deadline = time.monotonic() + STOP_WAIT
        readers = all([t.join(deadline - time.monotonic()) for t in self._threads])
        listener = self._xids is None or self._xids.join(deadline - time.monotonic())
        self._threads = []
        self._counted.clear()
        self._hung.clear()
        self._xids = None
        return readers, listener

    def device_count_changed(self) -> bool:
        count = self._nvml.device_count()
        return not isinstance(count, Failure) and count != len(self._threads)

    # -- collection -------------------------------------------------------------------------

    def _read_back(self, t: ReadThread) -> None:
        """A read came back (called by its thread, the condition held): wake the collection
        once the last of its reads is back, not at every one."""
        self._waiting.discard(t)
        if not self._waiting:
            self._finished.notify()

    def sample(self) -> list[GpuState]:
        with self._finished:
            self._waiting = {t for t in self._threads if not t.busy}
        for t in list(self._waiting):
            if not t.submit():  # stopped meanwhile
                with self._finished:
                    self._waiting.discard(t)
        with self._finished:
            self._finished.wait_for(lambda: not self._waiting, self._read_wait)
        now = self._monotonic()
        states: list[GpuState] = []
        problems: list[str] = []
        for t in self._threads:
            state = self._state_of(t, now)
            if state is None:
                continue
            if self._xids is not None:
                state.last_xid, state.xid_counts = self._xids.state(t.reader.index)
            if not state.up:
                problems.append(self._problem(t, state, now))
            states.append(state)
        self.problems = problems
        return states

    def _state_of(self, t: ReadThread, now: float) -> GpuState | None:
        index = t.reader.index
        done = t.done
        if done is not None and self._counted.get(index) is not done:
            self._counted[index] = done
            for source, kind in done.read.errors:
                self._on_error(source, kind)
        started = t.started
        if started is not None and now - started > self._hung_after:
            if not t.reported_hung:
                t.reported_hung = True
                self._on_error("nvml", "timeout")
                log.warning(
                    "GPU %d (%s): NVML has not answered for %.0f s; reported down until it does",
                    index,
                    t.reader.identity.uuid,
                    now - started,
                )
            self._hung.add(index)
            return GpuState(t.reader.identity, up=False, down_reason="hung")
        if done is not None and now - done.started <= self._hung_after:
            if index in self._hung:
                self._hung.discard(index)
                log.info("GPU %d (%s) answers again", index, t.reader.identity.uuid)
            return done.read.state
        if index in self._hung:  # it answered, but its fresh read is not back yet
            return GpuState(t.reader.identity, up=False, down_reason="hung")
        return None  # its first read is still out, within the bound

    def _problem(self, t: ReadThread, state: GpuState, now: float) -> str:
        gpu = f"GPU {state.identity.index} ({state.identity.uuid or 'uuid unknown'})"
        if state.down_reason == "hung":
            out = f" for {now - t.started:.0f} s" if t.started is not None else ""
            return (
                f"{gpu}: NVML has not answered{out} (bound {self._hung_after:g} s); "
                "reported down, its series left out"
            )
        return f"{gpu}: {state.down_reason or 'down'}; reported down, its series left out"
