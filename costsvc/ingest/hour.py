"""One hour's facts from Prometheus: GPUs present, holdings, utilisation and pod labels.

Series are grouped by what they describe, not by their full label set: a GPU whose driver was
upgraded mid-hour (a new ``DCGM_FI_DRIVER_VERSION`` label, so a new series) is still one GPU,
and a container's hold on it is still one holding. Every series belongs to the cluster named by
its ``cluster`` label, or to the configured cluster when it has none. Durations are rounded to
micro-seconds here, so the facts stored in ``usage_facts`` / ``gpu_hours`` are exactly the
input of the attribution (a reprice from stored facts gives the same money as a re-ingest).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

from costsvc.attribution import GpuHour, Holding, HourFacts, busy_seconds, is_shared
from costsvc.energy import NOTHING
from costsvc.ingest.integrate import Sample, covered, integral, interval, max_gap_for, mean
from costsvc.ingest.power import (
    ENERGY,
    LOWEST_POWER,
    POWER,
    counter_readings,
    lowest_power,
    power_readings,
)
from costsvc.ingest.prom import PrometheusReader, Series

log = logging.getLogger(__name__)

SCRAPE_GAP = Decimal(60)  # a silence longer than max(this, 2 scrape intervals) is a gap ...
MAX_GAP = Decimal(300)  # ... and one longer than this always is (Prometheus' staleness)
PRESENCE_GAP = Decimal(3600)  # a GPU seen in the hour exists between sightings
MICROSECOND = Decimal("0.000001")
FULL = Decimal("1.000000001")  # a GPU's shares add up to more than this: over-subscribed
# (not 1: shares such as 3/7 + 2/7 + 2 x 1/7 are written as decimal text and may add up to a
# hair above 1)


def _us(seconds: Decimal) -> Decimal:
    return seconds.quantize(MICROSECOND, rounding=ROUND_HALF_EVEN)


def _merged(series: Iterable[Series]) -> list[Sample]:
    """The samples of several series of one thing, in time order (one per instant)."""
    by_time = {t: v for s in series for t, v in s.samples}
    return sorted(by_time.items())


class _Window:
    def __init__(self, prom: PrometheusReader, start: datetime, cluster: str) -> None:
        self.prom, self.cluster = prom, cluster
        self.at = start + timedelta(hours=1) - timedelta(microseconds=1)  # the hour's last instant
        self.t0 = Decimal(str(start.timestamp()))
        self.t1 = self.t0 + 3600
        self._pending: dict[tuple[str, int], Future[list[Series]]] = {}

    def prefetch(self, pool: ThreadPoolExecutor, reads: Iterable[tuple[str, Decimal]]) -> None:
        """Ask for these reads now: Prometheus answers the next while this one is integrated."""
        for selector, look_back in reads:
            self._pending[(selector, int(look_back))] = pool.submit(
                self.prom.raw, selector, self.at, 3600 + int(look_back)
            )

    def cancel(self) -> None:
        for f in self._pending.values():
            f.cancel()

    def cluster_of(self, labels: dict[str, str]) -> str:
        return labels.get("cluster") or self.cluster

    def raw(self, selector: str, look_back: Decimal) -> list[Series]:
        pending = self._pending.pop((selector, int(look_back)), None)
        if pending is not None:
            return pending.result()
        return self.prom.raw(selector, self.at, 3600 + int(look_back))

    def latest(self, selector: str) -> list[dict[str, str]]:
        return self.prom.latest(selector, self.at, 3600)

    def integral(self, samples: list[Sample]) -> Decimal:
        step = interval(samples)
        gap = max_gap_for(samples, SCRAPE_GAP, MAX_GAP, step)
        return integral(samples, self.t0, self.t1, gap, step)

    def mean(self, samples: list[Sample]) -> Decimal:
        return mean(samples, self.t0, self.t1, max_gap_for(samples, SCRAPE_GAP, MAX_GAP))

    def present(self, samples: list[Sample]) -> Decimal:
        return covered(samples, self.t0, self.t1, PRESENCE_GAP)


READS = (
    ("gpu_device_up", PRESENCE_GAP),
    ("DCGM_FI_DEV_GPU_UTIL", MAX_GAP),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", MAX_GAP),
    ("gpu_container_sm_utilization_ratio", MAX_GAP),
    ("gpu_allocation_share", MAX_GAP),
    ("gpu_allocation_memory_share", MAX_GAP),
    (ENERGY, MAX_GAP),
)


def collect_hour(prom: PrometheusReader, start: datetime, default_cluster: str) -> HourFacts:
    w = _Window(prom, start, default_cluster)
    with ThreadPoolExecutor(2, thread_name_prefix="prom-read") as pool:
        w.prefetch(pool, READS)
        try:
            return _collect(w, start)
        finally:
            w.cancel()


def _collect(w: _Window, start: datetime) -> HourFacts:
    facts = HourFacts(start)

    def grouped(
        selector: str,
        key: Callable[[dict[str, str]], tuple[str, ...]],
        look_back: Decimal = MAX_GAP,
    ) -> dict[tuple[str, ...], list[Series]]:
        out: dict[tuple[str, ...], list[Series]] = {}
        for s in w.raw(selector, look_back):
            out.setdefault(key(s.labels), []).append(s)
        return out

    def gpu_key(lab: dict[str, str]) -> tuple[str, ...]:
        return (w.cluster_of(lab), lab.get("UUID", ""))

    def unit_key(lab: dict[str, str]) -> tuple[str, ...]:
        return (w.cluster_of(lab), lab.get("UUID", ""), lab.get("GPU_I_ID", ""))

    def container_key(lab: dict[str, str]) -> tuple[str, ...]:
        return (
            w.cluster_of(lab),
            lab.get("UUID", ""),
            lab.get("namespace", ""),
            lab.get("pod", ""),
            lab.get("container", ""),
        )

    for (cluster, uuid), group in grouped("gpu_device_up", gpu_key, PRESENCE_GAP).items():
        present = _us(w.present(_merged(group)))
        if present > 0:
            _add_gpu(facts, cluster, uuid, group[-1].labels, present)

    slices = {
        unit_key(lab): (int(lab.get("compute_slices") or 0), int(lab.get("memory_slices") or 0))
        for lab in w.latest("gpu_mig_instance_info")
    }
    util = {
        key: w.mean(_merged(group)) / 100
        for key, group in grouped("DCGM_FI_DEV_GPU_UTIL", unit_key).items()
    }
    for key, group in grouped("DCGM_FI_PROF_GR_ENGINE_ACTIVE", unit_key).items():
        util[key] = w.mean(_merged(group))  # preferred where the GPU has it
    sm = {
        key: sum((w.integral(s.samples) for s in group), Decimal(0))
        for key, group in grouped("gpu_container_sm_utilization_ratio", container_key).items()
    }
    sm_gpus = {key[:2] for key in sm}  # GPUs with per-container usage (cluster, UUID)

    def holding_key(lab: dict[str, str]) -> tuple[str, ...]:
        return (
            *unit_key(lab),
            lab.get("namespace", ""),
            lab.get("pod", ""),
            lab.get("container", ""),
        )

    memory_share = {
        key: _us(sum((w.integral(samples) for samples in group), Decimal(0)))
        for key, group in _within_gpu(grouped("gpu_allocation_memory_share", holding_key)).items()
    }
    shares = grouped("gpu_allocation_share", holding_key)
    within = _within_gpu(shares)
    unseen: dict[tuple[str, str], list[Series]] = {}
    for key, group in shares.items():
        cluster, uuid, gi, ns, pod, container = key
        share = _us(sum((w.integral(samples) for samples in within[key]), Decimal(0)))
        if share <= 0:
            continue
        if (cluster, uuid) not in facts.node_of:
            unseen.setdefault((cluster, uuid), []).extend(group)
        top = max((v for s in group for _, v in s.samples), default=Decimal(0))
        shared = is_shared(bool(gi), top)
        own_sm = sm.get((cluster, uuid, ns, pod, container))
        if own_sm is None and (cluster, uuid) in sm_gpus:
            own_sm = Decimal(0)  # the GPU's processes are known: none of them is this holder's
        sm_seconds = _us(own_sm) if own_sm is not None else Decimal(0)
        # no utilisation series for the device (e.g. an A100 MIG instance): unknown, not 0
        busy = busy_seconds(
            share, shared, None if own_sm is None else sm_seconds, util.get((cluster, uuid, gi))
        )
        compute, memory = slices.get((cluster, uuid, gi), (0, 0)) if gi else (0, 0)
        profile = group[-1].labels.get("GPU_I_PROFILE", "") if gi else ""
        facts.holdings.append(
            Holding(
                uuid,
                ns,
                pod,
                container,
                share,
                None if busy is None else _us(busy),
                sm_seconds,
                shared,
                compute or None,
                memory if compute else None,
                int(gi) if gi else None,
                profile,
                memory_share.get(key),
                cluster=cluster,
            )
        )
    for (cluster, uuid), group in unseen.items():
        # held but absent from gpu_device_up (an older exporter, a lost series): the GPU
        # existed while it was held, so its cost is billed rather than silently dropped
        log.warning("GPU %s (%s) is held but has no gpu_device_up series", uuid, cluster)
        _add_gpu(facts, cluster, uuid, group[-1].labels, _us(w.present(_merged(group))))

    _add_energy(w, facts)
    for (cluster, ns, pod), labels in _latest_labels(w, "kube_pod_labels", ("namespace", "pod")):
        facts.pod_labels[(cluster, ns, pod)] = labels
    for (cluster, ns), labels in _latest_labels(w, "kube_namespace_labels", ("namespace",)):
        facts.namespace_labels[(cluster, ns)] = labels
    return facts


def _within_gpu(
    groups: dict[tuple[str, ...], list[Series]],
) -> dict[tuple[str, ...], list[list[Sample]]]:
    """Each holding's samples, scaled where its GPU is over-subscribed: at an instant where the
    shares held of one GPU (cluster, UUID) add up to more than 1 (HAMi can hand out more than
    a GPU has; the exporter flags it), each is divided by that sum, so the holders split the
    GPU at that instant and never pay for more than it. Elsewhere the samples are untouched."""
    totals: dict[tuple[str, str], dict[Decimal, Decimal]] = {}
    for key, group in groups.items():
        at = totals.setdefault((key[0], key[1]), {})
        for t, v in _merged(group):
            at[t] = at.get(t, Decimal(0)) + v
    out: dict[tuple[str, ...], list[list[Sample]]] = {}
    for key, group in groups.items():
        at = totals[(key[0], key[1])]
        if max(at.values(), default=Decimal(0)) <= FULL:
            out[key] = [s.samples for s in group]
        else:
            out[key] = [
                [(t, v / at[t] if at[t] > FULL else v) for t, v in s.samples] for s in group
            ]
    return out


def _add_gpu(
    facts: HourFacts, cluster: str, uuid: str, lab: dict[str, str], present: Decimal
) -> None:
    # dcgm-exporter's releases (and our exporter by default) write Hostname, its main branch
    # hostname (NVIDIA/dcgm-exporter#655; gpu-exporter --hostname-label hostname)
    node = lab.get("Hostname") or lab.get("hostname", "")
    facts.gpus.append(
        GpuHour(
            cluster, node, uuid, lab.get("modelName", ""), lab.get("node_pool") or None, present
        )
    )
    facts.node_of[(cluster, uuid)] = node


def _add_energy(w: _Window, facts: HourFacts) -> None:
    """Each GPU's measured energy in the hour (costsvc/ingest/power.py)."""
    limits = (w.t0, w.t1, w.cluster_of, SCRAPE_GAP, MAX_GAP)
    energy = counter_readings(w.raw(ENERGY, MAX_GAP), *limits)
    if any(g.key not in energy for g in facts.gpus):  # a GPU without a counter reading
        energy = {**power_readings(w.raw(POWER, MAX_GAP), *limits), **energy}
    lowest = lowest_power(w.prom.instant(LOWEST_POWER, w.at), w.cluster_of)
    for i, g in enumerate(facts.gpus):
        m = energy.get(g.key)
        low = lowest.get(g.key)
        if m is not None or low is not None:
            m = m or NOTHING
            facts.gpus[i] = dataclasses.replace(
                g,
                energy_mj=m.energy_mj,
                gap_mj=m.gap_mj,
                energy_seconds=_us(m.seconds),
                min_power_mw=low,
            )


