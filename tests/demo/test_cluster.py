"""The demo's kube-state-metrics stand-in (demo/cluster.py) publishes each pod's owner in
kube-state-metrics' own form (kubernetes/kube-state-metrics docs/metrics/workload/
pod-metrics.md, replicaset-metrics.md, job-metrics.md), so that the cost service knows every
demo pod's controller and the OpenCost UI's drill-down by controller reaches its pods. Fast:
no demo is started."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from costsvc.rules.workloads import controllers_of, template_hash
from demo.cluster import exposition
from demo.history import NODES
from exporter.simulate.spec import load

ROOT = Path(__file__).resolve().parents[2]
FLEETS = [load(ROOT / "examples" / name) for name in NODES]
OWNER_LABELS = {"owner_kind", "owner_name", "owner_is_controller"}


def _series(t: float = 600.0) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(exposition(FLEETS, t)):
        for sample in family.samples:
            assert sample.value == 1 or sample.name == "kube_resourcequota"
            out.setdefault(sample.name, []).append(dict(sample.labels))
    return out


def test_every_pod_has_one_kube_pod_owner_in_kube_state_metrics_form() -> None:
    series = _series()
    pods = {(p.namespace, p.name): p.pod_uid() for f in FLEETS for p in f.pods if p.alive(600)}
    assert pods
    owners = series["kube_pod_owner"]
    assert sorted((o["namespace"], o["pod"]) for o in owners) == sorted(pods)
    for o in owners:
        assert set(o) == {"namespace", "pod", "uid"} | OWNER_LABELS
        assert o["uid"] == pods[(o["namespace"], o["pod"])]
        if o["owner_kind"] == "<none>":  # a bare pod, as kube-state-metrics writes it
            assert o["owner_name"] == o["owner_is_controller"] == "<none>"
        else:
            assert o["owner_is_controller"] == "true" and o["owner_name"]
    for metric, name in (("kube_replicaset_owner", "replicaset"), ("kube_job_owner", "job_name")):
        for o in series[metric]:
            assert set(o) == {"namespace", name} | OWNER_LABELS


def test_the_cost_services_rule_finds_each_pods_controller() -> None:
    """What costsvc/ingest/hour.py ``pod_controllers`` hands the rule, from the exposition:
    Deployments through their ReplicaSets (and the pod-template-hash label), CronJobs through
    their Jobs, StatefulSets as themselves, bare pods none."""
    series = _series()
    pods = {
        (o["namespace"], o["pod"]): None
        if o["owner_kind"] == "<none>"
        else (o["owner_kind"], o["owner_name"])
        for o in series["kube_pod_owner"]
    }
    parents = [
        ((o["namespace"], (kind, o[name])), (o["owner_kind"], o["owner_name"]))
        for metric, name, kind in (
            ("kube_replicaset_owner", "replicaset", "ReplicaSet"),
            ("kube_job_owner", "job_name", "Job"),
        )
        for o in series[metric]
    ]
    labels = {(o["namespace"], o["pod"]): template_hash(o) for o in series["kube_pod_labels"]}
    found = controllers_of(pods, parents, labels)
    assert found[("ml-serving", "chat-a")] == found[("ml-serving", "chat-b")]
    assert found[("ml-serving", "chat-a")] == ("Deployment", "chat")
    assert found[("vision", "embed-batch")] == ("CronJob", "embed-batch")
    assert (
        found[("search", "ranker-0")] == found[("search", "ranker-1")] == ("StatefulSet", "ranker")
    )
    assert found[("sandbox", "notebook-ana")] == ("", "")
    kinds = {kind for kind, _ in found.values()}
    assert kinds == {"Deployment", "CronJob", "StatefulSet", ""}
    # every pod that has an owner has a controller: none is left at its ReplicaSet or Job
    assert all(found[k] != ("", "") for k, owner in pods.items() if owner)
