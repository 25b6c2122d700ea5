"""The demo's cluster beyond its nodes: namespaces (with their team labels) and GPU
ResourceQuotas, and kube-state-metrics' series of them and of the pods — in the history and
served live while the demo runs (:class:`KubeStateMetrics`, a stand-in for kube-state-metrics).

The series are kube-state-metrics' own (kubernetes/kube-state-metrics ``docs/``):
``kube_pod_labels{namespace, pod, label_<key>}`` (pod-metrics.md),
``kube_namespace_labels{namespace, label_<key>}`` (namespace-metrics.md) and
``kube_resourcequota{namespace, resourcequota, resource, type="hard"|"used"}``
(resourcequota-metrics.md), label keys sanitised as kube-state-metrics does
(:func:`kube.label_names.sanitize_label`). A quota's ``used`` is what the quota controller counts:
the extended resources requested by the namespace's running pods (a device-plugin request
of N ids is N; a HAMi container asks for one ``nvidia.com/gpu``, HAMi's default resource
name); DRA claims are not extended resources and count for no such quota.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from demo.stack import MetricsServer
from exporter.simulate.spec import FleetSpec, load
from kube.label_names import sanitize_label

# namespace -> its labels; the cost model reads a pod's team from its own labels, else its
# namespace's (examples/cost-model.yaml namespace_fallback)
NAMESPACES: dict[str, dict[str, str]] = {
    "nlp": {"team": "nlp"},
    "vision": {"team": "vision"},
    "search": {"team": "search"},
    "recsys": {"team": "recsys"},
    "research": {"team": "research"},
    "chat": {"team": "chat"},
    "ml-serving": {"team": "chat"},  # shared with docs-ai, whose pod carries its own label
    "sandbox": {},  # no team: its notebook stays __unallocated__, and so does its quota
}
# (namespace, ResourceQuota name, hard limits of GPU resources)
QUOTAS: tuple[tuple[str, str, dict[str, int]], ...] = (
    ("nlp", "gpu-quota", {"requests.nvidia.com/gpu": 4, "requests.nvidia.com/mig-3g.40gb": 2}),
    (
        "vision",
        "gpu-quota",
        {"requests.nvidia.com/mig-2g.20gb": 2, "requests.nvidia.com/gpu.shared": 2},
    ),
    ("search", "gpu-quota", {"requests.nvidia.com/gpu.shared": 4}),
    ("sandbox", "gpu-quota", {"requests.nvidia.com/mig-1g.10gb": 1}),
)
HAMI_RESOURCE = "nvidia.com/gpu"  # HAMi's default resourceCountName


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return "".join(f',{sanitize_label(k)}="{v}"' for k, v in sorted(pairs))


def requested(fleets: Iterable[FleetSpec], t: float) -> Counter[tuple[str, str]]:
    """Extended resources requested by the running pods at ``t``, by (namespace, resource)."""
    out: Counter[tuple[str, str]] = Counter()
    for spec in fleets:
        for pod in spec.pods:
            if not pod.alive(t) or pod.phase != "Running":
                continue
            for c in pod.containers:
                for d in c.devices:
                    out[(pod.namespace, d.resource)] += len(d.ids)
                out[(pod.namespace, HAMI_RESOURCE)] += len(c.hami)
    return out


def pod_labels(fleets: list[FleetSpec], t: float) -> list[str]:
    """kube-state-metrics' ``kube_pod_labels`` of the pods alive at ``t`` (seconds since the
    specs' epoch), as exposition lines."""
    out = ["# TYPE kube_pod_labels gauge"]
    for spec in fleets:
        for pod in spec.pods:
            if pod.alive(t):
                labels = _labels(pod.labels.items())
                out.append(
                    f'kube_pod_labels{{namespace="{pod.namespace}",pod="{pod.name}"{labels}}} 1'
                )
    return out


def exposition(fleets: list[FleetSpec], t: float) -> str:
    """kube-state-metrics' answer at ``t`` (seconds since the specs' epoch)."""
    out = pod_labels(fleets, t)
    out.append("# TYPE kube_namespace_labels gauge")
    for ns, ns_labels in sorted(NAMESPACES.items()):
        out.append(f'kube_namespace_labels{{namespace="{ns}"{_labels(ns_labels.items())}}} 1')
    out.append("# TYPE kube_resourcequota gauge")
    used = requested(fleets, t)
    for ns, name, hard in QUOTAS:
        for resource, limit in sorted(hard.items()):
            held = used[(ns, resource.removeprefix("requests."))]
            for kind, value in (("hard", limit), ("used", held)):
                out.append(
                    f'kube_resourcequota{{namespace="{ns}",resourcequota="{name}",'
                    f'resource="{resource}",type="{kind}"}} {value}'
                )
    return "\n".join(out) + "\n"


class KubeStateMetrics(MetricsServer):
    """A stand-in for kube-state-metrics while the demo runs: ``/metrics`` answers
    :func:`exposition` for the live specs at the present (t since ``epoch``)."""

    def __init__(self, specs: list[Path], epoch: datetime, port: int) -> None:
        fleets = [load(p) for p in specs]
        start = epoch.timestamp()

        def answer(at: str) -> str | None:
            return exposition(fleets, time.time() - start) if at == "/metrics" else None

        super().__init__(port, answer)
