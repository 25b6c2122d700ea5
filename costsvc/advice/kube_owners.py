"""Pod owners and ResourceQuotas from the Kubernetes API, for rightsizing and quotas.

Four :class:`kube.watch.ListWatch` loops, the pattern of costsvc/labels/kube_watch.py: pods (their
controller from ``metadata.ownerReferences``, into :class:`costsvc.advice.repository.OwnerHistory`
like labels: a new pod's owner dates from its creation, a deleted pod's row is closed),
ReplicaSets (``apps/v1``) and Jobs (``batch/v1``) (their own controller: the Deployment, the
CronJob), and ResourceQuotas (``status.hard`` / ``status.used`` of the GPU resources, e.g.
``requests.nvidia.com/gpu``, ``requests.nvidia.com/mig-1g.10gb``; ``spec.hard`` until the
quota controller has written a status) into :class:`costsvc.advice.repository.QuotaStore`. The
service runs it together with the label watcher over one pods watch (``kube.watch.SharedWatches``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from costsvc.advice.quotas import MAX_TEXT
from costsvc.advice.repository import OwnerHistory, QuotaStore
from costsvc.labels.kube_watch import _time
from costsvc.rules.workloads import controller_of
from kube.watch import KindWatches

CONTROLLED = {"replicasets": "ReplicaSet", "jobs": "Job"}


def gpu_resource(name: str) -> bool:
    """A quota resource that limits GPUs: NVIDIA's device-plugin names (whole GPUs, MIG
    profiles, shared replicas), with or without the ``requests.``/``limits.`` prefix."""
    return "nvidia.com/" in name


def quota_limits(obj: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    spec = (obj.get("spec") or {}).get("hard") or {}
    status = obj.get("status") or {}
    hard = status.get("hard") or spec
    used = status.get("used") or {}
    return {
        str(r)[:253]: (_kept(v), None if used.get(r) is None else _kept(used[r]))
        for r, v in hard.items()
        if gpu_resource(str(r))
    }


def _kept(value: Any) -> str:
    """A quantity as written; one longer than the column keeps is cut and marked with ``…``,
    so that it never reads as another quantity (costsvc/advice/quotas.py: no limit)."""
    text = str(value)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


class OwnerWatcher(KindWatches):
    """List + watch pods, ReplicaSets, Jobs and ResourceQuotas; ``on_error(kind)`` counts
    failures. ``api``: a CoreV1Api (the apps and batch APIs use its client)."""

    def __init__(
        self,
        owners: OwnerHistory,
        quotas: QuotaStore,
        api: Any,
        on_error: Callable[[str], None],
        retry_delay: float = 5.0,
        watch_timeout: int = 300,
    ) -> None:
        from kubernetes import client

        self._owners = owners
        self._quotas = quotas
        apps = client.AppsV1Api(api.api_client)
        batch = client.BatchV1Api(api.api_client)
        lists = {
            "pods": api.list_pod_for_all_namespaces,
            "replicasets": apps.list_replica_set_for_all_namespaces,
            "jobs": batch.list_job_for_all_namespaces,
            "resourcequotas": api.list_resource_quota_for_all_namespaces,
        }
        super().__init__(
            lists, on_error, name="owners", retry_delay=retry_delay, watch_timeout=watch_timeout
        )

    def _apply(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        now = datetime.now(UTC)
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        if kind == "resourcequotas":
            limits = {} if event_type == "DELETED" else quota_limits(obj)
            self._quotas.replace(namespace, name, limits, now)
            return
        owner = controller_of(meta.get("ownerReferences"))
        if kind in CONTROLLED:
            if event_type != "DELETED":  # kept: the pods it had still belong to its owner
                self._owners.observe_controller(namespace, CONTROLLED[kind], name, owner, now)
            return
        uid = str(meta.get("uid", ""))
        if event_type == "DELETED":
            gone = _time(meta.get("deletionTimestamp")) or now
            self._owners.close_pod(uid, min(gone, now))
            return
        created = _time(meta.get("creationTimestamp"))
        self._owners.observe_pod(uid, namespace, name, owner, now, created)

    def _listed(self, kind: str, items: list[dict[str, Any]]) -> None:
        for item in items:
            self._apply(kind, "ADDED", item)
        metas = [i.get("metadata") or {} for i in items]
        if kind == "pods":
            self._owners.close_missing_pods({m.get("uid", "") for m in metas}, datetime.now(UTC))
        elif kind == "resourcequotas":
            self._quotas.keep_only({(m.get("namespace", ""), m.get("name", "")) for m in metas})
