"""The integrals' rule: a GPU's hour read from our exporter's integrals, where they cover it.

Our exporter publishes, besides its gauges, what they held over time: counters of seconds added
at every collection (exporter/integrals.py; docs/metrics.md, "Integrals at collection
resolution"). An hour [t0, t1) is then what each counter grew between its last scrape before
t0 and its last scrape before t1 — one ``last_over_time`` range query per family and block of
hours (each step's value is the next hour's start), no samples and no integration: the figures
are differences (docs/cost-model.md, "The hour read from the exporter's integrals", with a
worked example); a GPU's energy is what its energy counter grew between the same scrapes. The
rest of the hour — MIG geometry, pod labels and controllers — is read as for the gauges
(costsvc/ingest/holdings.py). What each counter grew is read by
costsvc/ingest/integral_deltas.py.

A GPU the counters do not tell is read from the gauges instead (costsvc/ingest/collect.py): a
GPU without them (dcgm-exporter, an exporter before them), or whose counters start in the hour
(a node's first hour, its exporter's upgrade to them); :func:`collect_integrals` names those
GPUs, and answers None where it tells none. The first hour of the integrals after one of the
gauges starts at its edge (:func:`_edge`; docs/cost-model.md, "Two rules, one per source").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation

from costsvc.ingest.gauges.sampled import Increase
from costsvc.ingest.holdings import Slices, finish, gpu_key, holding_key, holding_of, mig_instances
from costsvc.ingest.hour import HourReads, add_gpu, us
from costsvc.ingest.integral_deltas import (
    BUSY,
    DEVICE,
    FAMILIES,
    MEASURED,
    MEMORY,
    RESET_WINDOW,
    RESETS_OF,
    SCRAPED,
    SHARE,
    SHARE_LABEL,
    SM,
    STARTED,
    UNMEASURED,
    ZERO,
    Deltas,
    ask,
    last_expr,
    once,
    reset_expr,
    steps,
)
from costsvc.ingest.prom import instant_text
from costsvc.ingest.series import Key, key_of
from costsvc.rules.attribution import GpuKey, HourFacts, busy_seconds, is_shared
from costsvc.rules.energy import ENERGY, Measured, counter_measured

# the GPUs our exporter's gauges saw in the hour, whether or not it publishes their counters (an
# exporter before them, during a rolling upgrade): those the counters do not tell are read from
# the gauges (costsvc/ingest/collect.py)
SEEN = "count by (cluster, UUID) (last_over_time(gpu_device_up[3600s]))"
# a holding's largest share (is_shared: a replica), over the hour and the look-back the gauges'
# rule reads (its last interval may be this hour's while its last sample was before it)
TOP = f"max_over_time(gpu_allocation_share[{RESET_WINDOW}s])"


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
        holding = once(w, "holding", holding_key(w))
        self.figures: dict[str, dict[tuple[str, ...], Decimal]] = {}
        self.last: dict[tuple[str, ...], dict[str, str]] = {}
        self.measured: dict[tuple[str, ...], Decimal] = {}
        self.top: dict[tuple[str, ...], Decimal] = {}
        measured, top = self.measured, self.top
        before: set[tuple[str, ...]] = set()  # holdings with a series of an exporter before
        for family in (SHARE, MEMORY, BUSY, UNMEASURED, SM):
            mine = self.figures[family] = {}
            for labels, grew in Deltas(reader, family, at, series, edge).deltas:
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
            ask(reader, at, [last_expr(MEASURED), TOP])
            for labels, grew in Deltas(reader, MEASURED, at, series, edge).deltas:
                key = holding(labels)
                measured[key] = measured.get(key, ZERO) + grew
            for labels, v in steps(reader, TOP, at).get(instant_text(at), {}).values():
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
    ask(reader, at, [last_expr(DEVICE), reset_expr(DEVICE), SCRAPED, SEEN])
    series = once(w, "series", key_of)  # (looked for only where a series needs it)
    gpu_of = once(w, "gpu", gpu_key(w))
    device = Deltas(reader, DEVICE, at, series)
    covered = {gpu_of(labels) for labels, _ in device.deltas if id(labels) not in device.fresh}
    if not covered:
        return None
    edge = _edge(w, device, covered, gpu_of)
    if edge is not None:
        device = Deltas(reader, DEVICE, at, series, edge)
    ask(
        reader,
        at,
        [*map(last_expr, FAMILIES), *map(reset_expr, set(RESETS_OF.values())), SCRAPED],
    )
    facts = HourFacts(start)
    seen = _add_gpus(facts, device, covered, gpu_of)
    energy = _energy(w, series, edge, gpu_of, seen)
    held = _Held(w, series, edge)
    slices, published = mig_instances(w)
    # the GPUs of the hour the counters do not tell: seen by the gauges, or held without a
    # device counter that covers the hour
    untold = {
        gpu_of(labels) for labels, _ in steps(reader, SEEN, at).get(instant_text(at), {}).values()
    }
    untold |= _add_holdings(facts, held, slices)
    finish(w, facts, published, energy)
    if instant_text(at) == reader.block(at)[1]:  # the block's last hour: its answers are done
        reader.integral_answers.clear()  # with (the hour's attribution and write go on
        reader.integral_keys.clear()  # without them)
    return Told(facts, untold - set(facts.node_of))


def _edge(
    w: HourReads,
    device: Deltas,
    covered: set[GpuKey],
    gpu_of: Callable[[dict[str, str]], GpuKey],
) -> Callable[[dict[str, str]], bool] | None:
    """Whether a series is of a GPU whose hour starts at its edge: of ``covered``, one whose
    hour before was read from the gauges (none of its device series had a value before that
    hour: each tells its start, :data:`STARTED`, and each started since; a series without the
    label, an exporter's before it, is taken to have). The gauges billed that hour through its
    end, so this one starts there. None where no GPU's does."""
    t0 = Decimal(instant_text(w.at)) - 3600
    earlier = [
        labels
        for labels, _ in steps(w.reader, last_expr(DEVICE), w.at).get(f"{t0:.3f}", {}).values()
    ]
    earlier += [labels for labels, _ in device.deltas if id(labels) not in device.fresh]
    since = once(w, "started", lambda labels: _number(labels, STARTED))
    before = set()
    for labels in earlier:
        started = since(labels)
        if started is None or started < t0 - 3600:
            before.add(gpu_of(labels))
    switching = covered - before
    if not switching:
        return None

    def edge(labels: dict[str, str]) -> bool:
        return gpu_of(labels) in switching

    return edge


def _add_gpus(
    facts: HourFacts,
    device: Deltas,
    covered: set[GpuKey],
    gpu_of: Callable[[dict[str, str]], GpuKey],
) -> dict[GpuKey, Decimal]:
    """Add the ``covered`` GPUs present in the hour to ``facts``, each with its seconds up and
    down (what its device counters grew); answers each one's seconds in the hour."""
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
    return seen


def _energy(
    w: HourReads,
    series: Callable[[dict[str, str]], Key],
    edge: Callable[[dict[str, str]], bool] | None,
    gpu_of: Callable[[dict[str, str]], GpuKey],
    seen: dict[GpuKey, Decimal],
) -> dict[GpuKey, Measured]:
    """The energy each GPU ``seen`` drew in the hour: what its energy counters grew."""
    drawn: dict[GpuKey, Decimal] = {}
    for labels, grew in Deltas(w.reader, ENERGY, w.at, series, edge).deltas:
        gpu = gpu_of(labels)  # (a driver upgrade: two series)
        drawn[gpu] = drawn.get(gpu, ZERO) + grew
    return {
        gpu: counter_measured(Increase(mj, ZERO, seen[gpu]))
        for gpu, mj in drawn.items()
        if gpu in seen
    }


def _add_holdings(facts: HourFacts, held: _Held, slices: Slices) -> set[GpuKey]:
    """Add the holdings of the GPUs in ``facts``: each one's share-seconds, the part of them
    busy, its SM time (by container on a GPU, as the gauges' rule) and its memory share;
    answers the GPUs held that are not in ``facts`` (no device counter covers their hour)."""
    figures, last, measured, top = held.figures, held.last, held.measured, held.top
    sm: dict[tuple[str, ...], Decimal] = {}
    for (cluster, uuid, _, ns, pod, container), seconds in figures[SM].items():
        by_container = (cluster, uuid, ns, pod, container)
        sm[by_container] = sm.get(by_container, ZERO) + seconds
    sm_gpus = {key[:2] for key in sm}
    untold: set[GpuKey] = set()
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
    return untold
