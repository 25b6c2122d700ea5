"""Series whose values change at every scrape, read as sums.

A real fleet's utilisation and its containers' SM time change at every sample, so the fast
reads of costsvc/ingest/gauges/steady.py never find them steady; what an hour needs of such a series
is its integral. For the selectors of :data:`SUMMED` the engine is asked, per series and hour
(one ``query_range`` per expression and block of hours: tagging several with ``label_replace``
and joining them with ``or`` cost Prometheus 2-3 times the CPU), for the max, min and sum over
the raw read's window, and at each hour edge for the last sample before it, a sample exactly
at it and the sum of the window's look-back (:meth:`Sums.fill`). A series whose count matches
its target's successful scrapes (costsvc/ingest/gauges/steady.py) but is not constant is a
:class:`Regular`: its sums stand for its samples where its target scrapes evenly
(costsvc/ingest/gauges/holding_hour.py ``GaugeHour.integral``, docs/cost-model.md "Series that
change at every scrape"); its samples are read (:class:`Loader`) only where something needs them.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import overload

from costsvc.ingest.prom import PrometheusReader, Series
from costsvc.ingest.series import Key, key_of

# the selectors of steady.STEADY whose values change at every sample in a real fleet
SUMMED = frozenset(
    {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gpu_container_sm_utilization_ratio",
    }
)
EDGE = (
    300  # seconds: no sample holds longer than this (costsvc/ingest/gauges/holding_hour.py MAX_GAP)
)
ULP = Decimal(2) ** -52  # a float64's relative spacing
FOUR_ULP = 4 * ULP
ZERO = Decimal(0)
Sample = tuple[Decimal, Decimal]


class Unread(Sequence[Sample]):
    """A series whose samples are at each of ``times`` (its target's ``up == 1`` timestamps, as
    a steady series') and are read (raw, exact label set, by its :class:`Loader`) only when
    something iterates it: :class:`Regular`, costsvc/ingest/gauges/counted.py ``Counter``.
    Reading one reads the others of its read still unread as well (``LOADS_ALL``), or it alone."""

    __slots__ = ("__weakref__", "_loader", "_samples", "key", "times")
    LOADS_ALL = True

    def __init__(self, times: list[Decimal], key: Key, loader: Loader | None) -> None:
        self.times, self.key, self._loader = times, key, loader
        self._samples: list[Sample] | None = None

    @property
    def samples(self) -> list[Sample]:
        if self._samples is None:
            if self._loader is not None:
                self._loader.load(None if self.LOADS_ALL else [self.key])
            if self._samples is None:  # pragma: no cover - the raw read lost it
                raise RuntimeError(f"series {dict(self.key)} not in the raw read")
        return self._samples

    def fill(self, samples: list[Sample]) -> None:
        self._samples, self._loader = samples, None

    @property
    def loaded(self) -> bool:
        return self._samples is not None

    def __len__(self) -> int:
        return len(self.times)

    @overload
    def __getitem__(self, i: int) -> Sample: ...

    @overload
    def __getitem__(self, i: slice) -> list[Sample]: ...

    def __getitem__(self, i: int | slice) -> Sample | list[Sample]:
        return self.samples[i]

    def __iter__(self) -> Iterator[Sample]:
        return iter(self.samples)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


class Regular(Unread):
    """A series of :data:`SUMMED` whose values change at every scrape: what the engine summed
    of them instead of the values themselves — ``total``: the sum of the values of the
    samples in [t0, t1); ``error``: a bound on how far that (a float sum, from float values)
    is from the sum of the values as decimal text; ``peak``: the largest absolute value in the
    window; ``before``: the value of the last sample before t0, ``last``: of the last before
    t1 (None: no such sample within :data:`EDGE` seconds). Iterated, its samples are read with
    the others of its read still unread (:func:`load` picks which to read at once)."""

    __slots__ = ("before", "error", "last", "peak", "total")

    def __init__(
        self,
        times: list[Decimal],
        total: Decimal,
        error: Decimal,
        peak: Decimal,
        before: Decimal | None,
        last: Decimal | None,
        key: Key,
        loader: Loader | None,
    ) -> None:
        super().__init__(times, key, loader)
        self.total, self.error, self.peak = total, error, peak
        self.before, self.last = before, last


class Loader:
    """The raw reads of the :class:`Unread` series of one read (selector, hour) still
    unread: ``read(keys, total)`` reads those series (``total``: the series of the read, for
    the choice of how), ``counted(n)`` is told how many came."""

    def __init__(
        self,
        read: Callable[[set[Key], int], list[Series]],
        counted: Callable[[int], None],
    ) -> None:
        self.read, self.counted = read, counted
        # weakly: a series refers to its loader, and a loader holding its series back would
        # make a reference cycle of every series read as sums, left to the cyclic collector
        # (paused while hours are ingested: run.py) instead of freed with the hour
        self.pending: weakref.WeakValueDictionary[Key, Unread] = weakref.WeakValueDictionary()
        self.total = 0

    def load(self, keys: Iterable[Key] | None) -> None:
        """Read these series raw (None: every one still unread) in one read."""
        todo = set(self.pending) if keys is None else {k for k in keys if k in self.pending}
        if not todo:
            return
        found = self.read(todo, self.total)
        self.counted(len(found))
        for s in found:
            series = self.pending.pop(key_of(s.labels), None)
            if series is not None:
                series.fill(list(s.samples))


def load(series: Iterable[Sequence[Sample]]) -> None:
    """Read the samples of these series (those of them that are :class:`Unread` and unread)
    now, one read per selector and hour: for a caller that knows which it will iterate."""
    by_loader: dict[int, tuple[Loader, list[Key]]] = {}
    for s in series:
        if isinstance(s, Unread) and s._loader is not None:
            by_loader.setdefault(id(s._loader), (s._loader, []))[1].append(s.key)
    for loader, keys in by_loader.values():
        loader.load(keys)


Table = dict[str, dict[Key, Decimal | None]]  # evaluation instant -> series -> value, or None


@dataclass(frozen=True, slots=True)
class BlockAsk:
    """A selector's summaries over a block of hours, each asked for in one range query
    evaluated at every hour's end from ``start`` to ``end`` (``seconds``: the window of an hour,
    its look-back included); ``number`` reads a value's text (None: not finite)."""

    prom: PrometheusReader
    selector: str
    seconds: int
    start: datetime
    end: datetime
    number: Callable[[str], Decimal | None]

    def into(self, table: Table, expr: str, first: datetime | None = None) -> None:
        """``expr`` evaluated over the block (from ``first`` where it starts earlier), into
        ``table``."""
        since = self.start if first is None else first
        number = self.number
        for lab, values in self.prom.range_values(expr, since, self.end, 3600):
            key = key_of(lab)
            for t, v in values:
                found = table.get(t)
                if found is None:
                    found = table[t] = {}
                found[key] = number(v)


