"""Time integrals at collection resolution, published as counters.

A gauge scraped every minute tells a reader its value at each scrape; what a bill needs of it is
its integral over an hour, which a reader can only approximate from the scrapes, or compute
from every sample it reads back (the cost service's sample-resolution rule, docs/cost-model.md).
The exporter sees every collection (every 5 s by default): it adds each value x the time it held
to a running total and publishes the total as a counter (``gpu_allocation_share_seconds_total``
and the rest of docs/metrics.md, "Integrals"), so any two scrapes of a counter give the integral
between them, finer than the scrape and whatever was missed in between.

The rule, at collection resolution (the one the cost service applies to samples, at the
exporter's own pace):

- a reading that describes an instant (a share held, a utilisation, a GPU up or down) holds from
  its collection to the next: at each collection the totals grow by the previous collection's
  value x the time since it (:meth:`Integrals.advance` ``ahead``);
- a reading that describes the interval just ended (a container's SM utilisation, NVML's mean
  over the process samples since the last collection) covers the time since the previous
  collection (``behind``);
- a gap longer than :data:`GAP` collection intervals (the exporter stalled, NVML failed to
  initialise) counts as one interval, as a silence does in the cost service: what was not seen
  is not integrated;
- a series first seen starts at 0; a series no longer seen stays published, at its final
  total, for :data:`KEEP` seconds (so the scrape after its last collection sees the time its
  last reading held), then is dropped: if it comes back it starts again at 0, as after an
  exporter restart;
- a sparse family (``sparse``: the unmeasured share-seconds) is published only from a series'
  first nonzero reading on, so a holding whose use is always measured adds no series of it;
- every series carries the wall-clock time its total started at 0 as the label
  :data:`STARTED` (seconds since the epoch, to the millisecond). A total that starts again (the
  series back after it was dropped, a new exporter process) is a new series, so a series'
  values never go down: a reader takes the difference of any two of its scrapes as what it grew
  between them, with no ``resets`` read to look for a restart in between (the cost service's
  hour, costsvc/ingest/integrals.py; PromQL's ``increase`` and ``rate`` are unchanged). It is
  what OpenMetrics' ``_created`` tells, in the series' identity instead of a second series per
  counter (text format: a gauge family of its own). It adds series only where a total starts
  again — a holding back after its series was dropped, every series of a restarted exporter —
  as a restarted container's series do in cAdvisor; series come and go with the holdings they
  count, never with the scrapes.

Totals are float seconds: a float64 keeps a month of seconds (2.6e6) to within 5e-10 s, far
below the microsecond the cost service rounds durations to.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from exporter.render.exposition import Family

GAP = 2  # collection intervals: a longer gap between collections counts as one interval
KEEP = 600.0  # seconds an ended series stays published: twice the longest scrape interval
# the cost service reads (300 s, costsvc/ingest/window.py MAX_GAP)

STARTED = "started"  # the label: when a series' total started at 0 (wall clock, seconds)
# the share-seconds' label: the share they integrate (a share that changes makes a new series;
# worked out with the rates, exporter/render/families.py)
SHARE_LABEL = "share"

Key = tuple[str, str]  # (family name, label text)


@dataclass(slots=True)
class _Total:
    value: float
    seen: float  # monotonic time of the last collection that had it
    labels: str  # the series' label text, its start (:data:`STARTED`) included


class Integrals:
    """Running totals of rates over time, by (family, labels): :meth:`advance` once per
    collection, :meth:`families` for the exposition. ``helps``: each family's help text, in the
    order the families are published. ``sparse``: the families whose series start at their first
    nonzero reading. ``clock``: the wall clock a series' start is read from."""

    def __init__(
        self,
        interval: float,
        helps: Mapping[str, str],
        keep: float = KEEP,
        clock: Callable[[], float] = time.time,
        sparse: frozenset[str] = frozenset(),
    ) -> None:
        self.interval = interval
        self.keep = keep
        self._clock = clock
        self._sparse = sparse
        self._helps = dict(helps)
        self._totals: dict[Key, _Total] = {}
        self._ahead: dict[Key, float] = {}  # the last collection's instant readings
        self._last: float | None = None  # monotonic time of the last collection

    def advance(
        self,
        now: float,
        ahead: Mapping[Key, float],
        behind: Mapping[Key, float] | None = None,
    ) -> None:
        """One collection at ``now`` (monotonic): ``ahead`` — readings of an instant, held
        until the next collection; ``behind`` — readings over the interval since the previous
        collection."""
        totals = self._totals
        if self._sparse:  # (a sparse family's zero readings: none until its first nonzero one)
            sparse = self._sparse
            ahead = {k: r for k, r in ahead.items() if r or k[0] not in sparse or k in totals}
        held = None if self._last is None else self._held(now - self._last)
        if held is not None:
            for key, rate in self._ahead.items():
                totals[key].value += rate * held
        started: str | None = None  # (read once per collection, for the series it starts)
        for key in (*ahead, *(behind or ())):
            found = totals.get(key)
            if found is None:
                if started is None:
                    started = f'{STARTED}="{self._clock():.3f}"'
                labels = key[1]
                totals[key] = _Total(0.0, now, f"{labels},{started}" if labels else started)
            else:
                found.seen = now
        if held is not None and behind:
            for key, rate in behind.items():
                totals[key].value += rate * held
        for key in [k for k, t in totals.items() if now - t.seen > self.keep]:
            del totals[key]
        self._ahead = dict(ahead)
        self._last = now

    def _held(self, elapsed: float) -> float:
        if elapsed < 0:  # pragma: no cover - a monotonic clock does not go back
            return 0.0
        return elapsed if elapsed <= GAP * self.interval else self.interval

    def families(self) -> list[Family]:
        """Each family's totals, as counters."""
        by_family: dict[str, list[tuple[str, _Total]]] = {name: [] for name in self._helps}
        for (name, labels), total in self._totals.items():
            by_family.setdefault(name, []).append((labels, total))
        out = []
        for name, found in by_family.items():
            family = Family(name, "counter", self._helps.get(name, ""))
            for _, total in sorted(found, key=lambda item: item[0]):
                family.add(total.labels, total.value)
            out.append(family)
        return out
