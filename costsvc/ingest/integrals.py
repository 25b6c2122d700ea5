"""The integrals' rule: a GPU's hour read from our exporter's integrals, where they cover it.

Our exporter publishes, besides its gauges, what they held over time: counters of seconds added
at every collection (exporter/integrals.py; docs/metrics.md, "Integrals at collection
resolution"). An hour [t0, t1) is then what each counter grew between its last scrape before
t0 and its last scrape before t1 — one ``last_over_time`` range query per family and block of
hours (each step's value is the next hour's start), no samples and no integration: the figures
are differences (docs/cost-model.md, "The hour read from the exporter's integrals", with a
worked example); a GPU's energy is what its energy counter grew between the same scrapes. The
rest of the hour — MIG geometry, pod labels and controllers — is read as for the gauges
(costsvc/ingest/holdings.py).

A GPU the counters do not tell is read from the gauges instead (costsvc/ingest/collect.py): a
GPU without them (dcgm-exporter, an exporter before them), or whose counters start in the hour
(a node's first hour, its exporter's upgrade to them); :func:`collect_integrals` names those
GPUs, and answers None where it tells none. The first hour of the integrals after one of the
gauges starts at its edge (:func:`_switching`; docs/cost-model.md, "Two rules, one per source").
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar, cast

from costsvc.ingest.gauges.sampled import Increase
from costsvc.ingest.holdings import finish, gpu_key, holding_key, holding_of, mig_instances
from costsvc.ingest.hour import MAX_GAP, HourReads, add_gpu, us
from costsvc.ingest.prom import instant_text
from costsvc.ingest.reader import Answer, RunReader
from costsvc.ingest.series import Key, key_of, picks, read_raw
from costsvc.rules.attribution import GpuKey, HourFacts, busy_seconds, is_shared
from costsvc.rules.energy import ENERGY, counter_measured

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
# ``started`` published none: its holdings' from :data:`TOP`, its measured time from
# :data:`MEASURED`)
SHARE_LABEL = "share"
# each target: whether a scrape of it succeeded in the hour before an instant (a series of it
# with no value there was not published: its exporter had dropped it)
SCRAPED = "max_over_time(up[3600s])"
# the GPUs our exporter's gauges saw in the hour, whether or not it publishes their counters (an
# exporter before them, during a rolling upgrade): those the counters do not tell are read from
# the gauges (costsvc/ingest/collect.py)
SEEN = "count by (cluster, UUID) (last_over_time(gpu_device_up[3600s]))"
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
# a holding's largest share (is_shared: a replica), over the hour and the look-back the gauges'
# rule reads (its last interval may be this hour's while its last sample was before it)
TOP = f"max_over_time(gpu_allocation_share[{RESET_WINDOW}s])"
ZERO = Decimal(0)
K = TypeVar("K")


def _once(
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


def _steps(reader: RunReader, expr: str, at: datetime) -> Answer:
    """``expr`` at every planned hour's instant of the block ``at`` is in, and at the instant
    an hour before the block (its first hour's start): by instant, each series' labels and
    value (finite values only). Asked for once per block (:func:`_ask`)."""
    found = reader.integral_answers.get((expr, reader.block(at)[0]))
    if found is None:
        _ask(reader, at, [expr])
        found = reader.integral_answers[(expr, reader.block(at)[0])]
    return found


def _ask(reader: RunReader, at: datetime, exprs: list[str]) -> None:
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


class _Deltas:
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
    before was read from the gauges, which billed it through t0 (:func:`_switching`): their
    value at t0 is the one between their scrapes on either side of it, the counter having
    grown evenly between two collections."""

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
        ends = _steps(reader, _last(family), at)
        # the series reset in the hour, by label set (few: most hours, none)
        reset = {
            key(labels)
            for labels, _ in _steps(reader, reset_expr(RESETS_OF[family]), at).get(t1, {}).values()
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
    for labels, value in _steps(reader, SCRAPED, at).get(t0, {}).values():
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


def _last(family: str) -> str:
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


def _number(labels: dict[str, str], name: str) -> Decimal | None:
    """The finite number a label holds, or None where it has none or holds no such number (a
    label is untrusted text: at most 32 characters are read as one)."""
    text = labels.get(name)
    if text is None or len(text) > 32:
        return None
    try:
        found = Decimal(text)
    except InvalidOperation:
        return None
    return found if found.is_finite() else None


def share_of(labels: dict[str, str]) -> Decimal | None:
    """The share a share-seconds series integrates (its :data:`SHARE_LABEL`), or None where
    it has none or one that is not a share (its holding is then read as an exporter's before
    the label, from the gauge)."""
    share = _number(labels, SHARE_LABEL)
    return share if share is not None and 0 <= share <= 1 else None  # (of one device)


class _Held:
    """What each holding's counters grew in the hour (``figures``: by family, by holding), one
    of its share series' labels (``last``), its measured share-seconds (``measured``: its
    share's less its unmeasured ones) and its largest share (``top``: the largest ``share``
    label of its share series that grew). The holdings of an exporter before ``started``: their
    measured share-seconds and largest share read from their own series (:data:`MEASURED`,
    :data:`TOP`), asked for only where there are such holdings."""

    def __init__(
        self,
        w: HourReads,
        series: Callable[[dict[str, str]], Key],
        edge: Callable[[dict[str, str]], bool] | None = None,
    ) -> None:
        reader, at = w.reader, w.at
        holding = _once(w, "holding", holding_key(w))
        self.figures: dict[str, dict[tuple[str, ...], Decimal]] = {}
        self.last: dict[tuple[str, ...], dict[str, str]] = {}
        self.measured: dict[tuple[str, ...], Decimal] = {}
        self.top: dict[tuple[str, ...], Decimal] = {}
        measured, top = self.measured, self.top
        before: set[tuple[str, ...]] = set()  # holdings with a series of an exporter before
        for family in (SHARE, MEMORY, BUSY, UNMEASURED, SM):
            mine = self.figures[family] = {}
            for labels, grew in _Deltas(reader, family, at, series, edge).deltas:
                key = holding(labels)
                mine[key] = mine.get(key, ZERO) + grew
                if family == SHARE:
                    self.last[key] = labels
                    share = share_of(labels)
                    if share is None or STARTED not in labels:
                        before.add(key)
                        continue
                    measured[key] = measured.get(key, ZERO) + grew
                    if grew > 0:
                        top[key] = max(top.get(key, ZERO), share)
                elif family == UNMEASURED:
                    measured[key] = measured.get(key, ZERO) - grew
        if before:
            _ask(reader, at, [_last(MEASURED), TOP])
            for labels, grew in _Deltas(reader, MEASURED, at, series, edge).deltas:
                key = holding(labels)
                measured[key] = measured.get(key, ZERO) + grew
            for labels, v in _steps(reader, TOP, at).get(instant_text(at), {}).values():
                key = holding(labels)
                if key in before:
                    top[key] = max(top.get(key, v), v)


@dataclass(slots=True)
class Told:
    """An hour as the integrals tell it: the facts of the GPUs whose counters cover the hour,
    and the GPUs of the hour they do not tell (``untold``: read from the gauges)."""

    facts: HourFacts
    untold: set[GpuKey]


def collect_integrals(w: HourReads, start: datetime) -> Told | None:
    """The hour's facts from our exporter's integrals, for each GPU whose device counter
    covers the hour (a series of it with a value before the hour: one that started in it,
    from 0, is a node's first hour, or its exporter's upgrade to the counters: the gauges read
    that hour); None where no GPU's does (the hour is read from the gauges)."""
    reader, at = w.reader, w.at
    # the block's reads, together: each family's ends, the resets
    _ask(reader, at, [_last(DEVICE), reset_expr(DEVICE), SCRAPED, SEEN])
    series = _once(w, "series", key_of)  # (looked for only where a series needs it)
    gpu_of = _once(w, "gpu", gpu_key(w))
    device = _Deltas(reader, DEVICE, at, series)
    covered = {gpu_of(labels) for labels, _ in device.deltas if id(labels) not in device.fresh}
    if not covered:
        return None
    switching = _switching(w, device, covered, gpu_of)
    edge = None
    if switching:

        def edge(labels: dict[str, str]) -> bool:
            return gpu_of(labels) in switching

        device = _Deltas(reader, DEVICE, at, series, edge)
    _ask(
        reader,
        at,
        [*map(_last, FAMILIES), *map(reset_expr, set(RESETS_OF.values())), SCRAPED],
    )
    facts = HourFacts(start)
    gpus: dict[GpuKey, tuple[dict[str, str], Decimal, Decimal]] = {}
    for labels, grew in device.deltas:
        gpu = gpu_of(labels)
        if gpu not in covered:
            continue
        _, up, down = gpus.get(gpu, (labels, ZERO, ZERO))
        if labels.get("state") == "down":
            down += grew
        else:
            up += grew
        gpus[gpu] = (labels, up, down)
    seen: dict[GpuKey, Decimal] = {}  # each GPU's seconds in the hour
    for (cluster, uuid), (labels, up, down) in gpus.items():
        present = us(up + down)
        if present > 0:
            add_gpu(facts, cluster, uuid, labels, present, us(down))
            seen[(cluster, uuid)] = present
    drawn: dict[GpuKey, Decimal] = {}
    energy_read = _Deltas(reader, ENERGY, at, series, edge)
    for labels, grew in energy_read.deltas:  # (a driver upgrade: two series)
        gpu = gpu_of(labels)
        drawn[gpu] = drawn.get(gpu, ZERO) + grew
    energy = {
        gpu: counter_measured(Increase(mj, ZERO, seen[gpu]))
        for gpu, mj in drawn.items()
        if gpu in seen
    }

    held = _Held(w, series, edge)
    figures, last, measured, top = held.figures, held.last, held.measured, held.top
    slices, published = mig_instances(w)
    sm: dict[tuple[str, ...], Decimal] = {}  # by container on a GPU, as the gauges' rule
    for (cluster, uuid, _, ns, pod, container), seconds in figures[SM].items():
        by_container = (cluster, uuid, ns, pod, container)
        sm[by_container] = sm.get(by_container, ZERO) + seconds
    sm_gpus = {key[:2] for key in sm}
    # the GPUs of the hour the counters do not tell: seen by the gauges, or held without a
    # device counter that covers the hour
    untold = {
        gpu_of(labels) for labels, _ in _steps(reader, SEEN, at).get(instant_text(at), {}).values()
    }
    for key, seconds in figures[SHARE].items():
        cluster, uuid, gi, ns, pod, container = key
        share = us(seconds)
        if (cluster, uuid) not in facts.node_of:
            if share > 0:
                untold.add((cluster, uuid))
            continue
        if share <= 0:
            continue
        shared = is_shared(bool(gi), top.get(key, ZERO))
        part = measured.get(key, ZERO)  # (a difference of floats: none under a microsecond)
        ratio = figures[BUSY].get(key, ZERO) / part if us(part) > 0 else None
        own = sm.get((cluster, uuid, ns, pod, container))
        own_sm = us(own) if own is not None else ZERO if (cluster, uuid) in sm_gpus else None
        busy = busy_seconds(share, shared, own_sm, ratio)
        memory_share = figures[MEMORY].get(key)
        facts.holdings.append(
            holding_of(
                key,
                last[key],
                slices,
                share,
                None if busy is None else us(busy),
                own_sm,
                shared,
                None if memory_share is None else us(memory_share),
            )
        )
    finish(w, facts, published, energy)
    if instant_text(at) == reader.block(at)[1]:  # the block's last hour: its answers are done
        reader.integral_answers.clear()  # with (the hour's attribution and write go on
        reader.integral_keys.clear()  # without them)
    return Told(facts, untold - set(facts.node_of))


def _switching(
    w: HourReads,
    device: _Deltas,
    covered: set[GpuKey],
    gpu_of: Callable[[dict[str, str]], GpuKey],
) -> set[GpuKey]:
    """The GPUs of ``covered`` whose hour before was read from the gauges: none of their
    device series had a value before that hour (each tells its start, :data:`STARTED`, and
    each started since; a series without the label, an exporter's before it, is taken to
    have). The gauges billed that hour through its end, so this one starts there."""
    t0 = Decimal(instant_text(w.at)) - 3600
    earlier = [
        labels for labels, _ in _steps(w.reader, _last(DEVICE), w.at).get(f"{t0:.3f}", {}).values()
    ]
    earlier += [labels for labels, _ in device.deltas if id(labels) not in device.fresh]
    since = _once(w, "started", lambda labels: _number(labels, STARTED))
    before = set()
    for labels in earlier:
        started = since(labels)
        if started is None or started < t0 - 3600:
            before.add(gpu_of(labels))
    return covered - before
