"""What the exporter knows about the pods on its node: pod UID -> namespace, name, labels and
phase, and container id -> container name. The Kubernetes API (watch) fills it in production;
a fleet spec fills it in simulate mode. PID attribution is cgroup (pod UID, container id) ->
here; a pod whose phase is Succeeded or Failed holds no GPU, whatever the kubelet still lists.
HAMi's allocation annotation is kept parsed per container (what the pod holds of which GPU)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from exporter.pods.fractional import FractionalDevice


@dataclass(frozen=True, slots=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    containers: dict[str, str] = field(default_factory=dict)  # container id -> name
    phase: str = ""  # Pending, Running, Succeeded, Failed, Unknown; "" when not known
    # container name -> the fractional GPUs HAMi allocated it (exporter.pods.fractional)
    fractional: dict[str, tuple[FractionalDevice, ...]] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED_PHASES


FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


class PodDirectory:
    """A thread-safe map, replaced wholesale or updated pod by pod by its source. Readers get
    whole maps swapped by reference, never a map being changed."""

    def __init__(self, pods: Iterable[PodInfo] = ()) -> None:
        self._lock = threading.Lock()
        self._by_uid: dict[str, PodInfo] = {p.uid: p for p in pods}
        self._by_name = _names(self._by_uid)

    def _set(self, by_uid: dict[str, PodInfo]) -> None:
        by_name = _names(by_uid)
        self._by_uid, self._by_name = by_uid, by_name

    def replace(self, pods: Iterable[PodInfo]) -> None:
        fresh = {p.uid: p for p in pods}
        with self._lock:
            self._set(fresh)

    def upsert(self, pod: PodInfo) -> None:
        with self._lock:
            self._set({**self._by_uid, pod.uid: pod})

    def remove(self, uid: str) -> None:
        with self._lock:
            rest = dict(self._by_uid)
            rest.pop(uid, None)
            self._set(rest)

    def get(self, uid: str) -> PodInfo | None:
        return self._by_uid.get(uid)

    def by_name(self, namespace: str, name: str) -> PodInfo | None:
        return self._by_name.get((namespace, name))

    def finished(self, namespace: str, name: str) -> bool:
        """The pod's phase is Succeeded or Failed (False when the pod is not known)."""
        pod = self._by_name.get((namespace, name))
        return pod is not None and pod.finished

    def __len__(self) -> int:
        return len(self._by_uid)


def _names(by_uid: dict[str, PodInfo]) -> dict[tuple[str, str], PodInfo]:
    return {(p.namespace, p.name): p for p in by_uid.values()}
