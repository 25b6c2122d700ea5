"""One thread per GPU, so that a GPU whose NVML calls hang cannot stall the others.

NVML calls are per device and release the GIL (ctypes), so each GPU's reads run on its own
thread (:class:`ReadThread`). A collection hands every idle thread a read and waits a bounded
time for them; a thread still inside NVML from an earlier collection is not given another read
and not waited for. How long a read has been out is measured on the exporter's monotonic
clock; :mod:`exporter.sampler` decides what it means for the GPU (stale, then down).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from exporter.gpu_reader import GpuReader, Read
from exporter.snapshot import GpuState

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Done:
    """A finished read: when it was handed out (monotonic), and what it read."""

    started: float
    read: Read


class ReadThread:
    """Runs one :class:`GpuReader`'s reads on its own daemon thread."""

    def __init__(
        self,
        reader: GpuReader,
        finished: threading.Condition,
        on_done: Callable[[ReadThread], None],
        monotonic: Callable[[], float],
    ) -> None:
        self.reader = reader
        self._finished = finished  # held while a read is handed back (shared by all threads)
        self._on_done = on_done  # called with it held, after each read
        self._monotonic = monotonic
        self._wake = threading.Condition()
        self._pending = False
        self._stop = False
        self.started: float | None = None  # when the read now out was handed out
        self.done: Done | None = None  # the latest finished read
        self.reported_hung = False  # the read now out was reported hung (counted once)
        self._thread = threading.Thread(
            target=self._run, name=f"nvml-gpu{reader.index}", daemon=True
        )
        self._thread.start()

    @property
    def busy(self) -> bool:
        return self.started is not None

    def submit(self) -> bool:
        """Hand out a read; False while the previous one has not come back."""
        with self._wake:
            if self.started is not None or self._stop:
                return False
            self.started = self._monotonic()
            self.reported_hung = False
            self._pending = True
            self._wake.notify()
        return True

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._pending and not self._stop:
                    self._wake.wait()
                if self._stop:
                    break
                self._pending = False
                started = self.started
            try:
                read = self.reader.read()
            except Exception:  # a bug must not kill the thread: count it, report the GPU down
                log.exception("reading GPU %d failed", self.reader.index)
                read = Read(GpuState(self.reader.identity, up=False, down_reason="error"))
                read.errors.append(("exporter", "internal"))
            with self._finished:
                self.done = Done(started if started is not None else 0.0, read)
                self.started = None
                self._on_done(self)
        self.reader.close()

    def stop(self) -> None:
        """Ask the thread to end after the read it is in (if any)."""
        with self._wake:
            self._stop = True
            self._wake.notify()

    def join(self, wait: float) -> bool:
        """Wait up to ``wait`` s for it to end; False if it is stuck inside NVML (it is left
        behind, a daemon)."""
        self._thread.join(timeout=max(wait, 0.0))
        return not self._thread.is_alive()
