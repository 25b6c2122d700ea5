"""Pod owners and ResourceQuotas from a real loopback Kubernetes API into their history and
store (costsvc/advice/kube_owners.py, costsvc/advice/repository.py), on SQLite and PostgreSQL;
hostile names in the stored advice stay inert in the CSV and the command's table."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine

from costsvc.advice.kube_owners import OwnerWatcher, quota_limits
from costsvc.advice.repository import OwnerHistory, QuotaStore, save_advice
from costsvc.advice.run import table
from costsvc.db.migrate import upgrade
from costsvc.labels.history import LabelHistory
from costsvc.labels.kube_watch import LabelWatcher
from kube.client import core_api
from kube.watch import SharedWatches
from tests.costsvc.apiserver import Clock, serve
from tests.kubeapi import KubeApi, pod_json, wait_until

RQ = "/api/v1/resourcequotas"
RS = "/apis/apps/v1/replicasets"


@pytest.fixture
def api() -> Iterator[KubeApi]:
    server = KubeApi()
    yield server
    server.stop()


def _owned(pod: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "u", "controller": True}
    ]
    return pod


def _quota(ns: str, hard: dict[str, str], used: dict[str, str]) -> dict[str, Any]:
    return {
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "namespace": ns, "uid": f"rq-{ns}"},
        "spec": {"hard": hard},
        "status": {"hard": hard, "used": used},
    }


def test_owners_and_quotas_follow_the_api(api: KubeApi, db_url: str) -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    owners, quotas = OwnerHistory(engine, "c1"), QuotaStore(engine, "c1")
    pod = _owned(pod_json("ml", "web-6d5f7b9c8d-x2k9p", "uid-w", "n1", {}, {"m": "a" * 64}),
                 "ReplicaSet", "web-6d5f7b9c8d")  # fmt: skip
    api.put(pod)
    api.put_object(RS, _owned({"kind": "ReplicaSet", "metadata": {"name": "web-6d5f7b9c8d",
                   "namespace": "ml", "uid": "rs-1"}}, "Deployment", "web"))  # fmt: skip
    api.put_object(RQ, _quota("ml", {"requests.nvidia.com/gpu": "4", "pods": "10"},
                              {"requests.nvidia.com/gpu": "1"}))  # fmt: skip
    watcher = OwnerWatcher(owners, quotas, core_api(host=api.url), lambda k: None, retry_delay=0.05)
    watcher.start()
    try:
        assert all(s.wait(10) for s in watcher.synced.values())
        now = datetime.now(UTC)
        pods, parents = owners.owners_during(now - timedelta(minutes=1), now + timedelta(hours=1))
        assert pods[("ml", "web-6d5f7b9c8d-x2k9p")] == ("ReplicaSet", "web-6d5f7b9c8d")
        assert parents[("ml", ("ReplicaSet", "web-6d5f7b9c8d"))] == ("Deployment", "web")
        # only GPU resources are kept
        assert [(q.resource, q.hard, q.used) for q in quotas.limits()] == [
            ("requests.nvidia.com/gpu", "4", "1")
        ]
        api.put_object(RQ, _quota("ml", {"requests.nvidia.com/mig-1g.10gb": "7"}, {}))
        wait_until(lambda: [q.resource for q in quotas.limits()] == [
            "requests.nvidia.com/mig-1g.10gb"])  # fmt: skip
        api.delete_object(RQ, "rq-ml")
        wait_until(lambda: quotas.limits() == [])
        api.delete("uid-w")
        wait_until(
            lambda: (
                ("ml", "web-6d5f7b9c8d-x2k9p")
                not in owners.owners_during(now + timedelta(hours=2), now + timedelta(hours=3))[0]
            )
        )
    finally:
        watcher.stop()
    # the pod deleted now still had its owner while it ran
    pods, _ = owners.owners_during(now - timedelta(minutes=1), now)
    assert pods[("ml", "web-6d5f7b9c8d-x2k9p")] == ("ReplicaSet", "web-6d5f7b9c8d")
    engine.dispose()


def test_one_pod_watch_feeds_the_label_and_the_owner_histories(api: KubeApi, db_url: str) -> None:
    """The service follows pods once (kube/watch.py SharedWatches), not once per history: one
    pods list and one open pods watch, every event reaching both histories, a failure counted
    by both."""
    upgrade(db_url)
    engine = create_engine(db_url)
    labels, owners = LabelHistory(engine, "c1"), OwnerHistory(engine, "c1")
    api.put(_owned(pod_json("ml", "a-1", "uid-a", "n1", {"team": "nlp"}, {"m": "a" * 64}),
                   "Job", "a"))  # fmt: skip
    api.put_namespace("ml", {"team": "ns-team"})
    errors: list[str] = []
    label_watch = LabelWatcher(labels, core_api(host=api.url), errors.append)
    owner_watch = OwnerWatcher(owners, QuotaStore(engine, "c1"), core_api(host=api.url),
                               errors.append)  # fmt: skip
    shared = SharedWatches(label_watch, owner_watch, name="test", retry_delay=0.05)
    assert set(shared.synced) == {"pods", "namespaces", "replicasets", "jobs", "resourcequotas"}
    shared.start()
    try:
        assert all(s.wait(10) for s in shared.synced.values())
        wait_until(lambda: api.watches() == 5)  # one per kind: pods once
        assert api.paths.count(("/api/v1/pods", "list")) == 1
        assert api.paths.count(("/api/v1/pods", "watch")) == 1
        now = datetime.now(UTC)
        later = (now - timedelta(minutes=1), now + timedelta(hours=1))
        assert labels.labels_during(*later)[0][("ml", "a-1")] == {"team": "nlp"}
        assert owners.owners_during(*later)[0][("ml", "a-1")] == ("Job", "a")

        api.put(_owned(pod_json("ml", "b-1", "uid-b", "n1", {"team": "cv"}, {"m": "b" * 64}),
                       "Job", "b"))  # fmt: skip
        wait_until(lambda: ("ml", "b-1") in labels.labels_during(*later)[0])
        wait_until(lambda: ("ml", "b-1") in owners.owners_during(*later)[0])
        assert labels.labels_during(*later)[0][("ml", "b-1")] == {"team": "cv"}
        assert owners.owners_during(*later)[0][("ml", "b-1")] == ("Job", "b")

        api.error_watches(500, "InternalError", "etcd leader changed")
        wait_until(lambda: errors.count("pods") == 2)  # counted by both of the pods' users
        wait_until(lambda: {"namespaces", "jobs"} <= set(errors))  # each other kind by its own
        assert api.paths.count(("/api/v1/pods", "list")) == 1  # resumed from its version
    finally:
        shared.stop()
    engine.dispose()


def test_quota_limits_of_a_quota_without_status() -> None:
    obj = {"spec": {"hard": {"requests.nvidia.com/gpu": "2", "cpu": "8"}}}
    assert quota_limits(obj) == {"requests.nvidia.com/gpu": ("2", None)}


HOSTILE = '=HYPERLINK("http://x","y")'


def test_hostile_names_stay_inert(db_url: str) -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    at = datetime(2026, 11, 20, tzinfo=UTC)
    row = {
        "computed_at": at, "window_start": at - timedelta(days=7), "window_end": at,
        "team": HOSTILE, "namespace": "+cmd", "workload_kind": "Deployment",
        "workload": "@SUM(1)\nx\x1b[31m", "gpu_model": "-2+3", "pods": 1, "action": "release",
        "target": "", "reason": "idle", "device_hours": 168_000_000, "gpu_hours": 168_000_000,
        "memory_p95_bytes": 1, "memory_peak_bytes": 1, "activity_p95_ppm": 0,
        "activity_source": "profiling", "idle_ppm": 1_000_000, "current_share_ppm": 1_000_000,
        "target_share_ppm": 0, "currency": "USD", "current_monthly": 1,
        "recommended_monthly": 0, "saving_monthly": 1,
    }  # fmt: skip
    save_advice(engine, "c1", [row], [])
    text = table([{**row, "cluster": "c1"}])
    assert "\x1b" not in text and "\\x1b" in text and "\\n" in text
    engine.dispose()
    with serve(db_url, Clock(at), teams=["other"]) as api:
        got = api.get("/v1/recommendations.csv").text
        own = api.get("/v1/recommendations").json()["rows"]
        none = api.get("/v1/recommendations", who="team:other").json()["rows"]
    cells = next(csv.DictReader(io.StringIO(got)))
    assert cells["team"] == "'" + HOSTILE
    assert cells["namespace"] == "'+cmd"
    assert cells["workload"].startswith("'@SUM(1)")
    assert cells["gpu_model"] == "'-2+3"
    assert [r["team"] for r in own] == [HOSTILE]
    assert none == []
