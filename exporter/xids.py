"""XID errors as NVML delivers them: one event set for every GPU, waited on in a background
thread, so an XID is seen when it happens rather than when the next collection polls.

Each GPU is registered for ``nvmlEventTypeXidCriticalError`` when it is discovered. The
listener keeps, per GPU index, the last XID (``DCGM_FI_DEV_XID_ERRORS``, 0 until one is seen)
and how many of each code arrived (``gpu_xid_errors_total``). A GPU that falls off the bus
shows XID 79 ("GPU has fallen off the bus") whether or not the driver delivered that event:
when a read answers GPU_IS_LOST, :meth:`XidListener.fell_off_bus` records it once for that
loss, and a 79 event for the same loss is not counted twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable
from dataclasses import dataclass, field

from exporter.nvml.boundary import Nvml
from exporter.nvml.results import Device, EventSet, Failure

log = logging.getLogger(__name__)

OFF_THE_BUS = 79
WAIT_MS = 1000  # each wait's time-out: how soon a stop is noticed (one wake-up a second)


@dataclass(slots=True)
class _Seen:
    last: int = 0
    counts: dict[int, int] = field(default_factory=dict)
    off_bus: bool = False  # a 79 is recorded for the current loss of the GPU


class XidListener:
    """Owns the event set and the thread that waits on it; thread-safe."""

    def __init__(self, nvml: Nvml) -> None:
        self._nvml = nvml
        self._lock = threading.Lock()
        self._seen: dict[int, _Seen] = {}
        self._index_of: dict[Hashable, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        events = nvml.event_set()
        self._events: EventSet | None = None if isinstance(events, Failure) else events
        if self._events is None:
            log.warning("no NVML event set (%s): XIDs are not listened to", events)

    def register(self, dev: Device, key: Hashable) -> bool:
        """Listen to this GPU's XIDs (called by its reader at discovery)."""
        if self._events is None:
            return False
        done = self._nvml.register_xids(dev, self._events)
        if isinstance(done, Failure):
            return False
        with self._lock:
            self._index_of[key] = dev.index
            self._seen.setdefault(dev.index, _Seen())
        if self._thread is None:
            self._start()
        return True

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="nvml-xid", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        events = self._events
        assert events is not None
        while not self._stop.is_set():
            got = self._nvml.wait_xid(events, WAIT_MS)
            if isinstance(got, Failure):
                log.debug("waiting for NVML events: %s", got)
                self._stop.wait(1.0)  # e.g. a GPU of the set just fell off the bus
                continue
            if got is None or not got[1]:
                continue
            key, xid = got
            index = self._index_of.get(key)
            if index is None:
                continue
            log.warning("GPU %d: XID %d", index, xid)
            self._record(index, xid)

    def _record(self, index: int, xid: int) -> None:
        with self._lock:
            seen = self._seen.setdefault(index, _Seen())
            if xid == OFF_THE_BUS:
                if seen.off_bus:
                    return  # this loss is already recorded
                seen.off_bus = True
            seen.last = xid
            seen.counts[xid] = seen.counts.get(xid, 0) + 1

    def fell_off_bus(self, index: int) -> None:
        """A read of this GPU answered GPU_IS_LOST: it shows XID 79, once per loss."""
        self._record(index, OFF_THE_BUS)

    def answered(self, index: int) -> None:
        """A read of this GPU succeeded: a later loss is a new one."""
        seen = self._seen.get(index)
        if seen is not None and seen.off_bus:
            with self._lock:
                seen.off_bus = False

    def state(self, index: int) -> tuple[int | None, dict[int, int]]:
        """(last XID, counts by code) of a GPU; last is None when nothing listens to it and
        nothing was recorded."""
        with self._lock:
            seen = self._seen.get(index)
            if seen is None:
                return None, {}
            return seen.last, dict(seen.counts)

    def stop(self) -> None:
        """Ask the thread to end when its current wait ends (at most WAIT_MS)."""
        self._stop.set()

    def join(self, wait: float) -> bool:
        """Wait up to ``wait`` s for the thread; then free the event set. False (the set left
        alone) while the thread is still inside NVML's wait."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(wait, 0.0))
            if self._thread.is_alive():
                return False
        if self._events is not None:
            self._nvml.free_event_set(self._events)
            self._events = None
        return True
