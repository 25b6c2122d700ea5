"""The demo's cluster beyond its nodes: namespaces (with their team labels) and GPU
ResourceQuotas, and kube-state-metrics' series of them and of the pods — in the history and
served live while the demo runs (:class:`KubeStateMetrics`, a stand-in for kube-state-metrics).

The series are kube-state-metrics' own (kubernetes/kube-state-metrics ``docs/``):
``kube_pod_labels{namespace, pod, label_<key>}`` (pod-metrics.md),
``kube_namespace_labels{namespace, label_<key>}`` (namespace-metrics.md) and
``kube_resourcequota{namespace, resourcequota, resource, type="hard"|"used"}``
(resourcequota-metrics.md), label keys sanitised as kube-state-metrics does
(:func:`kube.label_names.sanitize_label`); the pods' owners as
``kube_pod_owner{namespace, pod, uid, owner_kind, owner_name, owner_is_controller}``
(docs/metrics/workload/pod-metrics.md; ``"<none>"`` in the three owner labels for a pod without
owners, as internal/store writes it: job.go's kube_job_owner, for one) and one level up
``kube_replicaset_owner{namespace, replicaset, owner_kind, owner_name, owner_is_controller}``
(replicaset-metrics.md) and ``kube_job_owner{namespace, job_name, …}`` (job-metrics.md), so the
cost service knows each pod's controller (costsvc/ingest/hour.py ``pod_controllers``) and the
OpenCost UI's drill-down by controller reaches the pods. A quota's ``used`` is what the quota
controller counts: the extended resources requested by the namespace's running pods (a
device-plugin request of N ids is N; a HAMi container asks for one ``nvidia.com/gpu``, HAMi's
default resource name); DRA claims are not extended resources and count for no such quota.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from demo import kueue
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
NONE = "<none>"  # kube-state-metrics' owner labels of an object without owners
# (namespace, pod) -> its controller reference (kind, name); None: a bare pod. A ReplicaSet's
# or a Job's own owner is in PARENTS: the Deployment controller names a ReplicaSet
# <deployment>-<pod-template-hash>, the CronJob controller a Job <cronjob>-<minutes since the
# epoch> (costsvc/rules/workloads.py)
OWNERS: dict[tuple[str, str], tuple[str, str] | None] = {
    ("recsys", "trainer-0"): ("StatefulSet", "trainer"),
    ("ml-serving", "chat-a"): ("ReplicaSet", "chat-6d4cf56db6"),
    ("ml-serving", "chat-b"): ("ReplicaSet", "chat-6d4cf56db6"),
    ("ml-serving", "summarizer"): ("ReplicaSet", "summarizer-7b9f8c6d54"),
    ("research", "probe-mig"): None,
    ("research", "rdma-bench"): ("Job", "rdma-bench-29400000"),
    ("vision", "ocr-30"): ("ReplicaSet", "ocr-58d7c9b6f4"),
    ("search", "embed-50"): ("ReplicaSet", "embed-6f5d8b7c9d"),
    ("search", "rerank-a"): ("ReplicaSet", "rerank-5c7d9f8b6"),
    ("nlp", "tagger"): ("ReplicaSet", "tagger-9d6b7c5f8"),
    ("nlp", "notebook"): ("StatefulSet", "notebook"),
    ("vision", "vgpu-a"): ("ReplicaSet", "desktops-7c8d9b5f6"),
    ("chat", "vgpu-b"): None,
    ("nlp", "llama-ft-0"): ("StatefulSet", "llama-ft"),
    ("vision", "detector-7f9c"): ("ReplicaSet", "detector-5d8f7b9c4"),
    ("sandbox", "notebook-ana"): None,
    ("search", "ranker-0"): ("StatefulSet", "ranker"),
    ("search", "ranker-1"): ("StatefulSet", "ranker"),
    ("vision", "embed-batch"): ("Job", "embed-batch-29400000"),
    ("nlp", "pretrain-0"): ("StatefulSet", "pretrain"),
}
# (namespace, kind, name) of a ReplicaSet or Job -> its controller (kind, name)
PARENTS: dict[tuple[str, str, str], tuple[str, str]] = {
    ("ml-serving", "ReplicaSet", "chat-6d4cf56db6"): ("Deployment", "chat"),
    ("ml-serving", "ReplicaSet", "summarizer-7b9f8c6d54"): ("Deployment", "summarizer"),
    ("research", "Job", "rdma-bench-29400000"): ("CronJob", "rdma-bench"),
    ("vision", "ReplicaSet", "ocr-58d7c9b6f4"): ("Deployment", "ocr"),
    ("search", "ReplicaSet", "embed-6f5d8b7c9d"): ("Deployment", "embed"),
    ("search", "ReplicaSet", "rerank-5c7d9f8b6"): ("Deployment", "rerank"),
    ("nlp", "ReplicaSet", "tagger-9d6b7c5f8"): ("Deployment", "tagger"),
    ("vision", "ReplicaSet", "desktops-7c8d9b5f6"): ("Deployment", "desktops"),
    ("vision", "ReplicaSet", "detector-5d8f7b9c4"): ("Deployment", "detector"),
    ("vision", "Job", "embed-batch-29400000"): ("CronJob", "embed-batch"),
}


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


def _template_hash(namespace: str, pod: str) -> dict[str, str]:
    """The ``pod-template-hash`` label the Deployment controller puts on its ReplicaSet's pods
    (the ReplicaSet's name ends with it)."""
    ref = OWNERS.get((namespace, pod))
    if ref is None or ref[0] != "ReplicaSet":
        return {}
    return {"pod-template-hash": ref[1].rsplit("-", 1)[1]}


def pod_labels(fleets: list[FleetSpec], t: float) -> list[str]:
    """kube-state-metrics' ``kube_pod_labels`` of the pods alive at ``t`` (seconds since the
    specs' epoch), as exposition lines."""
    out = ["# TYPE kube_pod_labels gauge"]
    for spec in fleets:
        for pod in spec.pods:
            if pod.alive(t):
                labels = _labels((pod.labels | _template_hash(pod.namespace, pod.name)).items())
                out.append(
                    f'kube_pod_labels{{namespace="{pod.namespace}",pod="{pod.name}"{labels}}} 1'
                )
    return out


def _owner(kind_name: tuple[str, str] | None) -> str:
    kind, name = kind_name or (NONE, NONE)
    flag = "true" if kind_name else NONE  # a controller reference: controller: true
    return f'owner_kind="{kind}",owner_name="{name}",owner_is_controller="{flag}"'


def owners(fleets: list[FleetSpec], t: float) -> list[str]:
    """kube-state-metrics' ``kube_pod_owner`` of the pods alive at ``t``, and the
    ``kube_replicaset_owner`` / ``kube_job_owner`` of their ReplicaSets and Jobs."""
    out = ["# TYPE kube_pod_owner gauge"]
    parents: set[tuple[str, str, str]] = set()
    for spec in fleets:
        for pod in spec.pods:
            if not pod.alive(t):
                continue
            ref = OWNERS[(pod.namespace, pod.name)]
            if ref and (pod.namespace, *ref) in PARENTS:
                parents.add((pod.namespace, *ref))
            out.append(
                f'kube_pod_owner{{namespace="{pod.namespace}",pod="{pod.name}",'
                f'uid="{pod.pod_uid()}",{_owner(ref)}}} 1'
            )
    for kind, metric, label in (
        ("ReplicaSet", "kube_replicaset_owner", "replicaset"),
        ("Job", "kube_job_owner", "job_name"),
    ):
        out.append(f"# TYPE {metric} gauge")
        for ns, k, name in sorted(parents):
            if k == kind:
                owner = _owner(PARENTS[(ns, k, name)])
                out.append(f'{metric}{{namespace="{ns}",{label}="{name}",{owner}}} 1')
    return out


def exposition(fleets: list[FleetSpec], t: float) -> str:
    """kube-state-metrics' answer at ``t`` (seconds since the specs' epoch)."""
    out = pod_labels(fleets, t) + owners(fleets, t)
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


def scrape(fleets: list[FleetSpec], t: float) -> str:
    """What the stand-in's target answers at ``t``: kube-state-metrics' :func:`exposition`
    and the Kueue stand-in's series (demo/kueue.py)."""
    return exposition(fleets, t) + kueue.exposition()


class KubeStateMetrics(MetricsServer):
    """A stand-in for kube-state-metrics (and Kueue's controller) while the demo runs:
    ``/metrics`` answers :func:`scrape` for the live specs at the present (t since
    ``epoch``)."""

    def __init__(self, specs: list[Path], epoch: datetime, port: int) -> None:
        fleets = [load(p) for p in specs]
        start = epoch.timestamp()

        def answer(at: str) -> str | None:
            return scrape(fleets, time.time() - start) if at == "/metrics" else None

        super().__init__(port, answer)
