"""A loopback HTTP server speaking enough of the Kubernetes API for the official client:
``GET /api/v1/pods`` as a list (with ``fieldSelector=spec.nodeName=…``) and as a watch stream
(one JSON event per line). Tests push events and read what was requested."""

from __future__ import annotations

import json
import queue
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def pod_json(namespace: str, name: str, uid: str, node: str, labels: dict[str, str],
             containers: dict[str, str], version: int = 1) -> dict[str, Any]:  # fmt: skip
    """``containers``: container name -> container id (containerd://… is added)."""
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": labels,
                     "resourceVersion": str(version)},
        "spec": {"nodeName": node,
                 "containers": [{"name": c, "image": "nvcr.io/nvidia/pytorch:24.05-py3"}
                                for c in containers]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": c, "containerID": f"containerd://{cid}", "ready": True, "restartCount": 0,
             "image": "nvcr.io/nvidia/pytorch:24.05-py3",
             "imageID": "nvcr.io/nvidia/pytorch@sha256:" + "0" * 64,
             "state": {"running": {"startedAt": "2026-11-01T00:00:00Z"}}}
            for c, cid in containers.items()]},
    }  # fmt: skip


class KubeApi:
    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}  # uid -> pod
        self.namespaces: dict[str, dict[str, Any]] = {}  # uid -> namespace
        self.version = 100
        self.requests: list[dict[str, list[str]]] = []
        self._watchers: list[queue.Queue[dict[str, Any] | None]] = []
        self._watch_store: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlparse(self.path)
                params = urllib.parse.parse_qs(url.query)
                with api._lock:
                    api.requests.append(params)
                kinds = {"/api/v1/pods": api.pods, "/api/v1/namespaces": api.namespaces}
                if url.path not in kinds:
                    self.send_error(404)
                    return
                self.store = kinds[url.path]
                node = ""
                for sel in params.get("fieldSelector", []):
                    if sel.startswith("spec.nodeName="):
                        node = sel.split("=", 1)[1]
                if params.get("watch", ["false"])[0].lower() == "true":
                    self._watch(node, "resourceVersion" not in params)
                else:
                    self._list(node)

            store: dict[str, Any]

            def _list(self, node: str) -> None:
                with api._lock:
                    items = [p for p in self.store.values() if _on(p, node)]
                    body = json.dumps({"kind": "PodList", "apiVersion": "v1",
                                       "metadata": {"resourceVersion": str(api.version)},
                                       "items": items}).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _watch(self, node: str, initial: bool) -> None:
                events: queue.Queue[dict[str, Any] | None] = queue.Queue()
                with api._lock:
                    api._watchers.append(events)
                    api._watch_store[id(events)] = self.store
                    if initial:  # a watch without resourceVersion starts with the state
                        for p in self.store.values():
                            if _on(p, node):
                                events.put({"type": "ADDED", "object": p})
                # like the API server: HTTP/1.1, one chunk per event
                self.protocol_version = "HTTP/1.1"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.close_connection = True
                try:
                    while True:
                        event = events.get()
                        if event is None:
                            self.wfile.write(b"0\r\n\r\n")
                            return
                        obj = event["object"]
                        if event["type"] != "ERROR" and not _on(obj, node):
                            continue
                        line = json.dumps(event).encode() + b"\n"
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                        self.wfile.flush()
                except OSError:
                    return
                finally:
                    with api._lock:
                        if events in api._watchers:
                            api._watchers.remove(events)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def put(self, pod: dict[str, Any], kind: str | None = None) -> None:
        """Create or update a pod, and tell the watchers."""
        with self._lock:
            self.version += 1
            pod["metadata"]["resourceVersion"] = str(self.version)
            uid = pod["metadata"]["uid"]
            kind = kind or ("MODIFIED" if uid in self.pods else "ADDED")
            self.pods[uid] = pod
            for w in self._watchers_of(self.pods):
                w.put({"type": kind, "object": pod})

    def put_namespace(self, name: str, labels: dict[str, str]) -> None:
        with self._lock:
            self.version += 1
            ns = {"kind": "Namespace", "apiVersion": "v1",
                  "metadata": {"name": name, "uid": f"ns-{name}", "labels": labels,
                               "resourceVersion": str(self.version)}}  # fmt: skip
            kind = "MODIFIED" if ns["metadata"]["uid"] in self.namespaces else "ADDED"
            self.namespaces[ns["metadata"]["uid"]] = ns
            for w in self._watchers_of(self.namespaces):
                w.put({"type": kind, "object": ns})

    def _watchers_of(self, store: dict[str, Any]) -> list[queue.Queue[dict[str, Any] | None]]:
        return [w for w in self._watchers if self._watch_store.get(id(w)) is store]

    def delete(self, uid: str) -> None:
        with self._lock:
            self.version += 1
            pod = self.pods.pop(uid)
            for w in self._watchers_of(self.pods):
                w.put({"type": "DELETED", "object": pod})

    def expire_watches(self) -> None:
        """Tell every watcher its resourceVersion is too old (410 Gone) and end the streams."""
        with self._lock:
            for w in self._watchers:
                w.put(
                    {
                        "type": "ERROR",
                        "object": {
                            "kind": "Status",
                            "code": 410,
                            "reason": "Expired",
                            "message": "too old",
                        },
                    }
                )
                w.put(None)  # fmt: skip

    def watches(self) -> int:
        with self._lock:
            return len(self._watchers)

    def stop(self) -> None:
        with self._lock:
            for w in self._watchers:
                w.put(None)
        self.server.shutdown()
        self.server.server_close()


def _on(pod: dict[str, Any], node: str) -> bool:
    return not node or pod.get("spec", {}).get("nodeName") == node
