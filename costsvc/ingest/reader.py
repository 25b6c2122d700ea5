"""One ingest run's reads: the hours it plans, its blocks of hours, the one pool of threads
its reads run on, the reads asked for ahead, and what it keeps while a block is in use — the
gauges' summaries (costsvc/ingest/gauges/steady.py) and the integrals' answers
(costsvc/ingest/integrals.py). Each hour reads through it (costsvc/ingest/hour.py)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar, cast

from costsvc.ingest.gauges.steady import Summaries
from costsvc.ingest.prom import PrometheusReader, Series, instant_text

BLOCK_HOURS = 24  # consecutive planned hours read together (one range query per expression)
POOL_THREADS = 3  # an hour's reads two at a time, and the next hour's asked for ahead
T = TypeVar("T")
# an answer of many hours by instant: each series by the identity of its label set (one dict per
# series of an answer, at every instant: matching a series' two ends needs no key made of its
# labels), its labels and value (costsvc/ingest/integral_deltas.py)
Answer = dict[str, dict[int, tuple[dict[str, str], Decimal]]]


@dataclass
class Counts:
    """Series whose samples were synthesised (fast) or read raw, since the reader was made;
    of the fast ones, how many were read as sums (:class:`Regular`: ``summed``), and of those
    how many were read raw after all (``loaded``); hours with GPUs read from the exporter's
    integrals (``integral_hours``: costsvc/ingest/integrals.py); GPU-hours read from the
    integrals and from the gauges (``integral_gpus``, ``gauge_gpus``: costsvc/ingest/collect.py).
    """

    fast: int = 0
    raw: int = 0
    summed: int = 0
    loaded: int = 0
    integral_hours: int = 0
    integral_gpus: int = 0
    gauge_gpus: int = 0


class RunReader:
    """One ingest run's reads (a hour's: costsvc/ingest/hour.py ``HourReads``): the state of
    the run (the planned blocks, what is kept of them, each hour's reads asked for ahead) and
    the one pool of threads its reads run on, shut down by :meth:`close`. ``counts``: what it
    read, and how."""

    def __init__(self, prom: PrometheusReader) -> None:
        self.prom = prom
        self.counts = Counts()
        self._blocks: dict[str, tuple[str, str]] = {}  # instant -> block
        self.lock = threading.Lock()
        self._locks: dict[object, threading.Lock] = {}
        self._following: dict[str, datetime] = {}  # instant -> next hour
        self._preceding: dict[str, str] = {}  # instant -> the planned hour's before it
        self._latest: dict[tuple[str, str, int, str], _Latest] = {}
        self._early: dict[tuple[str, str, int], Future[list[Series]]] = {}
        # the integrals' answers, (expression, block's first instant) -> its Answer, and what
        # was derived of their series, (what, the service's cluster, block's first instant) ->
        # each series' labels (kept: an identity stays unique while its entry lives) and what
        # was derived of them (costsvc/ingest/integral_deltas.py: the block in use kept, earlier
        # ones dropped)
        self.integral_answers: dict[tuple[str, str], Answer] = {}
        self.integral_keys: dict[tuple[str, str, str], dict[int, tuple[dict[str, str], Any]]] = {}
        self.summaries = Summaries(self)  # the gauges' (costsvc/ingest/gauges/steady.py)
        # the hour's reads (two at a time) and the next planned hour's (costsvc/ingest/
        # collect.py: collect_hour), queued in that order
        self._pool = ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="prom-read")

    def __enter__(self) -> RunReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """The reads not begun are dropped; those under way are waited for."""
        with self.lock:
            for f in self._early.values():
                f.cancel()
            self._early.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def block(self, at: datetime) -> tuple[str, str]:
        """The first and last evaluation instants of the planned block ``at`` is in."""
        instant = instant_text(at)
        return self._blocks.get(instant, (instant, instant))

    def in_use(self, instant: str) -> Decimal:
        """The earliest evaluation instant whose reads may still be under way while the hour
        at ``instant`` is read: the planned hour before it (read ahead, an hour's reads run
        beside the next one's), else itself. What is older is done with."""
        return Decimal(self._preceding.get(instant, instant))

    def ended_before(self, first: str, instant: str) -> bool:
        """Whether the block of hours starting at ``first`` is done with (its last hour is
        older than any hour read while ``instant`` is)."""
        last = self._blocks.get(first, (first, first))[1]
        return Decimal(last) < self.in_use(instant)

    def lock_for(self, key: object) -> threading.Lock:
        with self.lock:
            return self._locks.setdefault(key, threading.Lock())

    def plan(self, hours: Iterable[datetime]) -> None:
        """The hours (their starts) an ingest is about to read: consecutive ones share blocks
        of summaries (one range query per block and selector instead of one per hour)."""
        ats = sorted({h + timedelta(hours=1) - timedelta(microseconds=1) for h in hours})
        blocks: dict[str, tuple[str, str]] = {}
        run: list[datetime] = []

        def close() -> None:
            for a in run:
                blocks[instant_text(a)] = (instant_text(run[0]), instant_text(run[-1]))
            run.clear()

        for a in ats:
            if run and (a - run[-1] != timedelta(hours=1) or len(run) >= BLOCK_HOURS):
                close()
            run.append(a)
        close()
        with self.lock:
            self._blocks = blocks
            self._following = {
                instant_text(a): b - timedelta(hours=1) + timedelta(microseconds=1)
                for a, b in itertools.pairwise(ats)
            }
            self._preceding = {instant_text(b): instant_text(a) for a, b in itertools.pairwise(ats)}
            self.summaries.clear()
            self._latest.clear()
            for f in self._early.values():
                f.cancel()
            self._early.clear()

    def prefetch(
        self, at: datetime, reads: Iterable[tuple[str, Decimal]]
    ) -> dict[tuple[str, int], Future[list[Series]]]:
        """The hour's reads (its evaluation instant ``at``; per selector its look-back),
        asked for now: those asked for ahead (:meth:`ahead`) as they are, the others on the
        pool. By (selector, look-back)."""
        out = {}
        reads = list(reads)
        self.summaries.widen(reads)
        for selector, look_back in reads:
            seconds = 3600 + int(look_back)
            with self.lock:
                early = self._early.pop((selector, instant_text(at), seconds), None)
            out[(selector, int(look_back))] = early or self._pool.submit(
                self._read, selector, at, seconds
            )
        return out

    def ahead(self, start: datetime, reads: Iterable[tuple[str, Decimal]]) -> None:
        """Ask for the reads of the planned hour after ``start`` now: Prometheus answers them
        while this hour is integrated, attributed and written."""
        nxt = self._following.get(
            instant_text(start + timedelta(hours=1) - timedelta(microseconds=1))
        )
        if nxt is None:
            return
        at = nxt + timedelta(hours=1) - timedelta(microseconds=1)
        with self.lock:
            for selector, look_back in reads:
                key = (selector, instant_text(at), 3600 + int(look_back))
                if key not in self._early:
                    self._early[key] = self._pool.submit(self._read, selector, at, key[2])

    def read(self, selector: str, at: datetime, seconds: int) -> list[Series]:
        """What ``prom.raw(selector, at, seconds)`` answers, with steady series synthesised."""
        with self.lock:
            early = self._early.pop((selector, instant_text(at), seconds), None)
        if early is not None:
            return early.result()
        return self._read(selector, at, seconds)

    def _read(self, selector: str, at: datetime, seconds: int) -> list[Series]:
        return self.summaries.read(selector, at, seconds)

    def latest(
        self,
        selector: str,
        at: datetime,
        seconds: int,
        derive: Callable[[dict[str, str]], T],
    ) -> list[tuple[dict[str, str], T]]:
        """What ``prom.latest(selector, at, seconds)`` answers (the label sets with a sample
        in the window), sorted, each with ``derive(labels)``. For an hour of a planned block,
        from one ``last_over_time`` range query over the block (a series has a value at an
        hour's step exactly when it had a sample in that hour's window): the hours of a block
        share a series' label set, and ``derive`` is worked out once per label set and block
        (e.g. a pod's ``label_*`` labels, unchanged for days)."""
        instant = instant_text(at)
        first, last = self._blocks.get(instant, (instant, instant))
        if self.prom.raw_only or first == last:
            found = sorted(self.prom.latest(selector, at, seconds), key=_sort_key)
            return [(lab, derive(lab)) for lab in found]
        block = self._latest_block(selector, seconds, first, last, at)
        out = []
        for lab in block.hours.get(instant, []):
            key = (derive, id(lab))  # the block holds lab: its id is its own while it lives
            if key not in block.derived:
                block.derived[key] = derive(lab)
            out.append((lab, cast(T, block.derived[key])))
        return out

    def _latest_block(
        self, selector: str, seconds: int, first: str, last: str, at: datetime
    ) -> _Latest:
        cache_key = ("latest", selector, seconds, first)
        with self.lock_for(cache_key):
            block = self._latest.get(cache_key)
            if block is None:
                start = datetime.fromtimestamp(float(first), at.tzinfo)
                end = datetime.fromtimestamp(float(last), at.tzinfo)
                block = _Latest({})
                expr = f"last_over_time({selector}[{seconds}s])"
                answer = self.prom.range_values(expr, start, end, 3600)
                answer.sort(key=lambda r: _sort_key(r[0]))  # each hour's label sets come sorted
                for lab, values in answer:
                    for t, _ in values:
                        block.hours.setdefault(t, []).append(lab)
                with self.lock:  # an earlier block of this selector, done with
                    stale = [
                        k
                        for k in self._latest
                        if k[:3] == cache_key[:3] and self.ended_before(k[3], instant_text(at))
                    ]
                    for k in stale:
                        del self._latest[k]
                    self._latest[cache_key] = block
        return block


def _sort_key(labels: dict[str, str]) -> list[tuple[str, str]]:
    return sorted(labels.items())


@dataclass
class _Latest:
    """The label sets of one selector with a sample in each hour of a block, and what was
    derived from them."""

    hours: dict[str, list[dict[str, str]]]  # evaluation instant -> label sets, sorted
    derived: dict[tuple[object, int], object] = field(default_factory=dict)