@dataclass
class BlockSums:
    """What the engine summarised of a selector over a block of hours (:class:`Sums`,
    :class:`~costsvc.ingest.gauges.counted.CounterSums`): per evaluation instant and series,
    the sum over the window (``whole``: None where not finite, a NaN in it), and per hour
    edge (its instant) and series, the value of the last sample before it (``before``)."""

    whole: Table = field(default_factory=dict)
    before: Table = field(default_factory=dict)


@dataclass
class Sums(BlockSums):
    """What the engine summed of a :data:`SUMMED` selector over a block of hours: besides the
    sums and the samples before each edge, per evaluation instant and series, the max and
    min over the window (None: not finite) and per hour edge and series, ``at``: the value of
    a sample at it, ``back``: the sum of the look-back's samples."""

    high: Table = field(default_factory=dict)
    low: Table = field(default_factory=dict)
    at: Table = field(default_factory=dict)
    back: Table = field(default_factory=dict)

    def fill(self, ask: BlockAsk) -> None:
        """The max, min and sum over each hour's window ``selector[seconds]`` (a NaN anywhere
        in it makes the sum NaN: such a series is read raw) and, where some series is not
        constant, the edge values. The edge windows end 1 ms before the edge (``offset 1ms``:
        scrape times are in ms) and match the raw read's (at - seconds, at] on Prometheus 3
        and VictoriaMetrics, [at - seconds, at] on Prometheus 2, either way."""
        selector, seconds = ask.selector, ask.seconds
        w = f"{selector}[{seconds}s]"
        for table, name in ((self.high, "max"), (self.low, "min"), (self.whole, "sum")):
            ask.into(table, f"{name}_over_time({w})")
        if all(
            h == self.low.get(t, {}).get(k)
            for t, found in self.high.items()
            for k, h in found.items()
        ):
            return  # every series constant (steady): no edge is needed
        back_ms = (seconds - 3600) * 1000 - 1
        first = ask.start - timedelta(hours=1)
        for table, expr in (
            (self.before, f"last_over_time({selector}[{EDGE}s] offset 1ms)"),
            (self.at, f"last_over_time({selector}[1ms])"),
            (self.back, f"sum_over_time({selector}[{back_ms}ms] offset 1ms)"),
        ):
            ask.into(table, expr, first)

    def constant(self, instant: str) -> dict[Key, Decimal | None]:
        """The series whose samples in the hour's window are one finite value, and it."""
        low, whole = self.low.get(instant, {}), self.whole.get(instant, {})
        return {
            key: high
            for key, high in self.high.get(instant, {}).items()
            if high is not None and high == low.get(key) and whole.get(key) is not None
        }

    def hour(self, instant: str) -> HourSums:
        """The sums of the hour evaluated at ``instant``."""
        t1 = Decimal(instant)
        start = f"{t1 - 3600:.3f}"
        return HourSums(
            t1,
            self.high.get(instant, {}),
            self.low.get(instant, {}),
            self.whole.get(instant, {}),
            self.back.get(start, {}),
            self.at.get(instant, {}),
            self.before.get(start, {}),
            self.before.get(instant, {}),
        )