def _latest_labels(
    w: _Window, metric: str, names: tuple[str, ...]
) -> list[tuple[tuple[str, ...], dict[str, str]]]:
    """Each object's ``label_*`` labels as last seen in the hour: one answer per series, and
    for the rare object relabelled within the hour (several series), its raw samples decide."""
    found: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for lab in w.latest(metric):
        found.setdefault((w.cluster_of(lab), *(lab.get(n, "") for n in names)), []).append(lab)
    out = []
    for key, sets in sorted(found.items()):
        if len(sets) == 1:
            out.append((key, _label_values(sets[0])))
            continue
        match = ",".join(
            f'{n}="{v}"'
            for n, v in zip(names, key[1:], strict=True)
            if '"' not in v and "\\" not in v
        )
        newest: tuple[Decimal, dict[str, str]] | None = None
        for s in w.prom.raw(f"{metric}{{{match}}}", w.at, 3600):
            if (w.cluster_of(s.labels), *(s.labels.get(n, "") for n in names)) != key:
                continue
            stamp = max((t for t, _ in s.samples if t < w.t1), default=None)
            if stamp is not None and (newest is None or stamp >= newest[0]):
                newest = (stamp, _label_values(s.labels))
        out.append((key, newest[1] if newest else _label_values(sorted(sets, key=str)[-1])))
    return out


def _label_values(labels: dict[str, str]) -> dict[str, str]:
    return {n: v for n, v in labels.items() if n.startswith("label_")}
