"""What the exporter knows about the pods on its node: pod UID -> namespace, name and labels,
and container id -> container name. The Kubernetes API (watch) fills it in production; a fleet
spec fills it in simulate mode. PID attribution is cgroup (pod UID, container id) -> here."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kube.labels import sanitize_label


@dataclass(frozen=True, slots=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    containers: dict[str, str] = field(default_factory=dict)  # container id -> name


class PodDirectory:
    """A thread-safe map, replaced wholesale or updated pod by pod by its source."""

    def __init__(self, pods: Iterable[PodInfo] = ()) -> None:
        self._lock = threading.Lock()
        self._by_uid: dict[str, PodInfo] = {p.uid: p for p in pods}

    def replace(self, pods: Iterable[PodInfo]) -> None:
        fresh = {p.uid: p for p in pods}
        with self._lock:
            self._by_uid = fresh

    def upsert(self, pod: PodInfo) -> None:
        with self._lock:
            self._by_uid = {**self._by_uid, pod.uid: pod}

    def remove(self, uid: str) -> None:
        with self._lock:
            rest = dict(self._by_uid)
            rest.pop(uid, None)
            self._by_uid = rest

    def get(self, uid: str) -> PodInfo | None:
        return self._by_uid.get(uid)

    def by_name(self, namespace: str, name: str) -> PodInfo | None:
        for pod in self._by_uid.values():
            if pod.namespace == namespace and pod.name == name:
                return pod
        return None

    def __len__(self) -> int:
        return len(self._by_uid)


def pod_label_renderer(directory: PodDirectory, keys: tuple[str, ...]) -> Callable[[Any], str]:
    """``holder -> 'label_team="x",label_project="y"'`` from the pods' labels (empty values
    where a pod lacks a key, so every series of a family has the same label names)."""
    from exporter.exposition import label_pairs

    names = [(key, sanitize_label(key)) for key in keys]

    def render(holder: Any) -> str:
        pod = directory.by_name(holder.namespace, holder.pod)
        labels = pod.labels if pod is not None else {}
        return label_pairs((name, labels.get(key, "")) for key, name in names)

    return render