@dataclass(frozen=True, slots=True)
class HourSums:
    """What :class:`Sums` holds of one hour (evaluated at ``t1``), per series: the max, min
    and sum over its window, the sum of the window's look-back, a sample at t1, the last
    sample before t0 and before t1."""

    t1: Decimal
    high: dict[Key, Decimal | None]
    low: dict[Key, Decimal | None]
    whole: dict[Key, Decimal | None]
    back: dict[Key, Decimal | None]
    at: dict[Key, Decimal | None]
    before: dict[Key, Decimal | None]
    last: dict[Key, Decimal | None]

    def regular(self, key: Key, times: list[Decimal], loader: Loader) -> Regular | None:
        """A :class:`Regular` series (samples at ``times``) for this hour (None: the sums do
        not pin it down: a NaN or infinity, a value missing)."""
        high = self.high.get(key)
        low = self.low.get(key)
        whole = self.whole.get(key)
        if high is None or low is None or whole is None:
            return None
        back = self.back.get(key)
        # the samples before t0 are the look-back's; a sample at t1 exactly is the next hour's
        total = whole - (back or ZERO)
        if times and times[-1] == self.t1:
            at_end = self.at.get(key)
            if at_end is None:
                return None
            total -= at_end
        peak = max(abs(high), abs(low))
        # the engine's float sums (of the window and of its look-back, either order) and the
        # float value behind each decimal text: each at most n * n ulps of the peak away
        # (4 * ULP * n * n * peak, n = len(times) + 2; all but the peak worked out once per n)
        error = _ulps(len(times) + 2) * peak
        return Regular(
            times, total, error, peak, self.before.get(key), self.last.get(key), key, loader
        )


@functools.cache
def _ulps(n: int) -> Decimal:
    """4 * ULP * n * n, in that order (costsvc/ingest/gauges/regular.py ``HourSums.regular``)."""
    return FOUR_ULP * n * n
