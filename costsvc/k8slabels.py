"""Pod and namespace labels from the Kubernetes API into their history (costsvc/db/labels.py).

A watcher lists pods and namespaces, then watches them from the list's resourceVersion
(relisting on 410 Gone). A pod seen for the first time has had its labels since it was
created; a change to a known pod dates from when it is seen; a deleted pod's row is closed.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from costsvc.db.labels import LabelHistory

log = logging.getLogger(__name__)


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


class LabelWatcher:
    """List + watch pods and namespaces into a :class:`LabelHistory` (two threads)."""

    def __init__(self, history: LabelHistory, api: Any, on_error: Callable[[str], None],
                 retry_delay: float = 5.0, watch_timeout: int = 300) -> None:  # fmt: skip
        self._history = history
        self._api = api  # kubernetes.client.CoreV1Api
        self._on_error = on_error
        self._retry_delay = retry_delay
        self._watch_timeout = watch_timeout
        self._stop = threading.Event()
        self._watches: list[Any] = []
        self.synced = {"pods": threading.Event(), "namespaces": threading.Event()}
        self._threads = [
            threading.Thread(target=self._run, args=(kind,), daemon=True, name=f"labels-{kind}")
            for kind in self.synced
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for w in self._watches:
            w.stop()
        for t in self._threads:
            t.join(timeout=2)

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
        self._history.observe_pod(meta.get("uid", ""), meta.get("namespace", ""),
                                  meta.get("name", ""), labels, now, created)  # fmt: skip

    def _list(self, kind: str) -> str:
        fn = (self._api.list_pod_for_all_namespaces if kind == "pods"
              else self._api.list_namespace)  # fmt: skip
        body = json.loads(fn(_preload_content=False).data)
        items = body.get("items") or []
        for item in items:
            self._apply(kind, "ADDED", item)
        if kind == "pods":
            present = {(i.get("metadata") or {}).get("uid", "") for i in items}
            self._history.close_missing_pods(present, datetime.now(UTC))
        self.synced[kind].set()
        return str((body.get("metadata") or {}).get("resourceVersion", ""))

    def _run(self, kind: str) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        fn = (self._api.list_pod_for_all_namespaces if kind == "pods"
              else self._api.list_namespace)  # fmt: skip
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._list(kind)
                w = watch.Watch()
                self._watches.append(w)
                for event in w.stream(fn, resource_version=version,
                                      timeout_seconds=self._watch_timeout):  # fmt: skip
                    if self._stop.is_set():
                        return
                    raw = event.get("raw_object") or {}
                    self._apply(kind, event.get("type", ""), raw)
                    version = str((raw.get("metadata") or {}).get("resourceVersion") or version)
            except ApiException as exc:
                if exc.status == 410:
                    version = ""
                    continue
                self._failed(kind, exc)
            except Exception as exc:  # the API server is down or the stream broke
                self._failed(kind, exc)

    def _failed(self, kind: str, exc: Exception) -> None:
        self._on_error(kind)
        log.warning("kubernetes API (%s): %s", kind, exc)
        self._stop.wait(self._retry_delay)
