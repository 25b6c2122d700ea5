"""One hour's facts from our exporter's gauges: GPUs present, holdings, utilisation and pod
labels — the gauges' rule, for a GPU whose exporter publishes no integrals for the hour (the
choice: costsvc/ingest/collect.py).

Series are grouped by what they describe, not by their full label set: a GPU whose driver was
upgraded mid-hour (a new ``DCGM_FI_DRIVER_VERSION`` label, so a new series) is still one GPU,
and a container's hold on it is still one holding. Every series belongs to the cluster named by
its ``cluster`` label, or to the configured cluster when it has none. Durations are rounded to
micro-seconds here, so the facts stored in ``usage_facts`` / ``gpu_hours`` are exactly the
input of the attribution (a reprice from stored facts gives the same money as a re-ingest).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import Decimal

from costsvc.ingest.gauges import regular, steady
from costsvc.ingest.gauges.holding_hour import (
    Bounds,
    GaugeHour,
    Usage,
    grouped,
    highest,
    measure,
    measure_read,
    merged,
)
from costsvc.ingest.gauges.sampled import Piece, Sample, summed, total, without
from costsvc.ingest.holdings import (
    Slices,
    finish,
    gpu_key,
    holding_key,
    holding_of,
    mig_instances,
    unit_key,
)
from costsvc.ingest.hour import MAX_GAP, PRESENCE_GAP, Holes, add_gpu, us
from costsvc.ingest.prom import Series
from costsvc.rules.attribution import HourFacts, busy_seconds, is_shared
from costsvc.rules.energy import ENERGY

log = logging.getLogger(__name__)


FULL = Decimal("1.000000001")  # a GPU's shares add up to more than this: over-subscribed
# (not 1: shares such as 3/7 + 2/7 + 2 x 1/7 are written as decimal text and may add up to a
# hair above 1)


READS = (
    ("gpu_device_up", PRESENCE_GAP),
    ("DCGM_FI_DEV_GPU_UTIL", MAX_GAP),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", MAX_GAP),
    ("gpu_container_sm_utilization_ratio", MAX_GAP),
    ("gpu_allocation_share", MAX_GAP),
    ("gpu_allocation_memory_share", MAX_GAP),
    (ENERGY, MAX_GAP),
)


def gpus_seen(w: GaugeHour, facts: HourFacts) -> dict[tuple[str, str], Holes]:
    """The GPUs of ``gpu_device_up`` into ``facts``; when each was lost, by (cluster, UUID)."""
    lost: dict[tuple[str, str], Holes] = {}
    key = gpu_key(w)
    for (cluster, uuid), group in grouped(w, "gpu_device_up", key, PRESENCE_GAP).items():
        samples = merged(group)
        present = us(w.present(samples))
        if present > 0:
            lost[(cluster, uuid)] = holes = w.lost(samples)
            gone = us(sum((b - a for a, b in holes), Decimal(0)))
            add_gpu(facts, cluster, uuid, group[-1].labels, present, gone)
    return lost


def utilisation(w: GaugeHour) -> dict[tuple[str, ...], Usage]:
    """Utilisation 0..1 over the hour per device unit (cluster, UUID, GPU_I_ID):
    ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` where the unit has it, else ``DCGM_FI_DEV_GPU_UTIL`` / 100.
    """
    key = unit_key(w)
    util = {
        k: Usage(group, percent=True)
        for k, group in grouped(w, "DCGM_FI_DEV_GPU_UTIL", key).items()
    }
    for k, group in grouped(w, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", key).items():
        util[k] = Usage(group)  # preferred where the GPU has it
    return util


def collect_exporter(w: GaugeHour, start: datetime) -> HourFacts:
    """The hour's facts from our exporter's series (:data:`READS`)."""
    facts = HourFacts(start)
    lost = gpus_seen(w, facts)
    slices, published = mig_instances(w)
    util = utilisation(w)
    sm = _container_sm(w)
    holding = holding_key(w)
    # the time a GPU was lost is cut out of memory shares too (as out of shares, in measure)
    memory_share = {
        key: us(total(without(_summed(w, found), lost.get((key[0], key[1]), []))))
        for key, found in _within_gpu(grouped(w, "gpu_allocation_memory_share", holding)).items()
    }
    shares = grouped(w, "gpu_allocation_share", holding)
    within = _within_gpu(shares)
    plans = _plans(w, shares, within, lost, util, sm)
    unseen = _add_holdings(w, facts, shares, within, plans, slices, memory_share)
    for (cluster, uuid), group in unseen.items():
        # held but absent from gpu_device_up (an older exporter, a lost series): the GPU
        # existed while it was held, so its cost is billed rather than silently dropped
        log.warning("GPU %s (%s) is held but has no gpu_device_up series", uuid, cluster)
        add_gpu(facts, cluster, uuid, group[-1].labels, us(w.present(merged(group))))
    finish(w, facts, published)
    return facts


# a holding's reading: whether it is a replica, its device's utilisation (None: not read),
# its own SM time, the GPU's lost time, and its figures' bounds (None: its samples tell)
Plan = tuple[
    bool, Usage | None, Usage | None, Holes, tuple[Decimal, Bounds | None, Bounds | None] | None
]


def _summed(w: GaugeHour, samples: list[Sequence[Sample]]) -> list[Piece]:
    """The pieces of these series, summed (a holding's series, one after another)."""
    return summed(w.pieces(one) for one in samples)


def _container_sm(w: GaugeHour) -> dict[tuple[str, ...], Usage]:
    """Each container's SM utilisation on a GPU, by (cluster, UUID, namespace, pod,
    container)."""

    def container_key(lab: dict[str, str]) -> tuple[str, ...]:
        return (
            w.cluster_of(lab),
            lab.get("UUID", ""),
            lab.get("namespace", ""),
            lab.get("pod", ""),
            lab.get("container", ""),
        )

    return {
        key: Usage(group, summed=True)
        for key, group in grouped(w, "gpu_container_sm_utilization_ratio", container_key).items()
    }


def _plans(
    w: GaugeHour,
    shares: dict[tuple[str, ...], list[Series]],
    within: dict[tuple[str, ...], list[Sequence[Sample]]],
    lost: dict[tuple[str, str], Holes],
    util: dict[tuple[str, ...], Usage],
    sm: dict[tuple[str, ...], Usage],
) -> dict[tuple[str, ...], Plan]:
    """How each holding's use is read: from the sums of its usage series where they tell (the
    series read as sums: costsvc/ingest/gauges/regular.py), else from their samples, read
    here in one go."""
    sm_gpus = {key[:2] for key in sm}  # GPUs with per-container usage (cluster, UUID)
    none = Usage([], summed=True)  # the GPU's processes are known: none of them is this holder's
    plans = {}
    unread: list[Sequence[Sample]] = []
    for key, group in shares.items():
        cluster, uuid, gi, ns, pod, container = key
        top = max((highest(s.samples) for s in group), default=Decimal(0))
        shared = is_shared(bool(gi), top)
        own_sm = sm.get((cluster, uuid, ns, pod, container))
        if own_sm is None and (cluster, uuid) in sm_gpus:
            own_sm = none
        # (the device's utilisation does not price a shared holder's use: its own SM time does)
        device = None if shared else util.get((cluster, uuid, gi))
        holding_lost = lost.get((cluster, uuid), [])
        found = measure_read(w, within[key], holding_lost, device, own_sm)
        plans[key] = (shared, device, own_sm, holding_lost, found)
        if found is None:
            unread.extend(s.samples for u in (device, own_sm) if u is not None for s in u.series)
    regular.load(unread)
    return plans


def _add_holdings(
    w: GaugeHour,
    facts: HourFacts,
    shares: dict[tuple[str, ...], list[Series]],
    within: dict[tuple[str, ...], list[Sequence[Sample]]],
    plans: dict[tuple[str, ...], Plan],
    slices: Slices,
    memory_share: dict[tuple[str, ...], Decimal],
) -> dict[tuple[str, str], list[Series]]:
    """Add each holding held in the hour, with its share, busy and own SM seconds; answers
    the GPUs held that ``facts`` has not seen (no ``gpu_device_up``), with their series."""
    unseen: dict[tuple[str, str], list[Series]] = {}
    for key, group in shares.items():
        cluster, uuid = key[0], key[1]
        shared, device, own_sm, holding_lost, found = plans[key]
        figures = None if found is None else _figures(found, shared)
        if figures is None:  # its samples tell (a rounding the sums leave open: read them)
            regular.load(s.samples for u in (device, own_sm) if u is not None for s in u.series)
            seconds, used_ratio, sm_seconds = measure(
                _summed(w, within[key]),
                holding_lost,
                None if device is None else device.pieces(w),
                None if own_sm is None else own_sm.pieces(w),
            )
            share = us(seconds)
            own = us(sm_seconds) if sm_seconds is not None else None
            # no utilisation series for the device (e.g. an A100 MIG instance): unknown, not 0
            busy = busy_seconds(share, shared, own, used_ratio)
            figures = (share, None if busy is None else us(busy), own)
        share, busy, own = figures
        if share <= 0:
            continue
        if (cluster, uuid) not in facts.node_of:
            unseen.setdefault((cluster, uuid), []).extend(group)
        facts.holdings.append(
            holding_of(
                key, group[-1].labels, slices, share, busy, own, shared, memory_share.get(key)
            )
        )
    return unseen


def _figures(
    found: tuple[Decimal, Bounds | None, Bounds | None], shared: bool
) -> tuple[Decimal, Decimal | None, Decimal | None] | None:
    """A holding's (share, busy, own SM) seconds as stored, from :func:`measure_read`'s
    bounds; None where the bounds round to different figures (the samples decide)."""
    seconds, util, own = found
    share = us(seconds)
    own_us = None if own is None else (us(own[0]), us(own[1]))
    if own_us is not None and own_us[0] != own_us[1]:
        return None
    own_sm = None if own_us is None else own_us[0]
    ends = [
        busy_seconds(share, shared, own_sm, None if util is None else ratio)
        for ratio in (util or (None, None))
    ]
    if (ends[0] is None) != (ends[1] is None):
        return None
    if ends[0] is None:
        return share, None, own_sm
    low, high = us(ends[0]), us(ends[1])  # type: ignore[arg-type]
    return (share, low, own_sm) if low == high else None


def _peak(groups: Iterable[list[Series]]) -> Decimal:
    """The most the holdings of one GPU (their series' groups) add up to at any instant: a
    steady series adds its value at each of its target's scrapes (worked out once per
    target), the others sample by sample."""
    at: dict[Decimal, Decimal] = {}
    steady_sums: dict[int, tuple[list[Decimal], Decimal]] = {}
    for group in groups:
        samples = merged(group)
        if isinstance(samples, steady.Steady):
            times, added = steady_sums.get(id(samples.times), (samples.times, Decimal(0)))
            steady_sums[id(samples.times)] = (times, added + samples.value)
            continue
        for t, v in samples:
            at[t] = at.get(t, Decimal(0)) + v
    for times, added in steady_sums.values():
        for t in times:
            at[t] = at.get(t, Decimal(0)) + added
    return max(at.values(), default=Decimal(0))


def _within_gpu(
    groups: dict[tuple[str, ...], list[Series]],
) -> dict[tuple[str, ...], list[Sequence[Sample]]]:
    """Each holding's samples, scaled where its GPU is over-subscribed: at an instant where the
    shares held of one GPU (cluster, UUID) add up to more than 1 (HAMi can hand out more than
    a GPU has; the exporter flags it), each is divided by that sum, so the holders split the
    GPU at that instant and never pay for more than it. Elsewhere the samples are untouched."""
    # the shares of a GPU add up, at any instant, to at most the sum of each holding's
    # highest: where that is within FULL, no instant needs summing (the common case)
    bound: dict[tuple[str, str], Decimal] = {}
    for key, group in groups.items():
        top = max([highest(s.samples) for s in group] + [Decimal(0)])
        bound[(key[0], key[1])] = bound.get((key[0], key[1]), Decimal(0)) + top
    over: dict[tuple[str, str], list[list[Series]]] = {
        gpu: [] for gpu, top in bound.items() if top > FULL
    }
    for key, group in groups.items():
        if (key[0], key[1]) in over:
            over[(key[0], key[1])].append(group)
    # where the holdings came and went within the hour, their highest add up past 1 without
    # any instant doing so (the common case with churn): look for such an instant first
    over = {gpu: found for gpu, found in over.items() if _peak(found) > FULL}
    totals: dict[tuple[str, str], dict[Decimal, Decimal]] = {}
    for key, group in groups.items():
        if (key[0], key[1]) not in over:
            continue
        at = totals.setdefault((key[0], key[1]), {})
        for t, v in merged(group):
            at[t] = at.get(t, Decimal(0)) + v
    out: dict[tuple[str, ...], list[Sequence[Sample]]] = {}
    for key, group in groups.items():
        at = totals.get((key[0], key[1]), {})
        if max(at.values(), default=Decimal(0)) <= FULL:
            out[key] = [s.samples for s in group]
        else:
            out[key] = [
                [(t, v / at[t] if at[t] > FULL else v) for t, v in s.samples] for s in group
            ]
    return out
