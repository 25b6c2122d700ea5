"""Kueue LocalQueues from the Kubernetes API into their history (costsvc/queues/links.py):
which ClusterQueue each LocalQueue points to, over time (docs/queues.md).

The LocalQueue objects of ``kueue.x-k8s.io`` (``v1beta1`` or ``v1beta2``: the version the
cluster serves, ``COSTSVC_KUEUE_API_VERSION``), plural ``localqueues``, namespaced; the link
is ``spec.clusterQueue`` in both (kubernetes-sigs/kueue
``apis/kueue/v1beta1/localqueue_types.go`` and ``apis/kueue/v1beta2/localqueue_types.go``,
``LocalQueueSpec.ClusterQueue``, ``json:"clusterQueue,omitempty"``). Listed across namespaces,
then watched from the list's resourceVersion (kube/watch.py). A LocalQueue seen for the first
time has pointed there since it was created; a deleted one's row is closed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from costsvc.ingest.tokens import stored_text
from costsvc.kit.times import parse_utc
from costsvc.queues.links import LocalQueueHistory
from kube.watch import KindWatches

GROUP = "kueue.x-k8s.io"  # apis/kueue/v1beta2/groupversion_info.go
PLURAL = "localqueues"
VERSIONS = ("v1beta1", "v1beta2")


def _time(text: str | None) -> datetime | None:
    return parse_utc(text) if text else None


class LocalQueueWatcher(KindWatches):
    """List + watch LocalQueues into a :class:`LocalQueueHistory`; ``api``: a
    ``kubernetes.client.CustomObjectsApi``; ``on_error("localqueues")`` counts failures."""

    def __init__(
        self,
        history: LocalQueueHistory,
        api: Any,
        version: str,
        on_error: Callable[[str], None],
        retry_delay: float = 5.0,
        watch_timeout: int = 300,
    ) -> None:
        if version not in VERSIONS:
            raise ValueError(f"Kueue API version: use one of {', '.join(VERSIONS)}")
        self._history = history
        lists = {PLURAL: partial(api.list_cluster_custom_object, GROUP, version, PLURAL)}
        super().__init__(
            lists, on_error, name="kueue", retry_delay=retry_delay, watch_timeout=watch_timeout
        )

    def _apply(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        namespace = stored_text(str(meta.get("namespace") or ""))
        name = stored_text(str(meta.get("name") or ""))
        now = datetime.now(UTC)
        if event_type == "DELETED":
            gone = _time(meta.get("deletionTimestamp")) or now
            self._history.close(namespace, name, min(gone, now))
            return
        target = stored_text(str((obj.get("spec") or {}).get("clusterQueue") or ""))
        created = _time(meta.get("creationTimestamp"))
        self._history.observe(namespace, name, target, now, created)

    def _listed(self, kind: str, items: list[dict[str, Any]]) -> None:
        for item in items:
            self._apply(kind, "ADDED", item)
        present = set()
        for item in items:
            meta = item.get("metadata") or {}
            present.add(
                (
                    stored_text(str(meta.get("namespace") or "")),
                    stored_text(str(meta.get("name") or "")),
                )
            )
        self._history.close_missing(present, datetime.now(UTC))
