"""One hour's facts from Prometheus: GPUs present, holdings, utilisation and pod labels.

Series are grouped by what they describe, not by their full label set: a GPU whose driver was
upgraded mid-hour (a new ``DCGM_FI_DRIVER_VERSION`` label, so a new series) is still one GPU,
and a container's hold on it is still one holding. Every series belongs to the cluster named by
its ``cluster`` label, or to the configured cluster when it has none. Durations are rounded to
micro-seconds here, so the facts stored in ``usage_facts`` / ``gpu_hours`` are exactly the
input of the attribution (a reprice from stored facts gives the same money as a re-ingest).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from decimal import Decimal

from costsvc.attribution import GpuHour, Holding, HourFacts, busy_seconds, is_shared
from costsvc.ingest.integrate import Piece
from costsvc.ingest.prom import PrometheusReader, Series
from costsvc.ingest.window import (
    MAX_GAP,
    PRESENCE_GAP,
    Holes,
    Window,
    measure,
    merged,
    us,
)

log = logging.getLogger(__name__)

READS = (
    ("gpu_device_up", PRESENCE_GAP),
    ("DCGM_FI_DEV_GPU_UTIL", MAX_GAP),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", MAX_GAP),
    ("gpu_container_sm_utilization_ratio", MAX_GAP),
    ("gpu_allocation_share", MAX_GAP),
)


def collect_hour(prom: PrometheusReader, start: datetime, default_cluster: str) -> HourFacts:
    w = Window(prom, start, default_cluster)
    with ThreadPoolExecutor(2, thread_name_prefix="prom-read") as pool:
        w.prefetch(pool, READS)
        try:
            return _collect(w, start)
        finally:
            w.cancel()


def grouped(
    w: Window,
    selector: str,
    key: Callable[[dict[str, str]], tuple[str, ...]],
    look_back: Decimal = MAX_GAP,
) -> dict[tuple[str, ...], list[Series]]:
    """The series of ``selector`` grouped by what they describe (``key`` of their labels)."""
    out: dict[tuple[str, ...], list[Series]] = {}
    for s in w.raw(selector, look_back):
        out.setdefault(key(s.labels), []).append(s)
    return out


def gpus_seen(w: Window, facts: HourFacts) -> dict[tuple[str, str], Holes]:
    """The GPUs of ``gpu_device_up`` into ``facts``; when each was lost, by (cluster, UUID)."""
    lost: dict[tuple[str, str], Holes] = {}
    key = _gpu_key(w)
    for (cluster, uuid), group in grouped(w, "gpu_device_up", key, PRESENCE_GAP).items():
        samples = merged(group)
        present = us(w.present(samples))
        if present > 0:
            lost[(cluster, uuid)] = holes = w.lost(samples)
            gone = us(sum((b - a for a, b in holes), Decimal(0)))
            add_gpu(facts, cluster, uuid, group[-1].labels, present, gone)
    return lost


def utilisation(w: Window) -> dict[tuple[str, ...], list[Piece]]:
    """Utilisation 0..1 over the hour per device unit (cluster, UUID, GPU_I_ID):
    ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` where the unit has it, else ``DCGM_FI_DEV_GPU_UTIL`` / 100.
    """
    key = _unit_key(w)
    util = {
        k: [(a, b, v / 100) for a, b, v in w.pieces(merged(group))]
        for k, group in grouped(w, "DCGM_FI_DEV_GPU_UTIL", key).items()
    }
    for k, group in grouped(w, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", key).items():
        util[k] = w.pieces(merged(group))  # preferred where the GPU has it
    return util


def _gpu_key(w: Window) -> Callable[[dict[str, str]], tuple[str, ...]]:
    return lambda lab: (w.cluster_of(lab), lab.get("UUID", ""))


def _unit_key(w: Window) -> Callable[[dict[str, str]], tuple[str, ...]]:
    return lambda lab: (w.cluster_of(lab), lab.get("UUID", ""), lab.get("GPU_I_ID", ""))


def _collect(w: Window, start: datetime) -> HourFacts:
    facts = HourFacts(start)
    unit_key = _unit_key(w)

    def container_key(lab: dict[str, str]) -> tuple[str, ...]:
        return (
            w.cluster_of(lab),
            lab.get("UUID", ""),
            lab.get("namespace", ""),
            lab.get("pod", ""),
            lab.get("container", ""),
        )

    lost = gpus_seen(w, facts)
    slices = {
        unit_key(lab): (int(lab.get("compute_slices") or 0), int(lab.get("memory_slices") or 0))
        for lab in w.latest("gpu_mig_instance_info")
    }
    util = utilisation(w)
    sm = {
        key: w.function(group)
        for key, group in grouped(w, "gpu_container_sm_utilization_ratio", container_key).items()
    }
    sm_gpus = {key[:2] for key in sm}  # GPUs with per-container usage (cluster, UUID)

    def holding_key(lab: dict[str, str]) -> tuple[str, ...]:
        return (
            *unit_key(lab),
            lab.get("namespace", ""),
            lab.get("pod", ""),
            lab.get("container", ""),
        )

    unseen: dict[tuple[str, str], list[Series]] = {}
    for key, group in grouped(w, "gpu_allocation_share", holding_key).items():
        cluster, uuid, gi, ns, pod, container = key
        own_sm = sm.get((cluster, uuid, ns, pod, container))
        if own_sm is None and (cluster, uuid) in sm_gpus:
            own_sm = []  # the GPU's processes are known: none of them is this holder's
        seconds, used_ratio, sm_seconds = measure(
            w.function(group), lost.get((cluster, uuid), []), util.get((cluster, uuid, gi)), own_sm
        )
        share = us(seconds)
        if share <= 0:
            continue
        if uuid not in facts.cluster_of:
            unseen.setdefault((cluster, uuid), []).extend(group)
        top = max((v for s in group for _, v in s.samples), default=Decimal(0))
        shared = is_shared(bool(gi), top)
        own = us(sm_seconds) if sm_seconds is not None else None
        # no utilisation series for the device (e.g. an A100 MIG instance): unknown, not 0
        busy = busy_seconds(share, shared, own, used_ratio)
        compute, memory = slices.get((cluster, uuid, gi), (0, 0)) if gi else (0, 0)
        profile = group[-1].labels.get("GPU_I_PROFILE", "") if gi else ""
        facts.holdings.append(
            Holding(
                uuid,
                ns,
                pod,
                container,
                share,
                None if busy is None else us(busy),
                own or Decimal(0),
                shared,
                compute or None,
                memory if compute else None,
                int(gi) if gi else None,
                profile,
            )
        )
    for (cluster, uuid), group in unseen.items():
        # held but absent from gpu_device_up (an older exporter, a lost series): the GPU
        # existed while it was held, so its cost is billed rather than silently dropped
        log.warning("GPU %s (%s) is held but has no gpu_device_up series", uuid, cluster)
        add_gpu(facts, cluster, uuid, group[-1].labels, us(w.present(merged(group))))

    pod_and_namespace_labels(w, facts)
    return facts


def pod_and_namespace_labels(w: Window, facts: HourFacts) -> None:
    """kube-state-metrics' ``kube_pod_labels`` / ``kube_namespace_labels`` of the hour."""
    for (cluster, ns, pod), labels in _latest_labels(w, "kube_pod_labels", ("namespace", "pod")):
        facts.pod_labels[(cluster, ns, pod)] = labels
    for (cluster, ns), labels in _latest_labels(w, "kube_namespace_labels", ("namespace",)):
        facts.namespace_labels[(cluster, ns)] = labels


def add_gpu(
    facts: HourFacts,
    cluster: str,
    uuid: str,
    lab: dict[str, str],
    present: Decimal,
    lost: Decimal = Decimal(0),
) -> None:
    # dcgm-exporter's releases (and our exporter by default) write Hostname, its main branch
    # hostname (NVIDIA/dcgm-exporter#655; gpu-exporter --hostname-label hostname)
    node = lab.get("Hostname") or lab.get("hostname", "")
    facts.gpus.append(
        GpuHour(
            cluster,
            node,
            uuid,
            lab.get("modelName", ""),
            lab.get("node_pool") or None,
            present,
            lost,
        )
    )
    facts.cluster_of[uuid] = cluster
    facts.node_of[uuid] = node


def _latest_labels(
    w: Window, metric: str, names: tuple[str, ...]
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
