"""Pod and namespace labels from the Kubernetes API into their history
(costsvc/labels/history.py).

A watcher lists pods and namespaces, then watches them from the list's resourceVersion
(relisting on 410 Gone). A pod seen for the first time has had its labels since it was
created; a change to a known pod dates from when it is seen; a deleted pod's row is closed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from costsvc.kit.times import parse_utc
from costsvc.labels.history import LabelHistory
from kube.watch import KindWatches


def _time(text: str | None) -> datetime | None:
    return parse_utc(text) if text else None


class LabelWatcher(KindWatches):
    """List + watch pods and namespaces into a :class:`LabelHistory` (two
    :class:`kube.watch.ListWatch` loops); ``on_error("pods" | "namespaces")`` counts failures."""

    def __init__(
        self,
        history: LabelHistory,
        api: Any,
        on_error: Callable[[str], None],
        retry_delay: float = 5.0,
        watch_timeout: int = 300,
    ) -> None:
        self._history = history
        lists = {  # api: a kubernetes.client.CoreV1Api
            "pods": api.list_pod_for_all_namespaces,
            "namespaces": api.list_namespace,
        }
        super().__init__(
            lists, on_error, name="labels", retry_delay=retry_delay, watch_timeout=watch_timeout
        )

    def _apply(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        labels = dict(meta.get("labels") or {})
        now = datetime.now(UTC)
        created = _time(meta.get("creationTimestamp"))
        gone = _time(meta.get("deletionTimestamp")) or now
        if kind == "namespaces":
            if event_type == "DELETED":
                self._history.close_namespace(meta.get("name", ""), min(gone, now))
            else:
                self._history.observe_namespace(meta.get("name", ""), labels, now, created)
            return
        if event_type == "DELETED":
            self._history.close_pod(meta.get("uid", ""), min(gone, now))
            return
        # a pod seen for the first time has had its labels since it was created; a change to
        # a known pod (an update, or one found by a relist after 410 Gone) dates from now
        self._history.observe_pod(
            meta.get("uid", ""),
            meta.get("namespace", ""),
            meta.get("name", ""),
            labels,
            now,
            created,
        )

    def _listed(self, kind: str, items: list[dict[str, Any]]) -> None:
        for item in items:
            self._apply(kind, "ADDED", item)
        if kind == "pods":
            present = {(i.get("metadata") or {}).get("uid", "") for i in items}
            self._history.close_missing_pods(present, datetime.now(UTC))
