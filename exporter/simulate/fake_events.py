"""The fake NVML's event functions (pynvml signatures and error codes): one event set for any
number of GPUs, critical XID events delivered in order, each to the set it was registered
with, only those after registration (as the driver does), with the device handle they are
about. ``nvmlEventSetWait_v2`` blocks up to its time-out (real time) for the next event that
is due on the simulated clock.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from exporter.nvml.library import lib as pynvml
from exporter.simulate.handles import FakeHandle, FakeParts

WAIT_POLL_S = 0.02  # how often a waiting call looks at the simulated clock


def _error(code: int) -> Exception:
    err: Exception = pynvml.NVMLError(code)
    return err


@dataclass(slots=True)
class FakeEventSet:
    # device index -> position in that GPU's XID list of the next event to deliver
    cursors: dict[int, int] = field(default_factory=dict)
    freed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True, slots=True)
class FakeEventData:
    """What ``nvmlEventSetWait_v2`` returns (``c_nvmlEventData_t``'s fields)."""

    device: FakeHandle
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


class EventsMixin(FakeParts):
    """Mixed into FakeNvml, which provides ``gpus``, ``_gpu``, ``_count``, ``sim_time`` and
    ``_initialized``."""

    _initialized: int
    events_delivered: list[tuple[int, int]]  # (GPU index, XID) in the order delivered

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._count()
        if not self._initialized:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
        return FakeEventSet()

    def nvmlDeviceRegisterEvents(
        self, handle: FakeHandle, event_types: int, event_set: FakeEventSet
    ) -> None:
        gpu, t = self._gpu(handle, "xid_events")
        if event_types & pynvml.nvmlEventTypeXidCriticalError:
            with event_set.lock:  # only events after registration are delivered
                event_set.cursors[gpu.index] = bisect.bisect_right(gpu.xids, (t, math.inf))

    def _next_event(self, event_set: FakeEventSet) -> FakeEventData | bool:
        """The next event due, else whether any is still to come."""
        t = self.sim_time()
        to_come = False
        with event_set.lock:
            for index, cursor in event_set.cursors.items():
                xids = self.gpus[index].xids
                if cursor < len(xids):
                    if xids[cursor][0] > t:
                        to_come = True
                        continue
                    event_set.cursors[index] = cursor + 1
                    self.events_delivered.append((index, xids[cursor][1]))
                    return FakeEventData(
                        FakeHandle(index), pynvml.nvmlEventTypeXidCriticalError, xids[cursor][1]
                    )
        return to_come

    def nvmlEventSetWait_v2(self, event_set: FakeEventSet, timeout_ms: int) -> Any:
        self._count()
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if event_set.freed:
                raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            event = self._next_event(event_set)
            if isinstance(event, FakeEventData):
                return event
            left = deadline - time.monotonic()
            if left <= 0:
                raise _error(pynvml.NVML_ERROR_TIMEOUT)
            # nothing to come: sleep it out (a device registered meanwhile waits for the next)
            time.sleep(min(left, WAIT_POLL_S) if event else left)

    def nvmlEventSetFree(self, event_set: FakeEventSet) -> None:
        self._count()
        event_set.freed = True
