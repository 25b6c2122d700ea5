"""The collection loop: one snapshot per interval, rendered once, published by reference swap.

The scrape path only reads ``Exporter.exposition`` (an immutable object replaced atomically), so
a scrape never calls NVML and never waits for a collection. If NVML cannot be initialised the
loop keeps rendering the self-metrics and retries with exponential back-off. Each GPU is read
on its own thread (:mod:`exporter.sampler`): a GPU whose NVML read has not returned within
``HUNG_INTERVALS`` collection intervals is reported down, and /health says so.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from exporter import catalogue as cat
from exporter.integrals import Integrals
from exporter.nvml.boundary import Nvml
from exporter.nvml.results import NvmlInitError
from exporter.pods.claims import Assignments, AssignmentSource, PidOwner
from exporter.pods.shares import attribute
from exporter.render.exposition import Exposition, Family, Variant
from exporter.render.families import GpuRenderer
from exporter.render.label_text import PodLabels
from exporter.sampler import GpuSampler
from exporter.selfmetrics import SelfMetrics

log = logging.getLogger(__name__)

HUNG_INTERVALS = 3  # a GPU read out for longer than this many intervals: the GPU is down


class Exporter:
    def __init__(
        self,
        nvml: Nvml,
        hostname: str,
        collectors: Iterable[str],
        interval: float,
        *,
        mode: str = "nvml",
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        init_backoff: tuple[float, float] = (1.0, 60.0),
        assignments: AssignmentSource | None = None,
        owner: PidOwner | None = None,
        assignments_max_age: float = 60.0,
        stats: SelfMetrics | None = None,
        pod_labels: PodLabels | None = None,
        finished_pod: Callable[[str, str], bool] | None = None,
        read_wait: float | None = None,
        hostname_label: str = "Hostname",
        pod_uid: Callable[[str, str], str | None] | None = None,
    ) -> None:
        self.nvml = nvml
        self.collectors = frozenset(collectors)
        self.interval = interval
        self.stats = stats if stats is not None else SelfMetrics(nvml.bindings_version(), mode)
        self.sampler = GpuSampler(
            nvml,
            self.collectors,
            self.stats.count_error,
            hung_after=HUNG_INTERVALS * interval,
            read_wait=interval / 2 if read_wait is None else read_wait,
            monotonic=monotonic,
        )
        self.renderer = GpuRenderer(hostname, self.collectors, pod_labels, hostname_label, pod_uid)
        # what each collection held, integrated over time: counters of seconds
        self.integrals = Integrals(
            interval,
            {s.name: s.help for s in cat.INTEGRALS},
            clock=clock,
            sparse=cat.SPARSE_INTEGRALS,
        )
        self._clock = clock
        self._monotonic = monotonic
        self._backoff_min, self._backoff_max = init_backoff
        self._init_delay = self._backoff_min
        self._next_init = 0.0
        self._demand: set[Variant] = {"text"}
        self._assignments = assignments
        self._owner: PidOwner = owner if owner is not None else (lambda pid: None)
        self._assignments_max_age = assignments_max_age
        self._finished_pod = finished_pod
        self.problems: list[str] = []  # what /health reports besides freshness
        self._last_assignments: tuple[float, Assignments] | None = None
        self.last_collection: float | None = None  # monotonic time of the last publish
        self.first_collection = threading.Event()
        self.exposition = Exposition(self.stats.families())

    def want(self, variant: Variant) -> None:
        """Called by the scrape path: render this form eagerly from the next collection on."""
        if variant not in self._demand:
            self._demand = self._demand | {variant}

    # -- one collection ---------------------------------------------------------------------

    def collect_once(self) -> None:
        start = self._monotonic()
        families: list[Family] = []
        if not self.nvml.initialized and start >= self._next_init:
            self._try_init()
        if self.nvml.initialized:
            if self.sampler.device_count_changed():
                self.sampler.discover()
                self.stats.gpus = self.sampler.gpu_count
            states = self.sampler.sample()
            current = self._current_assignments()
            kubelet = self._assignments.problem if self._assignments is not None else None
            self.problems = [*self.sampler.problems, *([kubelet] if kubelet else [])]
            attribution = (
                None
                if current is None
                else attribute(
                    states, current.claims, current.replicas, self._owner, self._finished_pod
                )
            )
            if current is not None:
                self.stats.dra_devices = current.dra_devices
            if attribution is not None:
                self.stats.unknown_device_ids = attribution.unknown_device_ids
                self.stats.finished_pod_device_ids = attribution.finished_pod_device_ids
            families = self.renderer.families(states, attribution)
            rates = self.renderer.rates
            self.integrals.advance(self._monotonic(), rates.ahead, rates.behind)
            self.stats.last_success = self._clock()
        # (published while NVML is down too: at their totals, not advanced)
        families.extend(self.integrals.families())
        read_done = self._monotonic()
        self.stats.observe_collection(read_done - start)
        families.extend(self.stats.families())
        self.exposition = Exposition(families, self._demand)
        self.stats.last_render_duration = self._monotonic() - read_done
        self.last_collection = self._monotonic()
        self.first_collection.set()

    def _current_assignments(self) -> Assignments | None:
        """The kubelet's answer; a missed answer reuses the last good one for a while, so a
        kubelet hiccup does not turn held GPUs into idle ones for a scrape."""
        if self._assignments is None:
            return None
        now = self._monotonic()
        fresh = self._assignments.assignments()
        if fresh is not None:
            self._last_assignments = (now, fresh)
            return fresh
        if self._last_assignments is not None:
            at, last = self._last_assignments
            if now - at <= self._assignments_max_age:
                return last
        return None

    def _try_init(self) -> None:
        try:
            self.nvml.init()
        except NvmlInitError as exc:
            self.stats.count_error("nvml", "init")
            self.stats.nvml_up = 0
            log.warning("%s; retrying in %.0f s", exc, self._init_delay)
            self._next_init = self._monotonic() + self._init_delay
            self._init_delay = min(self._init_delay * 2, self._backoff_max)
            return
        self._init_delay = self._backoff_min
        self.stats.nvml_up = 1
        self.sampler.discover()
        self.stats.gpus = self.sampler.gpu_count

    # -- the loop ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        next_at = self._monotonic()
        while not stop.is_set():
            try:
                self.collect_once()
            except Exception:  # the exporter must not fall over; count it and carry on
                log.exception("collection failed")
                self.stats.count_error("exporter", "internal")
            next_at += self.interval
            now = self._monotonic()
            if next_at < now:  # fell behind: skip the missed ticks rather than burst
                next_at = now + self.interval
            stop.wait(next_at - now)
        self.close()

    def close(self) -> None:
        readers, listener = self.sampler.close()
        if not readers:  # nvmlShutdown would wait for the stuck call too
            log.warning("a GPU read is stuck in NVML: leaving NVML as it is")
        elif not listener:
            log.debug("the XID listener is still in NVML's event wait: leaving NVML as it is")
        else:
            self.nvml.shutdown()

    def healthy(self) -> bool:
        """A collection completed within the last three intervals."""
        last = self.last_collection
        return last is not None and self._monotonic() - last <= 3 * self.interval + 1

    def health(self) -> tuple[bool, list[str]]:
        """Whether collections are fresh, and what is wrong besides (GPUs reported down and
        why; the kubelet's pod-resources API not answering, its socket gone). Neither makes
        the exporter unhealthy: restarting it would not help."""
        return self.healthy(), list(self.problems)
