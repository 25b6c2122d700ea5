"""The pods of this node from the Kubernetes API, kept in a :class:`PodDirectory`.

A :class:`kube.watch.ListWatch` lists them (field selector ``spec.nodeName=<node>``) and
follows their changes; a 410 Gone lists them again. When the API server is down the directory
keeps the last known pods (labels stay on the series) and the error is counted.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

from exporter.pods.directory import PodDirectory, PodInfo
from exporter.pods.fractional import HAMI_ALLOCATED, parse_hami
from kube.watch import ListWatch

log = logging.getLogger(__name__)

_RUNTIME_PREFIX = re.compile(r"^[a-z0-9.-]+://")


def pod_info(raw: dict[str, Any]) -> PodInfo:
    """PodInfo from a pod as the API serves it (a dict, as in watch events' raw objects)."""
    meta = raw.get("metadata") or {}
    status = raw.get("status") or {}
    containers: dict[str, str] = {}
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for c in status.get(key) or []:
            cid = c.get("containerID") or ""
            if cid:
                containers[_RUNTIME_PREFIX.sub("", cid)] = c.get("name", "")
    fractional = {}
    hami = (meta.get("annotations") or {}).get(HAMI_ALLOCATED)
    if isinstance(hami, str) and hami:
        spec = raw.get("spec") or {}
        names = [
            str(c.get("name", ""))
            for key in ("initContainers", "containers")
            for c in spec.get(key) or []
            if isinstance(c, dict)
        ]
        fractional = parse_hami(hami, names)
    return PodInfo(
        uid=meta.get("uid", ""),
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        labels=dict(meta.get("labels") or {}),
        containers=containers,
        phase=str(status.get("phase") or ""),
        fractional=fractional,
    )


D = TypeVar("D")


class NodeWatcher(Generic[D]):
    """Lists and watches the objects of one kind on ``node_name`` (field selector
    ``spec.nodeName``) into ``directory``, in one thread: ``api``'s list method
    :attr:`list_method`; a subclass says what a listed set, an event and a failure mean
    (``_listed``, ``_changed``, ``_failed``: ``on_error("kubernetes", "list" | "watch")``)."""

    list_method: ClassVar[str]
    thread: ClassVar[str]  # the loop's thread name

    def __init__(
        self,
        directory: D,
        node_name: str,
        api: Any,
        on_error: Callable[[str, str], None],
        watch_timeout: int = 300,
        retry_delay: float = 5.0,
    ) -> None:
        self._directory = directory
        self._on_error = on_error
        self._loop = ListWatch(
            getattr(api, self.list_method),
            self._listed,
            self._changed,
            self._failed,
            params={"field_selector": f"spec.nodeName={node_name}"},
            name=self.thread,
            watch_timeout=watch_timeout,
            retry_delay=retry_delay,
        )
        self.synced = self._loop.synced  # set after each successful list

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def _listed(self, items: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    def _changed(self, kind: str, raw: dict[str, Any]) -> None:
        raise NotImplementedError

    def _failed(self, stage: str, exc: Exception) -> None:
        raise NotImplementedError


class PodWatcher(NodeWatcher[PodDirectory]):
    """Lists and watches the pods of ``node_name`` into ``directory`` (one thread);
    ``api``: a ``kubernetes.client.CoreV1Api``."""

    list_method = "list_pod_for_all_namespaces"
    thread = "kube-pods"

    def _listed(self, items: list[dict[str, Any]]) -> None:
        self._directory.replace(pod_info(p) for p in items)

    def _changed(self, kind: str, raw: dict[str, Any]) -> None:
        info = pod_info(raw)
        if kind == "DELETED":
            self._directory.remove(info.uid)
        else:
            self._directory.upsert(info)

    def _failed(self, stage: str, exc: Exception) -> None:
        self._on_error("kubernetes", stage)
        log.warning("kubernetes API: %s; keeping %d known pods", exc, len(self._directory))
