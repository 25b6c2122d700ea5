"""What each of our exporter's integral counters grew in an hour, as the integrals' rule reads
them (costsvc/ingest/integrals.py): the counters' names and labels, the block of hours' range
reads (one ``last_over_time`` per family and block, each step's value the next hour's start),
and each series' growth between its last scrapes before the hour's edges — from 0 for a series
that started in the hour, from its samples where it was reset, from the hour's edge where the
hour before was read from the gauges (docs/cost-model.md, "The hour read from the exporter's
integrals").
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar, cast

from costsvc.ingest.hour import MAX_GAP, HourReads
from costsvc.ingest.prom import instant_text
from costsvc.ingest.reader import Answer, RunReader
from costsvc.ingest.series import Key, key_of, picks, read_raw
from costsvc.rules.energy import ENERGY

SHARE = "gpu_allocation_share_seconds_total"
MEMORY = "gpu_allocation_memory_share_seconds_total"
BUSY = "gpu_allocation_busy_share_seconds_total"
UNMEASURED = "gpu_allocation_unmeasured_share_seconds_total"  # only where some time was
# (from the first such collection on): a holding's measured time is its share's less this
MEASURED = "gpu_allocation_measured_share_seconds_total"  # an exporter's before ``started``
SM = "gpu_container_sm_seconds_total"
DEVICE = "gpu_device_seconds_total"
# the GPU's energy counter (mJ; dcgm-exporter's name, ours too): what it grew between the same
# scrapes as the GPU's seconds
FAMILIES = (DEVICE, SHARE, MEMORY, BUSY, UNMEASURED, SM, ENERGY)
# our exporter's counters: a series it starts publishing (first seen, or back after it dropped
# it) starts at 0 (exporter/integrals.py); the energy counter starts where the driver's is
FROM_ZERO = frozenset({DEVICE, SHARE, MEMORY, BUSY, UNMEASURED, MEASURED, SM})
# the label with which our exporter's series tell when their totals started at 0: a total that
# starts again is a new series, so a series with it never goes down and needs no ``resets``
# read (exporter/integrals.py); an exporter before it published none
STARTED = "started"
# the share-seconds' label: the share they integrate (exporter/render/families.py), so a
# holding's largest share in the hour needs no read of the gauge (an exporter before
# ``started`` published none: its holdings' from the gauge, costsvc/ingest/integrals.py's
# ``TOP``, its measured time from :data:`MEASURED`)
SHARE_LABEL = "share"
# each target: whether a scrape of it succeeded in the hour before an instant (a series of it
# with no value there was not published: its exporter had dropped it)
SCRAPED = "max_over_time(up[3600s])"
RESET_WINDOW = 3600 + int(MAX_GAP)  # s: the hour and the scrape before it (at most MAX_GAP)
ASKED_AT_ONCE = 3  # a block's range queries in flight together
# a holding's families are made and dropped together (exporter/integrals.py): its share's
# resets are theirs
RESETS_OF = {
    DEVICE: DEVICE,
    SHARE: SHARE,
    MEMORY: SHARE,
    BUSY: SHARE,
    UNMEASURED: SHARE,
    MEASURED: SHARE,
    SM: SM,
    ENERGY: ENERGY,
}
ZERO = Decimal(0)
K = TypeVar("K")


def once(
    w: HourReads, kind: str, derive: Callable[[dict[str, str]], K]
) -> Callable[[dict[str, str]], K]:
    """``derive`` (a series', GPU's or holding's key), worked out once per series of the block
    of hours ``w`` is in (a series' label set is one dict at every instant of a block's
    answer)."""
    first = w.reader.block(w.at)[0]
    memos = w.reader.integral_keys
    _keep_block(memos, first)
    memo = memos.setdefault((kind, w.cluster, first), {})

    def once(labels: dict[str, str]) -> K:
        hit = memo.get(id(labels))
        if hit is not None and hit[0] is labels:
            return cast(K, hit[1])
        found = derive(labels)
        memo[id(labels)] = (labels, found)
        return found

    return once


def _keep_block(entries: dict[Any, Any], first: str) -> None:
    """Drop the entries (keyed by tuples ending with their block's first instant) of blocks
    other than ``first``'s: an earlier block's are done with."""
    for key in [k for k in entries if k[-1] != first]:
        del entries[key]


def steps(reader: RunReader, expr: str, at: datetime) -> Answer:
    """``expr`` at every planned hour's instant of the block ``at`` is in, and at the instant
    an hour before the block (its first hour's start): by instant, each series' labels and
    value (finite values only). Asked for once per block (:func:`ask`)."""
    found = reader.integral_answers.get((expr, reader.block(at)[0]))
    if found is None:
        ask(reader, at, [expr])
        found = reader.integral_answers[(expr, reader.block(at)[0])]
    return found


def ask(reader: RunReader, at: datetime, exprs: list[str]) -> None:
    """The block's answers to ``exprs`` not asked for yet, asked for together (Prometheus
    answers one while this process decodes another)."""
    first, last = reader.block(at)
    cache = reader.integral_answers
    _keep_block(cache, first)
    todo = [e for e in exprs if (e, first) not in cache]
    start = datetime.fromtimestamp(float(first) - 3600, at.tzinfo)
    end = datetime.fromtimestamp(float(last), at.tzinfo)

    def fetch(expr: str) -> Answer:
        found: Answer = {}
        for labels, values in reader.prom.range_values(expr, start, end, 3600):
            series = id(labels)  # (the answer keeps it: unique while the block is cached)
            for t, v in values:
                number = Decimal(v)
                if number.is_finite():
                    at_t = found.get(t)  # (not setdefault: no dict made per value)
                    if at_t is None:
                        at_t = found[t] = {}
                    at_t[series] = (labels, number)
        return found

    with ThreadPoolExecutor(min(len(todo), ASKED_AT_ONCE) or 1) as pool:
        for expr, found in zip(todo, pool.map(fetch, todo), strict=True):
            cache[(expr, first)] = found


class Deltas:
    """What each series of one family grew in the hour: its value at its last scrape before
    t1 less its value at its last scrape before t0. A series with no sample in the hour before:
    where its target was scraped then, its exporter was not publishing it, so it started in the
    hour — ours from 0 (:data:`FROM_ZERO`), the energy counter from its first sample in the
    hour (its samples read); where its target was not (a scrape gap), its last value however
    old (:data:`LONG`; none: it started in the hour). Where a series went down or was reset in
    the hour (an exporter restart, a series dropped and back), its samples in the hour, each
    rise added and a fall counted from 0 (PromQL's ``increase`` without extrapolation). A
    series of ours that tells its start (:data:`STARTED`) is never reset: a total that starts
    again is another series.

    ``fresh``: the series (by the identity of their labels) that started in the hour with no
    earlier value (their exporter began publishing them in it). ``edge``: the series whose
    hour starts at its edge t0, not at their last scrape before it — those of a GPU whose hour
    before was read from the gauges, which billed it through t0 (costsvc/ingest/integrals.py,
    ``_edge``): their value at t0 is the one between their scrapes on either side of it,
    the counter having grown evenly between two collections."""

    def __init__(
        self,
        reader: RunReader,
        family: str,
        at: datetime,
        key: Callable[[dict[str, str]], Key] = key_of,
        edge: Callable[[dict[str, str]], bool] | None = None,
    ) -> None:
        t1 = instant_text(at)
        t0 = f"{Decimal(t1) - 3600:.3f}"
        ends = steps(reader, last_expr(family), at)
        # the series reset in the hour, by label set (few: most hours, none)
        reset = {
            key(labels)
            for labels, _ in steps(reader, reset_expr(RESETS_OF[family]), at).get(t1, {}).values()
        }
        before, after = ends.get(t0, {}), ends.get(t1, {})
        starts: dict[Key, Decimal | None] = {}  # an uneven series' value before (None: none)
        self.deltas: list[tuple[dict[str, str], Decimal]] = []
        self.fresh: set[int] = set()
        new: list[tuple[dict[str, str], Decimal]] = []
        at_edge: dict[Key, tuple[dict[str, str], Decimal, Decimal]] = {}
        for series, (labels, v1) in after.items():
            earlier = before.get(series)
            if earlier is None:
                new.append((labels, v1))
            elif v1 < earlier[1] or (reset and key(labels) in reset):
                starts[key(labels)] = earlier[1]
            elif edge is not None and edge(labels):
                at_edge[key(labels)] = (labels, earlier[1], v1)
            else:
                self.deltas.append((labels, v1 - earlier[1]))
        if at_edge:
            self._from_edge(reader, family, at, Decimal(t0), at_edge, len(after))
        if new:
            scraped = _scraped(reader, at, t0)
            gap = {key(labels) for labels, _ in new if not scraped(labels)}
            older = _older(reader, family, at, gap, len(after)) if gap else {}
            for labels, v1 in new:
                found = older.get(key(labels)) if older else None
                v0 = found if found is not None else ZERO if family in FROM_ZERO else None
                if found is None:
                    self.fresh.add(id(labels))
                if v0 is None or v1 < v0 or (reset and key(labels) in reset):
                    starts[key(labels)] = v0
                else:
                    self.deltas.append((labels, v1 - v0))
        for s in read_raw(reader.prom, family, at, 3600, set(starts), len(after)):
            grew, last = ZERO, starts[key(s.labels)]
            for _, v in s.samples:
                if last is not None:
                    grew += v - last if v >= last else v
                last = v
            self.deltas.append((s.labels, grew))

    def _from_edge(
        self,
        reader: RunReader,
        family: str,
        at: datetime,
        t0: Decimal,
        series: dict[Key, tuple[dict[str, str], Decimal, Decimal]],
        total: int,
    ) -> None:
        """What these series grew from ``t0``: their value there is their last sample's at or
        before it plus the part of the next rise that falls before ``t0`` (each collection adds
        the reading before it times the time since the last: even growth between samples);
        their last value before the hour where no sample follows, or the counter fell."""
        found = {}
        window = 3600 + int(MAX_GAP)
        for s in read_raw(reader.prom, family, at, window, set(series), total):
            earlier = [(t, v) for t, v in s.samples if t <= t0]
            later = [(t, v) for t, v in s.samples if t > t0]
            if earlier and later and later[0][1] >= earlier[-1][1]:
                (ta, va), (tb, vb) = earlier[-1], later[0]
                found[key_of(s.labels)] = va + (vb - va) * (t0 - ta) / (tb - ta)
        for k, (labels, v0, v1) in series.items():
            self.deltas.append((labels, v1 - found.get(k, v0)))


def _scraped(reader: RunReader, at: datetime, t0: str) -> Callable[[dict[str, str]], bool]:
    """Whether a series' target (its ``up`` series: the same target labels) was scraped in the
    hour before ``t0``; False for a series with no target's labels (no ``instance``)."""
    targets: dict[tuple[str, str], list[tuple[dict[str, str], Decimal]]] = {}
    for labels, value in steps(reader, SCRAPED, at).get(t0, {}).values():
        targets.setdefault((labels.get("job", ""), labels.get("instance", "")), []).append(
            (labels, value)
        )

    def scraped(labels: dict[str, str]) -> bool:
        if "instance" not in labels:
            return False
        found = targets.get((labels.get("job", ""), labels["instance"]), [])
        return any(
            value >= 1 and all(labels.get(n) == v for n, v in target.items())
            for target, value in found
        )

    return scraped


def last_expr(family: str) -> str:
    return f"last_over_time({family}[3600s])"


def reset_expr(family: str) -> str:
    """The series reset in the hour or at its start (only those: most never are). Of our
    exporter's counters, only the series without a start (:data:`STARTED`) are looked at:
    those with one are never reset, and Prometheus reads no sample of theirs for this."""
    selector = f'{family}{{{STARTED}=""}}' if family in FROM_ZERO else family
    return f"resets({selector}[{RESET_WINDOW}s]) > 0"


LONG = 31 * 86400  # s: how far back a series' last value is looked for (a month's retention)


def _older(
    reader: RunReader, family: str, at: datetime, keys: set[Key], total: int
) -> dict[Key, Decimal]:
    """The last value before the hour of each of these series (that had none in the hour
    before it; ``total``: the family's series in the hour), looked for over :data:`LONG`:
    none for a series that started in the hour."""
    if not keys:
        return {}
    t0 = at - timedelta(hours=1)
    out = {}
    for picked in picks(family, keys, total):
        for labels, value in reader.prom.instant(f"last_over_time({picked}[{LONG}s])", t0):
            key = key_of(labels)
            if key in keys:
                out[key] = value
    return out
