"""The ResourceSlices of this node from the Kubernetes API, kept in a :class:`SliceDirectory`.

A :class:`kube.watch.ListWatch` lists them (``resource.k8s.io/v1``, field selector
``spec.nodeName=<node>``: the slices a kubelet plugin publishes for its node) and follows their
changes; a 410 Gone lists them again. When the API server is down the directory keeps the last
known slices and the error is counted (``source="kubernetes"``). The DaemonSet needs
get/list/watch on ``resourceslices`` (deploy/: a rule of its own).
"""

from __future__ import annotations

import logging
from typing import Any

from exporter.pods.slices import SliceDirectory, slice_devices
from exporter.pods.watch import NodeWatcher

log = logging.getLogger(__name__)


class SliceWatcher(NodeWatcher[SliceDirectory]):
    """Lists and watches the ResourceSlices of ``node_name`` into ``directory`` (one thread);
    ``api`` is a ``kubernetes.client.ResourceV1Api``."""

    list_method = "list_resource_slice"
    thread = "kube-resourceslices"

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
