"""The gauges' rule: what a holding measured in one hour, at sample resolution.

Both gauge sources (our exporter's before its integrals: costsvc/ingest/gauges/exporter.py;
dcgm-exporter + kube-state-metrics: costsvc/ingest/gauges/dcgm.py) read their series through
:class:`GaugeHour` and turn a holding's series into facts with :func:`measure`, so the two apply
one rule:

- a holding's share is a step function of time (:func:`costsvc.ingest.gauges.sampled.pieces`);
  time its GPU is reported lost (``gpu_device_up`` 0) is cut out of it — never charged to the
  holder, it is idle, and counted as the GPU's ``lost_seconds``;
- **used** is ∫ share(t) x utilisation(t) dt over the samples the holder actually held, not
  its share x the GPU's hour average: a pod that held a GPU 10:00-10:30 at 80 % and left is
  80 % efficient whatever the GPU did after. Where utilisation is unknown for part of the
  held time (a scrape gap in the utilisation series only), the efficiency of the part that
  was measured stands for the rest; where it is unknown for all of it, the holding's
  efficiency is unknown (None), never 0 % or 100 %;
- on a shared GPU (time-slice / MPS), the holder's own SM time counts only while it held a
  replica and the GPU was available, capped at its share (costsvc/rules/attribution.py).

A usage series read as sums (costsvc/ingest/gauges/regular.py ``Regular``) is integrated from
them (:meth:`GaugeHour.integral`, :func:`measure_read`) where that gives the figure its samples
would; elsewhere its samples are read and measured as above.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from costsvc.ingest.gauges import regular, steady
from costsvc.ingest.gauges.sampled import (
    Piece,
    Sample,
    covered,
    interval,
    max_gap_for,
    overlap,
    pieces,
    summed,
    total,
    without,
)
from costsvc.ingest.hour import MAX_GAP, PRESENCE_GAP, SCRAPE_GAP, Holes, HourReads
from costsvc.ingest.prom import Series

if TYPE_CHECKING:
    from costsvc.ingest.reader import RunReader

SLACK = Decimal("1e-24")  # Decimal's 28 digits, summed in another order


@dataclasses.dataclass(frozen=True, slots=True)
class Regularity:
    """How a target's samples hold over an hour where its scrapes are evenly spaced: the
    look-back sample ``before`` seconds (0: none holds into the hour), each of the ``count``
    samples in the hour ``step`` seconds but the last, which holds ``last``."""

    before: Decimal
    step: Decimal
    count: int
    last: Decimal


def merged(series: Iterable[Series]) -> Sequence[Sample]:
    """The samples of several series of one thing, in time order (one per instant); of one
    series, its own samples (already so: a steady series' stay :class:`steady.Steady`)."""
    series = list(series)
    if len(series) == 1:
        return series[0].samples
    by_time = {t: v for s in series for t, v in s.samples}
    return sorted(by_time.items())


def highest(samples: Sequence[Sample]) -> Decimal:
    """The highest value of a series' samples (a steady series': its value)."""
    if isinstance(samples, steady.Steady):
        return samples.value
    return max(v for _, v in samples)


class GaugeHour(HourReads):
    """One hour read from the gauges: each series a step function of time by the honest gap
    rule (a steady series' shape worked out once per target), integrated at sample
    resolution, or from its sums where they tell the integral."""

    def __init__(self, reader: RunReader, start: datetime, cluster: str) -> None:
        super().__init__(reader, start, cluster)
        self._shapes: dict[tuple[int, bool], tuple[list[Decimal], list[Piece]]] = {}
        self._regular: dict[int, tuple[list[Decimal], Regularity | None]] = {}

    def pieces(self, samples: Sequence[Sample]) -> list[Piece]:
        """The series as a step function over the hour, with the honest gap rule (a steady
        series': its target's shape, worked out once, with its value)."""
        if isinstance(samples, steady.Steady):
            v = samples.value
            return [(a, b, v) for a, b, _ in self._shape(samples.times, False)]
        step = interval(samples)
        gap = max_gap_for(samples, SCRAPE_GAP, MAX_GAP, step)
        return pieces(samples, self.t0, self.t1, gap, step)

    def function(self, group: Iterable[Series]) -> list[Piece]:
        """The sum of several series of one thing (each with its own gaps) over the hour."""
        return summed(self.pieces(s.samples) for s in group)

    def present(self, samples: Sequence[Sample]) -> Decimal:
        if isinstance(samples, steady.Steady):
            return total(self._shape(samples.times, True))
        return covered(samples, self.t0, self.t1, PRESENCE_GAP)

    def _shape(self, times: list[Decimal], presence: bool) -> list[Piece]:
        """Pieces of value 1 at ``times``: with the honest gap rule (:meth:`pieces`), or with
        the presence rule (:meth:`present`); the same for every steady series of a target."""
        key = (id(times), presence)
        found = self._shapes.get(key)
        if found is None or found[0] is not times:
            one = Decimal(1)
            ones = [(t, one) for t in times]
            if presence:
                shape = pieces(ones, self.t0, self.t1, PRESENCE_GAP, interval(ones))
            else:
                step = interval(ones)
                gap = max_gap_for(ones, SCRAPE_GAP, MAX_GAP, step)
                shape = pieces(ones, self.t0, self.t1, gap, step)
            found = self._shapes[key] = (times, shape)
        return found[1]

    def integral(self, samples: Sequence[Sample]) -> tuple[Decimal, Decimal] | None:
        """∫ value dt over the hour of a series read as sums (:class:`regular.Regular`), with
        the holding rule of :meth:`pieces`: (the value, a bound on its error: the engine's
        float sums). None where its target's scrapes in the hour are not evenly spaced (a
        scrape late by more than Prometheus' timestamp tolerance, a gap) or a value the
        integral needs is missing: then only its samples tell."""
        if not isinstance(samples, regular.Regular):
            return None
        shape = self._regularity(samples.times)
        if shape is None:
            return None
        found = Decimal(0)
        if shape.before:  # the look-back sample, held into the hour
            if samples.before is None:
                return None
            found += samples.before * shape.before
        if shape.count:  # every sample in the hour holds one step, but the last
            if samples.last is None:
                return None
            found += shape.step * (samples.total - samples.last) + samples.last * shape.last
        # the error of the engine's sums, and a hair for rounding at Decimal's 28 digits
        # (the integral of the samples, summed in another order)
        return found, shape.step * samples.error + abs(found) * SLACK + SLACK

    def _regularity(self, times: list[Decimal]) -> Regularity | None:
        """How the samples at ``times`` hold over the hour (:meth:`integral`), worked out
        once per target."""
        found = self._regular.get(id(times))
        if found is None or found[0] is not times:
            one = Decimal(1)
            ones = [(t, one) for t in times]
            step = interval(ones)
            gap = max_gap_for(ones, SCRAPE_GAP, MAX_GAP, step)
            each = pieces(ones, self.t0, self.t1, gap, step, join=False)  # a sample's own piece
            held = [until - since for since, until, _ in each]
            inside = sum(1 for t in times if self.t0 <= t < self.t1)  # each holds a while
            before = held[0] if len(held) == inside + 1 else Decimal(0)
            held = held[len(held) - inside :]
            shape = None
            if all(d == held[0] for d in held[:-1]):
                shape = Regularity(
                    before,
                    held[0] if inside > 1 else Decimal(0),
                    inside,
                    held[-1] if held else Decimal(0),
                )
            found = self._regular[id(times)] = (times, shape)
        return found[1]

    def lost(self, up: Sequence[Sample]) -> Holes:
        """When ``gpu_device_up`` said 0 (the GPU lost), as intervals of the hour."""
        out: Holes = []
        for since, until, v in self.pieces(up):
            if v != 0:
                continue
            if out and out[-1][1] == since:
                out[-1] = (out[-1][0], until)
            else:
                out.append((since, until))
        return out


def measure(
    share: Sequence[Piece],
    lost: Holes,
    utilisation: Sequence[Piece] | None,
    sm: Sequence[Piece] | None,
) -> tuple[Decimal, Decimal | None, Decimal | None]:
    """A holding's (share seconds, utilisation of what it held, own SM seconds while held).

    ``share``: its share of the physical GPU over the hour; ``lost``: when the GPU was lost
    (cut out); ``utilisation``: the device's (GPU or MIG instance) utilisation 0..1, None when
    it has no series; ``sm``: the holder's own SM utilisation of the GPU, None when unknown.
    The utilisation is None (unknown) when no utilisation sample falls in the held time."""
    held = [p for p in without(share, lost) if p[2] > 0]
    return total(held), _utilisation(held, utilisation), _own(held, sm)


def _utilisation(held: Sequence[Piece], utilisation: Sequence[Piece] | None) -> Decimal | None:
    if utilisation is None:
        return None
    one = Decimal(1)
    busy = measured = Decimal(0)
    for since, until, s, u in overlap(held, utilisation):
        part = s * (until - since)
        measured += part
        busy += part * (u if u < one else one)
    return busy / measured if measured else None


def _own(held: Sequence[Piece], sm: Sequence[Piece] | None) -> Decimal | None:
    if sm is None:
        return None
    own = Decimal(0)
    for since, until, _, v in overlap(held, sm):
        own += v * (until - since)
    return own


Bounds = tuple[Decimal, Decimal]  # the least and the most a figure can be


@dataclasses.dataclass
class Usage:
    """What a holder used over the hour: its device's utilisation (``percent``: the values
    are percent) or its own SM time (``summed``: the sum of its series, each with its own
    gaps; else one function of their samples merged)."""

    series: list[Series]
    percent: bool = False
    summed: bool = False
    _pieces: list[Piece] | None = None

    def pieces(self, w: GaugeHour) -> list[Piece]:
        """The step function over the hour (its samples read now where they were not)."""
        if self._pieces is None:
            if self.summed:
                self._pieces = w.function(self.series)
            elif self.percent:
                self._pieces = [(a, b, v / 100) for a, b, v in w.pieces(merged(self.series))]
            else:
                self._pieces = w.pieces(merged(self.series))
        return self._pieces

    @property
    def ready(self) -> bool:
        """Its samples are at hand (no series read as sums only)."""
        return not any(_unread(s.samples) for s in self.series)

    def integral(
        self, w: GaugeHour, times: list[Decimal]
    ) -> tuple[Decimal, Decimal, Decimal] | None:
        """∫ value dt over the hour (:meth:`GaugeHour.integral`) of a usage that is one series
        read as sums over the target scraped at ``times``: (value, error bound, the largest
        value); None where its samples are needed."""
        if len(self.series) != 1:
            return None
        samples = self.series[0].samples
        if not isinstance(samples, regular.Regular) or samples.times is not times:
            return None
        found = w.integral(samples)
        if found is None:
            return None
        value, error = found
        if self.percent:
            return value / 100, error / 100, samples.peak / 100
        return value, error, samples.peak


def _unread(samples: Sequence[Sample]) -> bool:
    return isinstance(samples, regular.Regular) and not samples.loaded


def measure_read(
    w: GaugeHour,
    share: Sequence[Sequence[Sample]],
    lost: Holes,
    utilisation: Usage | None,
    sm: Usage | None,
) -> tuple[Decimal, Bounds | None, Bounds | None] | None:
    """:func:`measure` of a holding whose share is one steady series on a GPU never lost,
    without reading the samples of a usage read as sums (:class:`regular.Regular`) on the
    same target: (share seconds, bounds of the utilisation, bounds of the own SM seconds).
    None where that cannot be done: the caller reads the samples and measures them."""
    if lost or len(share) != 1 or not isinstance(share[0], steady.Steady):
        return None
    times = share[0].times
    held = [p for p in w.pieces(share[0]) if p[2] > 0]
    span = sum((b - a for a, b, _ in held), Decimal(0))
    told, util = _bounds(w, utilisation, held, times, span)
    if not told:
        return None
    told, own = _bounds(w, sm, held, times, None)
    if not told:
        return None
    return total(held), util, own


def _bounds(
    w: GaugeHour,
    usage: Usage | None,
    held: list[Piece],
    times: list[Decimal],
    span: Decimal | None,
) -> tuple[bool, Bounds | None]:
    """Whether a usage's figure over the ``held`` pieces can be told without reading its
    samples, and its bounds (None: no usage, or none in what was held): its device's
    utilisation of what was held (``span``: the seconds held), or (``span`` None) the
    holder's own SM seconds."""
    if usage is None:
        return True, None
    if usage.ready:
        pieces = usage.pieces(w)
        found = _own(held, pieces) if span is None else _utilisation(held, pieces)
        return True, None if found is None else (found, found)
    summed = usage.integral(w, times)
    if summed is None:
        return False, None
    value, error, peak = summed
    if span is None:
        return True, (value - error, value + error)
    if peak > 1 or not span:
        return False, None  # a value above 1 is capped sample by sample: read them
    return True, ((value - error) / span, (value + error) / span)


def grouped(
    w: GaugeHour,
    selector: str,
    key: Callable[[dict[str, str]], tuple[str, ...]],
    look_back: Decimal = MAX_GAP,
) -> dict[tuple[str, ...], list[Series]]:
    """The series of ``selector`` grouped by what they describe (``key`` of their labels)."""
    out: dict[tuple[str, ...], list[Series]] = {}
    for s in w.raw(selector, look_back):
        out.setdefault(key(s.labels), []).append(s)
    return out
