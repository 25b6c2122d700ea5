"""Integrate sampled series over an hour, honestly.

A sample holds from its timestamp until the next sample of the same series — but never longer
than ``max_gap``: before a longer silence (a scrape gap, not billed as held) and at the end
of a series, a sample holds for one scrape interval (the series' median spacing) — and never
past the window. The window is
[start, end); samples before ``start`` (read with a look-back of ``max_gap``) only carry their
value into the window. Time is in seconds, values are Decimal, results are exact Decimals.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

Sample = tuple[Decimal, Decimal]  # (unix seconds, value)
Piece = tuple[Decimal, Decimal, Decimal]  # [since, until) seconds, value


def interval(samples: Sequence[Sample]) -> Decimal | None:
    """The series' scrape interval: the median spacing of its samples (None: one sample)."""
    if len(samples) < 2:
        return None
    return spacing([t for t, _ in samples])


def spacing(times: Sequence[Decimal]) -> Decimal | None:
    """The median spacing of sorted sample times (None: fewer than two)."""
    if len(times) < 2:
        return None
    spacings = sorted([b - a for a, b in itertools.pairwise(times)])
    return spacings[len(spacings) // 2]


def max_gap_for(
    samples: Sequence[Sample], floor: Decimal, ceiling: Decimal, step: Decimal | None = None
) -> Decimal:
    """The longest silence that is still held: two scrape intervals, within [floor, ceiling]
    (so a missed scrape or two is not a gap, at any scrape interval)."""
    if step is None:
        step = interval(samples)
    return floor if step is None else min(max(floor, 2 * step), ceiling)


def pieces(
    samples: Sequence[Sample],
    start: Decimal,
    end: Decimal,
    max_gap: Decimal,
    step: Decimal | None = None,
    join: bool = True,
) -> list[Piece]:
    """The series as a step function over [start, end): (since, until, value) pieces in time
    order, none overlapping, with the holding rule above; samples sorted by time. Adjacent
    pieces of one value are one piece (a steady series over a gapless hour is one piece);
    ``join`` False: each sample's own piece (a sample that holds nothing in the window has
    none). ``step``: the series' scrape interval when the caller has it (else it is
    measured)."""
    out: list[Piece] = []
    if step is None:
        step = interval(samples)
    last_hold = max_gap if step is None else min(step, max_gap)
    n = len(samples)
    for i in range(n):
        t, v = samples[i]
        if t >= end:
            break
        nxt = samples[i + 1][0] if i + 1 < n else t + last_hold
        if nxt - t > max_gap:  # a gap (or the end of the series): hold one scrape interval
            nxt = t + last_hold
        until = nxt if nxt < end else end
        since = t if t > start else start
        if until > since:
            if join and out and out[-1][1] == since and out[-1][2] == v:
                out[-1] = (out[-1][0], until, v)  # the same value held on: one piece
            else:
                out.append((since, until, v))
    return out


def integral(
    samples: Sequence[Sample],
    start: Decimal,
    end: Decimal,
    max_gap: Decimal,
    step: Decimal | None = None,
) -> Decimal:
    """∫ value dt over [start, end) with the holding rule above; samples sorted by time.
    ``step``: the series' scrape interval when the caller has it (else it is measured)."""
    return total(pieces(samples, start, end, max_gap, step))


def total(ps: Iterable[Piece]) -> Decimal:
    """∫ of a step function."""
    return sum((v * (until - since) for since, until, v in ps), Decimal(0))


def summed(functions: Iterable[Sequence[Piece]]) -> list[Piece]:
    """The sum of several step functions (e.g. the series of one holding across a label change),
    as non-overlapping pieces; where none is defined, the sum is undefined (no piece)."""
    functions = list(functions)
    if len(functions) == 1:  # the common case: one series, already non-overlapping
        return list(functions[0])
    edges: dict[Decimal, Decimal] = {}  # time -> change of the value there
    count: dict[Decimal, int] = {}  # time -> change of how many functions are defined
    for f in functions:
        for since, until, v in f:
            edges[since] = edges.get(since, Decimal(0)) + v
            edges[until] = edges.get(until, Decimal(0)) - v
            count[since] = count.get(since, 0) + 1
            count[until] = count.get(until, 0) - 1
    out: list[Piece] = []
    value, defined = Decimal(0), 0
    times = sorted(edges)
    for a, b in itertools.pairwise(times):
        value += edges[a]
        defined += count[a]
        if defined > 0:
            out.append((a, b, value))
    return out


def overlap(
    a: Sequence[Piece], b: Sequence[Piece]
) -> list[tuple[Decimal, Decimal, Decimal, Decimal]]:
    """(since, until, value of a, value of b) wherever both step functions are defined; each
    sorted and non-overlapping (as :func:`pieces` and :func:`summed` give them)."""
    out = []
    i = j = 0
    na, nb = len(a), len(b)
    while i < na and j < nb:
        a0, a1, va = a[i]
        b0, b1, vb = b[j]
        since = a0 if a0 > b0 else b0
        until = a1 if a1 < b1 else b1
        if until > since:
            out.append((since, until, va, vb))
        if a1 <= b1:
            i += 1
        else:
            j += 1
    return out


def without(ps: Sequence[Piece], holes: Sequence[tuple[Decimal, Decimal]]) -> list[Piece]:
    """The step function with the intervals ``holes`` (sorted, non-overlapping) cut out."""
    out: list[Piece] = []
    j = 0
    for since, until, v in ps:
        while j < len(holes) and holes[j][1] <= since:
            j += 1
        k, t = j, since
        while k < len(holes) and holes[k][0] < until:
            if holes[k][0] > t:
                out.append((t, holes[k][0], v))
            t = max(t, holes[k][1])
            k += 1
        if t < until:
            out.append((t, until, v))
    return out


def covered(samples: Sequence[Sample], start: Decimal, end: Decimal, max_gap: Decimal) -> Decimal:
    """Seconds of [start, end) during which the series was known (whatever its value)."""
    return integral([(t, Decimal(1)) for t, _ in samples], start, end, max_gap)


def mean(samples: Sequence[Sample], start: Decimal, end: Decimal, max_gap: Decimal) -> Decimal:
    """Time-weighted mean over the known part of the window (0 when nothing is known)."""
    known = covered(samples, start, end, max_gap)
    return integral(samples, start, end, max_gap) / known if known else Decimal(0)


@dataclass(frozen=True, slots=True)
class Increase:
    """What a counter counted over a window (:func:`increase`)."""

    total: Decimal  # everything it counted (across gaps too)
    gap: Decimal  # the part counted across silences longer than the gap limit
    seconds: Decimal  # the time covered outside such silences


def increase(samples: Sequence[Sample], start: Decimal, end: Decimal, max_gap: Decimal) -> Increase:
    """The increase of a counter over [start, end): **the one counter rule** (energy in mJ,
    costsvc/rules/energy.py; served tokens and requests, costsvc/ingest/tokens.py). Samples are
    sorted by time (strictly increasing) and may begin before ``start`` (a look-back).

    Each pair of consecutive samples adds its increase — the later value when the counter
    went down (a reset: a driver reload, a restarted server, as Prometheus' ``increase()``
    counts it) — spread evenly over the pair's interval, the part of it inside the window
    counted. A pair further apart than ``max_gap`` (a scrape gap) still counts (the counter
    kept counting) but as ``gap``: nobody's holding is known then. Runs of ordinary pairs
    inside the window add up to last - first."""
    times = [t for t, _ in samples]
    values = [v for _, v in samples]
    n = len(samples)
    total = gap = seconds = Decimal(0)

    def pair(k: int) -> None:  # the pair k -> k + 1, by the rule above
        nonlocal total, gap, seconds
        ta, tb = times[k], times[k + 1]
        if tb <= start or ta >= end:
            return
        va, vb = values[k], values[k + 1]
        rise = vb - va if vb >= va else vb
        since, until = max(ta, start), min(tb, end)
        part = rise if (since, until) == (ta, tb) else rise * (until - since) / (tb - ta)
        total += part
        if tb - ta > max_gap:
            gap += part
        else:
            seconds += until - since

    first = bisect.bisect_left(times, start)  # the first sample at or after start
    last = bisect.bisect_right(times, end) - 1  # the last sample at or before end
    if first > last:  # no sample inside: at most one pair across the whole window
        if 0 < first < n:
            pair(first - 1)
    else:
        if first > 0:
            pair(first - 1)  # across start
        odd = [
            k
            for k in range(first, last)
            if values[k + 1] < values[k] or times[k + 1] - times[k] > max_gap
        ]
        run = first
        for k in [*odd, last]:  # ordinary runs telescope; resets and gaps pair by pair
            total += values[k] - values[run]
            seconds += times[k] - times[run]
            if k == last:
                break
            pair(k)
            run = k + 1
        if last + 1 < n:
            pair(last)  # across end
    return Increase(total, gap, seconds)
