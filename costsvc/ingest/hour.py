"""One hour's facts from Prometheus: GPUs present, holdings, utilisation and pod labels."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from costsvc.attribution import GpuHour, Holding
from costsvc.ingest.integrate import covered, integral, mean
from costsvc.ingest.prom import PrometheusReader, Series

SCRAPE_GAP = Decimal(60)  # a sample holds at most this long: longer silences are gaps
PRESENCE_GAP = Decimal(3600)  # a GPU seen in the hour exists between sightings

_SANITIZE = re.compile(r"[^a-zA-Z0-9_]")


def sanitize(key: str) -> str:
    """A label key as kube-state-metrics writes it: ``app.kubernetes.io/team`` ->
    ``label_app_kubernetes_io_team``."""
    return "label_" + _SANITIZE.sub("_", key)


@dataclass
class HourFacts:
    start: datetime
    gpus: list[GpuHour] = field(default_factory=list)
    holdings: list[Holding] = field(default_factory=list)
    pod_labels: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)


def collect_hour(prom: PrometheusReader, start: datetime, default_cluster: str) -> HourFacts:
    end = start + timedelta(hours=1)
    t0, t1 = Decimal(str(start.timestamp())), Decimal(str(end.timestamp()))
    look = 3600 + int(PRESENCE_GAP)

    def read(selector: str) -> list[Series]:
        return prom.raw(selector, end - timedelta(microseconds=1), look)

    facts = HourFacts(start)
    for s in read("gpu_device_up"):
        present = covered(s.samples, t0, t1, PRESENCE_GAP)
        if present > 0:
            lab = s.labels
            facts.gpus.append(GpuHour(lab.get("cluster", default_cluster), lab.get("Hostname", ""),
                                      lab.get("UUID", ""), lab.get("modelName", ""),
                                      lab.get("node_pool"), present))  # fmt: skip

    def latest(selector: str) -> list[dict[str, str]]:
        return prom.latest(selector, end - timedelta(microseconds=1), 3600)

    slices = {
        (lab.get("UUID", ""), lab.get("GPU_I_ID", "")): (
            int(lab.get("compute_slices", "0") or 0),
            int(lab.get("memory_slices", "0") or 0),
        )
        for lab in latest("gpu_mig_instance_info")
    }
    util: dict[tuple[str, str], Decimal] = {}
    for s in read("DCGM_FI_DEV_GPU_UTIL"):
        util[(s.labels.get("UUID", ""), "")] = mean(s.samples, t0, t1, SCRAPE_GAP) / 100
    for s in read("DCGM_FI_PROF_GR_ENGINE_ACTIVE"):  # preferred where the GPU has it
        util[(s.labels.get("UUID", ""), s.labels.get("GPU_I_ID", ""))] = mean(
            s.samples, t0, t1, SCRAPE_GAP
        )
    sm = {
        (s.labels.get("UUID", ""), s.labels.get("namespace", ""), s.labels.get("pod", ""),
         s.labels.get("container", "")): integral(s.samples, t0, t1, SCRAPE_GAP)
        for s in read("gpu_container_sm_utilization_ratio")
    }  # fmt: skip

    for s in read("gpu_allocation_share"):
        lab = s.labels
        share = integral(s.samples, t0, t1, SCRAPE_GAP)
        if share <= 0:
            continue
        uuid, gi = lab.get("UUID", ""), lab.get("GPU_I_ID", "")
        ns, pod, container = lab.get("namespace", ""), lab.get("pod", ""), lab.get("container", "")
        whole_value = max((v for _, v in s.samples), default=Decimal(0))
        shared = not gi and whole_value < 1
        sm_seconds = sm.get((uuid, ns, pod, container), Decimal(0))
        if shared:
            busy = min(share, sm_seconds)
        else:
            busy = share * min(util.get((uuid, gi), Decimal(0)), Decimal(1))
        compute, memory = slices.get((uuid, gi), (0, 0)) if gi else (0, 0)
        facts.holdings.append(Holding(uuid, ns, pod, container, share, busy, sm_seconds, shared,
                                      compute or None, memory if compute else None,
                                      int(gi) if gi else None))  # fmt: skip

    pod_labels = _latest_labels(prom, "kube_pod_labels", ("namespace", "pod"), latest, t1, end)
    facts.pod_labels = {(k[0], k[1]): v for k, v in pod_labels.items()}
    ns_labels = _latest_labels(prom, "kube_namespace_labels", ("namespace",), latest, t1, end)
    facts.namespace_labels = {k[0]: v for k, v in ns_labels.items()}
    return facts


def _latest_labels(
    prom: PrometheusReader,
    metric: str,
    key: tuple[str, ...],
    latest: Any,
    t1: Decimal,
    end: datetime,
) -> dict[tuple[str, ...], dict[str, str]]:
    """Each object's labels as last seen in the hour: one answer per series, and for the rare
    object relabelled within the hour (several series), its raw samples decide."""
    found: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for lab in latest(metric):
        found.setdefault(tuple(lab.get(n, "") for n in key), []).append(lab)
    out = {}
    for k, sets in found.items():
        if len(sets) == 1:
            out[k] = _label_values(sets[0])
            continue
        match = ",".join(f'{n}="{v}"' for n, v in zip(key, k, strict=True) if '"' not in v)
        newest: tuple[Decimal, dict[str, str]] | None = None
        for s in prom.raw(f"{metric}{{{match}}}", end - timedelta(microseconds=1), 3600):
            stamp = max((t for t, _ in s.samples if t < t1), default=None)
            if stamp is not None and (newest is None or stamp >= newest[0]):
                newest = (stamp, _label_values(s.labels))
        out[k] = newest[1] if newest else _label_values(sorted(sets, key=str)[-1])
    return out


def _label_values(labels: dict[str, str]) -> dict[str, str]:
    return {n: v for n, v in labels.items() if n.startswith("label_")}
