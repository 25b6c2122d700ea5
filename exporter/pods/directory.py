"""What the exporter knows about the pods on its node: pod UID -> namespace, name and labels,
and container id -> container name. The Kubernetes API (watch) fills it in production; a fleet
spec fills it in simulate mode. PID attribution is cgroup (pod UID, container id) -> here."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field


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
