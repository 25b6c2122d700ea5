"""Pod and namespace labels from the Kubernetes API, kept as history.

A watcher lists pods and namespaces, then watches them from the list's resourceVersion
(relisting on 410 Gone), and writes one row per distinct label set with its validity
[valid_from, valid_to): a relabelled pod closes its old row and opens a new one, a deleted pod
closes its row — so a pod deleted yesterday is still charged to the team it had. Ingestion asks
:meth:`LabelHistory.labels_during` for the labels in force during an hour.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, insert, or_, select, update

from costsvc.db.models import NamespaceLabels, PodLabels
from costsvc.utc import as_utc

log = logging.getLogger(__name__)


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return as_utc(value)


class LabelHistory:
    def __init__(self, engine: Engine, cluster: str) -> None:
        self._engine = engine
        self._cluster = cluster

    # -- writing --------------------------------------------------------------------------

    def observe_pod(self, uid: str, namespace: str, name: str, labels: dict[str, str],
                    at: datetime, since: datetime | None = None) -> None:  # fmt: skip
        """The pod has ``labels`` at ``at``. A pod not seen before has had them ``since``
        (its creation); a change to a pod we know takes effect at ``at``."""
        t = PodLabels
        with self._engine.begin() as conn:
            query = select(t.id, t.labels, t.namespace, t.name, t.valid_from).where(
                t.cluster == self._cluster, t.uid == uid, t.valid_to.is_(None))  # fmt: skip
            open_row = conn.execute(query).first()
            start = at
            if open_row is not None:
                if open_row.labels == labels and (open_row.namespace, open_row.name) == (
                    namespace, name,
                ):  # fmt: skip
                    return
                opened = _aware(open_row.valid_from)
                assert opened is not None
                start = max(at, opened + timedelta(microseconds=1))  # never before its last row
                conn.execute(update(t).where(t.id == open_row.id).values(valid_to=start))
            else:
                known = conn.execute(select(t.id).where(t.cluster == self._cluster,
                                                        t.uid == uid).limit(1)).first()  # fmt: skip
                if known is None and since is not None:
                    start = min(since, at)
            conn.execute(insert(t).values(cluster=self._cluster, uid=uid, namespace=namespace,
                                          name=name, labels=labels, valid_from=start))  # fmt: skip

    def close_pod(self, uid: str, at: datetime) -> None:
        t = PodLabels
        with self._engine.begin() as conn:
            conn.execute(update(t).where(t.cluster == self._cluster, t.uid == uid,
                                         t.valid_to.is_(None)).values(valid_to=at))  # fmt: skip

    def observe_namespace(self, name: str, labels: dict[str, str], at: datetime,
                          since: datetime | None = None) -> None:  # fmt: skip
        t = NamespaceLabels
        with self._engine.begin() as conn:
            query = select(t.id, t.labels, t.valid_from).where(
                t.cluster == self._cluster, t.name == name, t.valid_to.is_(None))  # fmt: skip
            open_row = conn.execute(query).first()
            start = at
            if open_row is not None:
                if open_row.labels == labels:
                    return
                opened = _aware(open_row.valid_from)
                assert opened is not None
                start = max(at, opened + timedelta(microseconds=1))
                conn.execute(update(t).where(t.id == open_row.id).values(valid_to=start))
            elif since is not None:
                last = conn.execute(select(func.max(t.valid_to)).where(
                    t.cluster == self._cluster, t.name == name)).scalar()  # fmt: skip
                start = min(since, at) if last is None else max(min(since, at), _aware(last) or at)
            conn.execute(insert(t).values(cluster=self._cluster, name=name, labels=labels,
                                          valid_from=start))  # fmt: skip

    def close_namespace(self, name: str, at: datetime) -> None:
        t = NamespaceLabels
        with self._engine.begin() as conn:
            conn.execute(update(t).where(t.cluster == self._cluster, t.name == name,
                                         t.valid_to.is_(None)).values(valid_to=at))  # fmt: skip

    def close_missing_pods(self, present: set[str], at: datetime) -> None:
        """After a (re)list: pods we had open that the API no longer has were deleted."""
        t = PodLabels
        with self._engine.begin() as conn:
            open_uids = conn.execute(select(t.uid).where(
                t.cluster == self._cluster, t.valid_to.is_(None))).scalars().all()  # fmt: skip
        for uid in set(open_uids) - present:
            self.close_pod(uid, at)

    # -- reading ----------------------------------------------------------------------------

    def labels_during(
        self, start: datetime, end: datetime
    ) -> tuple[dict[tuple[str, str], dict[str, str]], dict[str, dict[str, str]]]:
        """Pod labels by (namespace, pod) and namespace labels by name, as in force during
        [start, end); where an object changed within the hour, its latest labels."""
        pods: dict[tuple[str, str], tuple[datetime, dict[str, str]]] = {}
        spaces: dict[str, tuple[datetime, dict[str, str]]] = {}
        with self._engine.connect() as conn:
            p = PodLabels
            query = select(p.namespace, p.name, p.valid_from, p.labels).where(
                p.cluster == self._cluster, p.valid_from < end,
                or_(p.valid_to.is_(None), p.valid_to > start))  # fmt: skip
            for row in conn.execute(query):
                _keep_latest(pods, (row.namespace, row.name), row.valid_from, row.labels)
            n = NamespaceLabels
            ns_query = select(n.name, n.valid_from, n.labels).where(
                n.cluster == self._cluster, n.valid_from < end,
                or_(n.valid_to.is_(None), n.valid_to > start))  # fmt: skip
            for ns in conn.execute(ns_query):
                _keep_latest(spaces, ns.name, ns.valid_from, ns.labels)
        return {k: v for k, (_, v) in pods.items()}, {k: v for k, (_, v) in spaces.items()}


def _keep_latest(out: dict[Any, tuple[datetime, dict[str, str]]], key: Any,
                 since: datetime, labels: dict[str, str]) -> None:  # fmt: skip
    at = _aware(since)
    assert at is not None
    if key not in out or at >= out[key][0]:
        out[key] = (at, dict(labels))


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
