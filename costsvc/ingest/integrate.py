"""Integrate sampled series over an hour, honestly.

A sample holds from its timestamp until the next sample of the same series — but never longer
than ``max_gap``: before a longer silence (a scrape gap, not billed as held) and at the end
of a series, a sample holds for one scrape interval (the series' median spacing) — and never
past the window. The window is
[start, end); samples before ``start`` (read with a look-back of ``max_gap``) only carry their
value into the window. Time is in seconds, values are Decimal, results are exact Decimals.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from decimal import Decimal

Sample = tuple[Decimal, Decimal]  # (unix seconds, value)


def interval(samples: Sequence[Sample]) -> Decimal | None:
    """The series' scrape interval: the median spacing of its samples (None: one sample)."""
    spacings = sorted(b[0] - a[0] for a, b in itertools.pairwise(samples))
    return spacings[len(spacings) // 2] if spacings else None


def max_gap_for(
    samples: Sequence[Sample], floor: Decimal, ceiling: Decimal, step: Decimal | None = None
) -> Decimal:
    """The longest silence that is still held: two scrape intervals, within [floor, ceiling]
    (so a missed scrape or two is not a gap, at any scrape interval)."""
    if step is None:
        step = interval(samples)
    return floor if step is None else min(max(floor, 2 * step), ceiling)


def integral(
    samples: Sequence[Sample],
    start: Decimal,
    end: Decimal,
    max_gap: Decimal,
    step: Decimal | None = None,
) -> Decimal:
    """∫ value dt over [start, end) with the holding rule above; samples sorted by time.
    ``step``: the series' scrape interval when the caller has it (else it is measured)."""
    total = Decimal(0)
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
            total += v * (until - since)
    return total


def covered(samples: Sequence[Sample], start: Decimal, end: Decimal, max_gap: Decimal) -> Decimal:
    """Seconds of [start, end) during which the series was known (whatever its value)."""
    return integral([(t, Decimal(1)) for t, _ in samples], start, end, max_gap)


def mean(samples: Sequence[Sample], start: Decimal, end: Decimal, max_gap: Decimal) -> Decimal:
    """Time-weighted mean over the known part of the window (0 when nothing is known)."""
    known = covered(samples, start, end, max_gap)
    return integral(samples, start, end, max_gap) / known if known else Decimal(0)
