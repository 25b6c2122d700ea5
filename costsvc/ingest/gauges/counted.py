"""Counters read as their edge values: the energy counter.

``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (costsvc/ingest/gauges/power.py) is read for every GPU,
every hour, and its value changes at every scrape: read raw it was the largest read of a re-ingest
(66,000 samples an hour at 1,000 GPUs, more than a third of all). What the hour needs of it is
its increase by the one counter rule (costsvc/ingest/gauges/sampled.py ``increase``): where the
series has no reset, no NaN and no gap in the raw read's window, every pair inside the hour
telescopes, and the rule needs three samples only — the last before the hour's start ``t0``
(the pair across it), the first at or after ``t0`` and the last. Their times are the series'
target's ``up == 1`` timestamps (costsvc/ingest/gauges/steady.py: a series whose sample count equals
them has its samples exactly there); their values come from per-hour summaries, one
``query_range`` per expression and block of hours:

- ``count_over_time`` (costsvc/ingest/gauges/steady.py, as for every summarised selector);
- ``resets(sel[W]) == 0``: the values never go down in the window, so the first sample at or
  after ``t0`` is the smallest there and the last is the largest;
- ``sum_over_time(sel[W])`` finite: no NaN sample (the raw read drops one; Prometheus' other
  functions skip it or count it);
- the first: ``min_over_time(sel[3600001ms])`` at the hour's end — the window (t0 - 1 ms, t1]
  on Prometheus 3 and VictoriaMetrics, [t0 - 1 ms, t1] on Prometheus 2, either way the samples
  at or after ``t0`` unless one lies at ``t0 - 1 ms`` exactly (then the samples are read);
- the last: ``last_over_time(sel[W])`` at the hour's end (W: the raw read's window);
- the one before ``t0``: ``last_over_time(sel[L] offset 1ms)`` at the hour's start (L: the
  look-back), as costsvc/ingest/gauges/regular.py reads an edge.

The three samples given to the counter rule, with the gap check already done on the target's
times, give exactly the :class:`~costsvc.ingest.gauges.sampled.Increase` the raw samples give: the
same pair across ``t0``, the same telescoped run, in the same Decimal operations. Anything
else — a reset, a gap, a missing value, a GPU whose series must be merged — reads the samples
(:class:`Counter` reads them, an ``Unread`` series as costsvc/ingest/gauges/regular.py's
``Regular`` is).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from costsvc.ingest.gauges import regular
from costsvc.ingest.gauges.regular import BlockAsk, BlockSums, Loader, Table, Unread
from costsvc.ingest.gauges.sampled import Increase, Sample, increase, max_gap_for, spacing
from costsvc.ingest.series import Key
from costsvc.rules.energy import ENERGY

MS = Decimal("0.001")
NO_GAP = Decimal("Infinity")  # (the gap check done on the times: the rule's is not needed)

COUNTED = frozenset({ENERGY})  # the counters read as their edge values


class Counter(Unread):
    """A counter series (costsvc/ingest/gauges/power.py ``COUNTED``): ``before``, the value of the
    last sample before the hour's start; ``first``, of the first at or after it; ``last``, of
    the last (None: not summarised). Iterated, it alone is read (:func:`load` reads those whose
    edges do not tell at once)."""

    __slots__ = ("before", "first", "last")
    LOADS_ALL = False

    def __init__(
        self,
        times: list[Decimal],
        before: Decimal | None,
        first: Decimal | None,
        last: Decimal | None,
        key: Key,
        loader: Loader | None,
    ) -> None:
        super().__init__(times, key, loader)
        self.before, self.first, self.last = before, first, last

    def increase(self, start: Decimal, end: Decimal, floor: Decimal, ceiling: Decimal) -> Increase:
        """The counter rule's increase over [start, end) (``floor``/``ceiling``: the gap
        limit's bounds), from the three samples where they tell, else from the samples."""
        gap = self._gap(floor, ceiling)
        three = None if self._samples is not None else self._three(start, end, gap)
        if three is None:
            return increase(self.samples, start, end, gap)
        return increase(three, start, end, NO_GAP)

    def tells(self, start: Decimal, end: Decimal, floor: Decimal, ceiling: Decimal) -> bool:
        """Whether :meth:`increase` needs no samples."""
        return (
            self._samples is not None
            or self._three(start, end, self._gap(floor, ceiling)) is not None
        )

    def _gap(self, floor: Decimal, ceiling: Decimal) -> Decimal:
        """The gap limit of the series (costsvc/ingest/gauges/sampled.py ``max_gap_for``), from its
        times."""
        return max_gap_for((), floor, ceiling, spacing(self.times))

    def _three(self, start: Decimal, end: Decimal, gap: Decimal) -> list[Sample] | None:
        """The samples the counter rule needs over [start, end) when no pair of the window
        is a reset or a gap (module docstring); None: the samples must tell."""
        times = self.times
        first = bisect.bisect_left(times, start)
        if first == len(times):  # no sample in the hour: nothing counted
            return []
        before, at_first, last = self.before, self.first, self.last
        if (
            (first and before is None)
            or at_first is None
            or last is None
            or (first and times[first - 1] == start - MS)  # (Prometheus 2's window, above)
            or times[-1] > end
            or any(b - a > gap for a, b in itertools.pairwise(times[max(first - 1, 0) :]))
        ):
            return None
        three: list[Sample] = [(times[first - 1], before)] if first else []  # type: ignore[list-item]
        three.append((times[first], at_first))
        if len(times) - 1 > first:
            three.append((times[-1], last))
        return three


def load(
    counters: Iterable[Counter], start: Decimal, end: Decimal, floor: Decimal, ceiling: Decimal
) -> None:
    """Read the samples of those of ``counters`` whose edges do not tell their increase over
    [start, end), one read per selector and hour (the rest stay unread)."""
    regular.load(c for c in counters if not c.tells(start, end, floor, ceiling))


@dataclass
class CounterSums(BlockSums):
    """What the engine summarised of a counter (costsvc/ingest/gauges/power.py ``COUNTED``) over a
    block of hours: per evaluation instant (the hour's end) and series, whether it never went
    down (``rising``) and has no NaN in the window (``whole``), its first sample at or after
    the hour's start and its last; per hour start, the last sample before it (``before``)."""

    rising: Table = field(default_factory=dict)
    first: Table = field(default_factory=dict)
    last: Table = field(default_factory=dict)

    def fill(self, ask: BlockAsk) -> None:
        """The block's summaries, each in one range query."""
        selector, seconds = ask.selector, ask.seconds
        w = f"{selector}[{seconds}s]"
        for found, expr in (
            (self.rising, f"resets({w}) == 0"),
            (self.whole, f"sum_over_time({w})"),
            (self.first, f"min_over_time({selector}[3600001ms])"),
            (self.last, f"last_over_time({w})"),
        ):
            ask.into(found, expr)
        back = f"last_over_time({selector}[{seconds - 3600}s] offset 1ms)"
        ask.into(self.before, back, ask.start - timedelta(hours=1))

    def counter(
        self, instant: str, key: Key, times: list[Decimal], loader: Loader
    ) -> Counter | None:
        """The series as a :class:`Counter` for the hour ending at ``instant`` (None: its
        values may go down or hold a NaN in the window: its samples are read)."""
        if self.rising.get(instant, {}).get(key) is None:
            return None
        if self.whole.get(instant, {}).get(key) is None:
            return None
        start = f"{Decimal(instant) - 3600:.3f}"
        return Counter(
            times,
            self.before.get(start, {}).get(key),
            self.first.get(instant, {}).get(key),
            self.last.get(instant, {}).get(key),
            key,
            loader,
        )
