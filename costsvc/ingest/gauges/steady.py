"""The gauges' reads: a steady series' samples from per-hour summaries, not from its raw samples.

The gauges' hour (costsvc/ingest/gauges/holding_hour.py) asks for every raw sample of a selector in
the window W = (at - 3600 - look-back, at]. Most series of the selectors in :data:`STEADY` (a
pod's allocation share, a GPU's ``gpu_device_up``) have one value all hour and a sample at
every scrape of their target. For those the engine is asked, per series and per hour, for
``count_over_time(sel[W])`` and the value when it is constant over W, and each target's
``up`` series is read raw over the same W. A series is **steady** in the hour when

- its value is constant and finite over W (``max_over_time == min_over_time`` and
  ``changes == 0``: no NaN sample hides in it), and
- its target (the one ``up`` series whose labels all appear, equal, in the series: ``job``,
  ``instance`` and whatever the scrape added) exists, and the series' sample count equals the
  number of that target's ``up == 1`` samples in W.

A scraped series has samples only at its target's successful scrapes (Prometheus writes
``up`` 1 at each, with the same timestamp: "Jobs and instances", prometheus.io/docs/concepts/
jobs_instances/; exporters we read set no explicit timestamps), so a steady series' samples are
exactly (t, value) for those ``up == 1`` timestamps: they are synthesised, and the unchanged
integration (costsvc/ingest/gauges/sampled.py) gives the same money as from the raw samples. Every
other series (a value change, churn, a count that differs, no ``up`` or two) is read raw —
only those series (a ``pod=~"…"`` / ``UUID=~"…"`` / ``instance=~"…"`` matcher, by POST, exact
label sets kept), or the whole selector raw when more than half of its series are unsteady.

The selectors of :data:`SUMMED` (utilisation, SM time) change at every scrape in a real fleet:
for them the engine is asked for the max, min and sum over W and the values around each hour
edge instead of the constant check, and a series that is not constant but whose count
matches its target is a :class:`Regular`: its sums stand for its samples where its target
scrapes evenly (costsvc/ingest/gauges/holding_hour.py ``GaugeHour.integral``; docs/cost-model.md
"Series that change at every scrape"), its samples are read only where something needs them.

Summaries of many hours cross the API in one ``query_range`` at a 3600 s step, evaluated at
each hour's evaluation instant (:func:`costsvc.ingest.prom.instant_text`, the instant of the
raw read), for a block of planned consecutive hours (costsvc/ingest/reader.py ``plan``).
VictoriaMetrics: its rollup functions drop staleness markers before
``count_over_time``/``max_over_time`` ("only StaleNaNs could remain … see dropStaleNaNs()",
app/vmselect/promql/rollup.go, VictoriaMetrics#8944) and the raw read drops them too
(costsvc/ingest/prom.py), so both count the same samples; where any count differs the series
is read raw. A reader made with ``raw_only`` (costsvc/ingest/prom.py: the
tests that check the summaries against the samples they stand for) reads every series raw.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from operator import itemgetter
from typing import Any, Protocol, overload

from costsvc.ingest.gauges.counted import COUNTED, CounterSums
from costsvc.ingest.gauges.regular import SUMMED, BlockAsk, Loader, Sums, Unread
from costsvc.ingest.prom import PrometheusReader, Series, instant_text
from costsvc.ingest.series import Key, key_of, read_raw


class Run(Protocol):
    """What the summaries need of their run's reader (costsvc/ingest/reader.py ``RunReader``):
    its query API, its counts, its lock and per-key locks, its blocks and which are done with."""

    prom: PrometheusReader
    counts: Any  # (its Counts: fast, raw, summed, loaded)
    lock: threading.Lock

    def lock_for(self, key: object) -> threading.Lock: ...

    def block(self, at: datetime) -> tuple[str, str]: ...

    def ended_before(self, first: str, instant: str) -> bool: ...

    def in_use(self, instant: str) -> Decimal: ...


# the selectors whose series are mostly steady (and are no counters)
STEADY = frozenset(
    {
        "gpu_device_up",
        "gpu_allocation_share",
        "gpu_allocation_memory_share",
        "gpu_container_sm_utilization_ratio",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    }
)
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_UNSEEN: list[Decimal] = []  # (a marker: not looked up yet)


class Steady(Sequence[tuple[Decimal, Decimal]]):
    """A steady series' samples: (t, value) at each of ``times`` (its target's ``up == 1``
    timestamps, one list shared by the target's steady series), so what depends on the times
    only is worked out once per target (costsvc/ingest/gauges/holding_hour.py: GaugeHour.pieces).
    The samples are made only when something iterates them (most readers use ``times`` and
    ``value``)."""

    __slots__ = ("times", "value")

    def __init__(self, times: list[Decimal], value: Decimal) -> None:
        self.times, self.value = times, value

    def __len__(self) -> int:
        return len(self.times)

    @overload
    def __getitem__(self, i: int) -> tuple[Decimal, Decimal]: ...

    @overload
    def __getitem__(self, i: slice) -> list[tuple[Decimal, Decimal]]: ...

    def __getitem__(
        self, i: int | slice
    ) -> tuple[Decimal, Decimal] | list[tuple[Decimal, Decimal]]:
        if isinstance(i, slice):
            return [(t, self.value) for t in self.times[i]]
        return (self.times[i], self.value)

    def __iter__(self) -> Iterator[tuple[Decimal, Decimal]]:
        return zip(self.times, itertools.repeat(self.value))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


class Summaries:
    """The gauges' summaries of one run (its reader's, costsvc/ingest/reader.py): per selector
    and block of hours, each series' sample count and constant value (and sums, edge values);
    per hour, each target's ``up == 1`` timestamps. :meth:`read` answers a raw read with the
    steady series synthesised from them."""

    def __init__(self, reader: Run) -> None:
        self.reader = reader
        self._blocks: dict[tuple[str, int, str], _Block] = {}
        self._ups: dict[tuple[str, int], Targets] = {}
        self._up_seconds = 0  # the widest window an hour's reads asked for (prefetch)

    def clear(self) -> None:
        """A new plan: nothing kept."""
        self._blocks.clear()
        self._ups.clear()

    def widen(self, reads: list[tuple[str, Decimal]]) -> None:
        """An hour's reads asked for (per selector its look-back): ``up`` is read once an
        hour, over the widest window of them."""
        self._up_seconds = max([self._up_seconds] + [3600 + int(b) for _, b in reads])

    def read(self, selector: str, at: datetime, seconds: int) -> list[Series]:
        prom = self.reader.prom
        summarised = selector in STEADY or selector in COUNTED
        if prom.raw_only or not summarised or not _NAME.fullmatch(selector):
            out = prom.raw(selector, at, seconds)
            self.reader.counts.raw += len(out)
            return out
        block = self._summary(selector, at, seconds)
        instant = instant_text(at)
        found = block.hours.get(instant)
        if not found:
            return []
        targets = self._targets(at, seconds)
        loader = None
        if selector in SUMMED or selector in COUNTED:

            def raw_of(keys: set[Key], total: int) -> list[Series]:
                return read_raw(prom, selector, at, seconds, keys, total)

            def counted(n: int) -> None:
                self.reader.counts.loaded += n

            loader = Loader(raw_of, counted)
        sums = None if loader is None or block.sums is None else block.sums.hour(instant)
        steady: list[tuple[Key, Series]] = []
        unsteady: set[Key] = set()
        # a target's times, where its one up series has no labels but job and instance (most):
        # looked up once per target, not per series
        plain: dict[tuple[str | None, str | None], list[Decimal] | None] = {}
        for key in block.order:  # sorted: in the order Prometheus answers a range selector
            summary = found.get(key)
            if summary is None:
                continue
            n, v = summary
            labels = block.labels[key]
            target = (labels.get("job"), labels.get("instance"))
            times = plain.get(target, _UNSEEN)
            if times is _UNSEEN:
                ups = targets.get(target)  # type: ignore[arg-type]
                if ups is not None and len(ups) == 1 and not ups[0][0]:
                    times = plain[target] = ups[0][1]
                else:
                    times = _up_times(targets, labels)
            if times is None or len(times) != n:
                unsteady.add(key)
                continue
            if v is not None:
                steady.append((key, Series(labels, Steady(times, v))))
                continue
            read: Unread | None = None
            if sums is not None:
                read = sums.regular(key, times, loader)  # type: ignore[arg-type]
            elif block.counters is not None:
                read = block.counters.counter(instant, key, times, loader)  # type: ignore[arg-type]
            if read is None:
                unsteady.add(key)
                continue
            loader.pending[key] = read  # type: ignore[union-attr]
            steady.append((key, Series(labels, read)))
        if loader is not None:
            loader.total = len(found)
            self.reader.counts.summed += len(loader.pending)
        raw = read_raw(prom, selector, at, seconds, unsteady, len(found))
        self.reader.counts.fast += len(steady)
        self.reader.counts.raw += len(raw)
        if not raw:
            return [s for _, s in steady]
        # each group's series in the raw read's order (gauges/window.py: grouped, merged)
        both = heapq.merge(steady, sorted((key_of(s.labels), s) for s in raw), key=itemgetter(0))
        return [s for _, s in both]

    def _summary(self, selector: str, at: datetime, seconds: int) -> _Block:
        """Sample count and constant value per series of ``selector``, per hour of the block
        (for :data:`SUMMED` selectors also their sums and edge values)."""
        instant = instant_text(at)
        first, last = self.reader.block(at)
        cache_key = (selector, seconds, first)
        with self.reader.lock_for(cache_key):
            block = self._blocks.get(cache_key)
            if block is None or instant not in block.hours:
                start = datetime.fromtimestamp(float(first), at.tzinfo)
                end = datetime.fromtimestamp(float(last), at.tzinfo)
                block = _summarise(self.reader.prom, selector, seconds, start, end, instant)
                with self.reader.lock:  # an earlier block of this selector, done with
                    stale = [
                        k
                        for k in self._blocks
                        if k[:2] == cache_key[:2] and self.reader.ended_before(k[2], instant)
                    ]
                    for k in stale:
                        del self._blocks[k]
                    self._blocks[cache_key] = block
            return block

    def _targets(self, at: datetime, seconds: int) -> Targets:
        """Each target's ``up == 1`` timestamps in the window, by (job, instance), with the
        labels of its ``up`` series other than those two (most targets have none). ``up`` is
        read once an hour, over the widest window of its reads (:meth:`prefetch`); a narrower
        one is cut from it — unless a timestamp lies on its edge, where engines differ
        (Prometheus 2 includes it): that window is read."""
        cache_key = (instant_text(at), seconds)
        with self.reader.lock_for(("up", *cache_key)):
            found = self._ups.get(cache_key)
            if found is None:
                found = self._cut(at, seconds) if seconds < self._up_seconds else None
                if found is None:
                    found = {}
                    for s in self.reader.prom.raw("up", at, seconds):
                        job, instance = s.labels.get("job"), s.labels.get("instance")
                        if job is None or instance is None:
                            continue
                        times = [t for t, v in s.samples if v == 1]
                        others = tuple(
                            (n, v) for n, v in key_of(s.labels) if n not in {"job", "instance"}
                        )
                        found.setdefault((job, instance), []).append((others, times))
                with self.reader.lock:  # an earlier hour's, done with: not the one read beside
                    # this one (its series and this hour's share each target's times: a
                    # usage read as sums is integrated only beside a share with the same
                    # times, costsvc/ingest/gauges/holding_hour.py Usage.integral)
                    oldest = self.reader.in_use(cache_key[0])
                    for k in [k for k in self._ups if Decimal(k[0]) < oldest]:
                        del self._ups[k]
                    self._ups[cache_key] = found
            return found

    def _cut(self, at: datetime, seconds: int) -> Targets | None:
        """The targets of the window ``seconds`` from those of the widest (None: a timestamp
        on its edge)."""
        wide = self._targets(at, self._up_seconds)
        edge = Decimal(instant_text(at)) - seconds
        out: Targets = {}
        for target, ups in wide.items():
            mine = out[target] = []
            for others, times in ups:
                k = bisect.bisect_right(times, edge)
                if k and times[k - 1] == edge:
                    return None
                mine.append((others, times[k:]))
        return out


def _count(text: str) -> int:
    """A count's text as a number (-1, never matching a target, if it is no count)."""
    value = Decimal(text)
    return int(value) if value.is_finite() and value == value.to_integral_value() else -1


