"""The ResourceSlices of this node from the Kubernetes API, kept in a :class:`SliceDirectory`.

A :class:`kube.watch.ListWatch` lists them (``resource.k8s.io/v1``, field selector
``spec.nodeName=<node>``: the slices a kubelet plugin publishes for its node) and follows their
changes; a 410 Gone lists them again. When the API server is down the directory keeps the last
known slices and the error is counted (``source="kubernetes"``). The DaemonSet needs
get/list/watch on ``resourceslices`` (deploy/: a rule of its own).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from exporter.pods.slices import SliceDirectory, slice_devices
from kube.watch import ListWatch

log = logging.getLogger(__name__)


class SliceWatcher:
    """Lists and watches the ResourceSlices of ``node_name`` into ``directory`` (one thread);
    ``api`` is a ``kubernetes.client.ResourceV1Api``."""

    def __init__(
        self,
        directory: SliceDirectory,
        node_name: str,
        api: Any,
        on_error: Callable[[str, str], None],
        watch_timeout: int = 300,
        retry_delay: float = 5.0,
    ) -> None:
        self._directory = directory
        self._on_error = on_error
        self._loop = ListWatch(
            api.list_resource_slice,
            self._listed,
            self._changed,
            self._failed,
            params={"field_selector": f"spec.nodeName={node_name}"},
            name="kube-resourceslices",
            watch_timeout=watch_timeout,
            retry_delay=retry_delay,
        )
        self.synced = self._loop.synced

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def _listed(self, items: list[dict[str, Any]]) -> None:
        self._directory.replace((_name(s), slice_devices(s)) for s in items)

    def _changed(self, kind: str, raw: dict[str, Any]) -> None:
        if kind == "DELETED":
            self._directory.remove(_name(raw))
        else:
            self._directory.upsert(_name(raw), slice_devices(raw))

    def _failed(self, stage: str, exc: Exception) -> None:
        self._on_error("kubernetes", stage)
        log.warning(
            "kubernetes API (resourceslices): %s; keeping %d known devices",
            exc,
            len(self._directory),
        )


def _name(raw: dict[str, Any]) -> str:
    return str((raw.get("metadata") or {}).get("name") or "")
