"""The pods of this node from the Kubernetes API, kept in a :class:`PodDirectory`.

List (field selector ``spec.nodeName=<node>``), then watch from the list's resourceVersion;
a 410 Gone means the watch fell too far behind: list again. When the API server is down the
directory keeps the last known pods (labels stay on the series) and the error is counted.
Only this module imports the ``kubernetes`` client, and only when the watcher is enabled.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import Any

from exporter.pods.directory import PodDirectory, PodInfo

log = logging.getLogger(__name__)

_RUNTIME_PREFIX = re.compile(r"^[a-z0-9.-]+://")
_LABEL_NAME = re.compile(r"[^a-zA-Z0-9_]")


def sanitize_label(key: str) -> str:
    """A Kubernetes label key as a Prometheus label name, kube-state-metrics style:
    ``app.kubernetes.io/team`` -> ``label_app_kubernetes_io_team``."""
    return "label_" + _LABEL_NAME.sub("_", key)


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
    return PodInfo(
        uid=meta.get("uid", ""),
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        labels=dict(meta.get("labels") or {}),
        containers=containers,
    )


class PodWatcher:
    def __init__(
        self,
        directory: PodDirectory,
        node_name: str,
        api: Any,
        on_error: Callable[[str, str], None],
        watch_timeout: int = 300,
        retry_delay: float = 5.0,
    ) -> None:
        self._directory = directory
        self._node = node_name
        self._api = api  # a kubernetes.client.CoreV1Api
        self._on_error = on_error
        self._watch_timeout = watch_timeout
        self._retry_delay = retry_delay
        self._stop = threading.Event()
        self._watch: Any = None
        self._thread = threading.Thread(target=self._run, name="kube-pods", daemon=True)
        self.synced = threading.Event()  # set after each successful list

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        self._thread.join(timeout=2)

    def _list(self) -> str:
        pods = self._api.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self._node}", _preload_content=False
        )
        import json

        body = json.loads(pods.data)
        self._directory.replace(pod_info(p) for p in body.get("items") or [])
        self.synced.set()
        return str((body.get("metadata") or {}).get("resourceVersion", ""))

    def _run(self) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._list()
                self._watch = watch.Watch()
                for event in self._watch.stream(
                    self._api.list_pod_for_all_namespaces,
                    field_selector=f"spec.nodeName={self._node}",
                    resource_version=version,
                    timeout_seconds=self._watch_timeout,
                ):  # (deserialize=False would break the client's own 410 handling)
                    if self._stop.is_set():
                        return
                    version = self._apply(event) or version
            except ApiException as exc:
                if exc.status == 410:  # Gone: our resourceVersion is too old
                    version = ""
                    continue
                self._failed("list" if not version else "watch", exc)
            except Exception as exc:  # the API server is down, or the stream broke
                self._failed("list" if not version else "watch", exc)

    def _apply(self, event: dict[str, Any]) -> str:
        kind = event.get("type")
        raw = event.get("raw_object") or {}
        if kind == "ERROR":
            code = raw.get("code") if isinstance(raw, dict) else None
            if code == 410:
                from kubernetes.client.exceptions import ApiException

                raise ApiException(status=410, reason="Gone")
            return ""
        if not isinstance(raw, dict):
            return ""
        info = pod_info(raw)
        if kind == "DELETED":
            self._directory.remove(info.uid)
        elif kind in {"ADDED", "MODIFIED"}:
            self._directory.upsert(info)
        return str((raw.get("metadata") or {}).get("resourceVersion", ""))

    def _failed(self, kind: str, exc: Exception) -> None:
        self._on_error("kubernetes", kind)
        log.warning("kubernetes API: %s; keeping %d known pods", exc, len(self._directory))
        self._stop.wait(self._retry_delay)


def core_api(kubeconfig: str | None = None, host: str | None = None) -> Any:
    """A CoreV1Api: in-cluster config, a kubeconfig file, or a plain URL (tests)."""
    from kubernetes import client, config

    if host is not None:
        configuration = client.Configuration()
        configuration.host = host
        return client.CoreV1Api(client.ApiClient(configuration))
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig)
    else:
        config.load_incluster_config()
    return client.CoreV1Api()