@dataclass
class _Block:
    """The summaries of one selector over a block of planned hours."""

    # evaluation instant -> series -> (sample count, the value when constant and finite)
    hours: dict[str, dict[Key, tuple[int, Decimal | None]]]
    labels: dict[Key, dict[str, str]]  # each series' labels (with __name__), for every hour
    order: list[Key]  # the series, sorted
    sums: Sums | None = None  # of a SUMMED selector (costsvc/ingest/gauges/regular.py)
    counters: CounterSums | None = None  # of a COUNTED one (costsvc/ingest/gauges/counted.py)


def _summarise(
    prom: PrometheusReader,
    selector: str,
    seconds: int,
    start: datetime,
    end: datetime,
    instant: str,
) -> _Block:
    """The summaries of ``selector`` over the block of hours evaluated from ``start`` to
    ``end`` (``instant``: the hour asked for, there even where it has no series)."""
    w = f"{selector}[{seconds}s]"
    counted = prom.range_values(f"count_over_time({w})", start, end, 3600)
    texts: dict[str, Decimal | None] = {}  # a value's text, converted once

    def number(v: str) -> Decimal | None:
        found = texts.get(v, texts)
        if found is texts:
            dv = Decimal(v)
            found = texts[v] = dv if dv.is_finite() else None
        return found  # type: ignore[return-value]

    value_at: dict[str, dict[Key, Decimal | None]] = {}
    block = _Block({instant: {}}, {}, [])
    ask = BlockAsk(prom, selector, seconds, start, end, number)
    if selector in SUMMED:
        block.sums = Sums()
        block.sums.fill(ask)
        for t in block.sums.high:
            value_at[t] = block.sums.constant(t)
    elif selector in COUNTED:  # a counter's value is never constant for long: no check
        block.counters = CounterSums()
        block.counters.fill(ask)
    else:
        # the value where the samples are all one number. Prometheus' max/min_over_time skip
        # a NaN, its changes() counts a NaN next to a number as a change and compares exactly
        # (promql/functions.go funcChanges); VictoriaMetrics' changes() lets values 1e-12
        # apart pass as equal (app/vmselect/promql/rollup.go rollupChanges) but its rollups
        # see no NaN and its == is exact: both together are exact on either engine (three
        # passes over the samples; max == min and sum == sum took four, and more)
        constant = prom.range_values(
            f"max_over_time({w}) == min_over_time({w}) and changes({w}) == 0",
            start,
            end,
            3600,
        )
        for lab, values in constant:
            key = key_of(lab)
            for t, v in values:
                value_at.setdefault(t, {})[key] = number(v)
    for lab, values in counted:
        key = key_of(lab)
        block.labels[key] = {**lab, "__name__": selector}
        for t, v in values:
            mine = block.hours.get(t)
            if mine is None:
                mine = block.hours[t] = {}
            mine[key] = (_count(v), value_at.get(t, {}).get(key))
    block.order = sorted(block.labels)
    return block


Targets = dict[tuple[str, str], list[tuple[Key, list[Decimal]]]]


def _up_times(targets: Targets, labels: dict[str, str]) -> list[Decimal] | None:
    """The ``up == 1`` timestamps of the one target a series belongs to: the one ``up``
    series with its job and instance whose other labels it has too (None: not one)."""
    found = targets.get((labels.get("job"), labels.get("instance")))  # type: ignore[arg-type]
    if not found:
        return None
    mine = [
        times for others, times in found if not others or all(labels.get(n) == v for n, v in others)
    ]
    return mine[0] if len(mine) == 1 else None
