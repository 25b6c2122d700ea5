"""A loopback HTTP server speaking enough of the Kubernetes API for the official client:
``GET /api/v1/pods``, ``/api/v1/namespaces`` and ``/apis/resource.k8s.io/v1/resourceslices``
as a list (with
``fieldSelector=spec.nodeName=…``) and as a watch stream (one JSON event per chunk), resumed
from a resourceVersion like the real server's: the events since then, or 410 Gone where that
version is compacted away. Tests change objects, break watches, refuse requests, take the
server down and up again, and read what was requested and how many watches were open."""

from __future__ import annotations

import contextlib
import json
import queue
import select
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Event = dict[str, Any]
EventQueue = queue.Queue[Event | None]  # None: end the stream


def wait_until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)  # polling interval while waiting for a watcher thread


def pod_json(
    namespace: str,
    name: str,
    uid: str,
    node: str,
    labels: dict[str, str],
    containers: dict[str, str],
    version: int = 1,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``containers``: container name -> container id (containerd://… is added)."""
    image = "nvcr.io/nvidia/pytorch:24.05-py3"
    statuses = [
        {
            "name": c,
            "containerID": f"containerd://{cid}",
            "ready": True,
            "restartCount": 0,
            "image": image,
            "imageID": "nvcr.io/nvidia/pytorch@sha256:" + "0" * 64,
            "state": {"running": {"startedAt": "2026-11-01T00:00:00Z"}},
        }
        for c, cid in containers.items()
    ]
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "labels": labels,
            "annotations": dict(annotations or {}),
            "resourceVersion": str(version),
        },
        "spec": {"nodeName": node, "containers": [{"name": c, "image": image} for c in containers]},
        "status": {"phase": "Running", "containerStatuses": statuses},
    }


def slice_json(
    name: str, node: str, driver: str, pool: str, devices: list[dict[str, Any]]
) -> dict[str, Any]:
    """A ``resource.k8s.io/v1`` ResourceSlice; ``devices``: {"name": …, "attributes": {…}}."""
    return {
        "kind": "ResourceSlice",
        "apiVersion": "resource.k8s.io/v1",
        "metadata": {"name": name, "uid": f"slice-{name}"},
        "spec": {
            "driver": driver,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": devices,
        },
    }


def status_json(code: int, reason: str, message: str) -> dict[str, Any]:
    """A ``Status``: the object of an ERROR watch event and the body of a refused request."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class KubeApi:
    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}  # uid -> pod
        self.namespaces: dict[str, dict[str, Any]] = {}  # uid -> namespace
        self.slices: dict[str, dict[str, Any]] = {}  # uid -> ResourceSlice
        # path -> uid -> object: ReplicaSets, Jobs, ResourceQuotas (put_object)
        self.objects: dict[str, dict[str, dict[str, Any]]] = {p: {} for p in OTHER_KINDS}
        self.version = 100
        self.requests: list[dict[str, list[str]]] = []
        self.paths: list[tuple[str, str]] = []  # (path, "list" | "watch") of each request
        self.watch_lifetime: float | None = None  # end every watch after this many seconds
        self.watches_opened = 0
        self.watch_peak = 0  # the most watches open at once
        self._watchers: list[EventQueue] = []
        self._watch_store: dict[int, dict[str, Any]] = {}
        self._log: list[tuple[int, dict[str, Any], Event]] = []  # (version, store, event)
        self._oldest = 0  # a watch from before this version is told 410 Gone
        self._refusals: list[tuple[str, int]] = []  # ("list" | "watch", HTTP status), in order
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._serve(0)

    def _serve(self, port: int) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    # -- the objects -------------------------------------------------------------------------

    def put(self, pod: dict[str, Any], kind: str | None = None) -> None:
        """Create or update a pod, and tell the watchers."""
        with self._lock:
            self.version += 1
            pod["metadata"]["resourceVersion"] = str(self.version)
            uid = pod["metadata"]["uid"]
            kind = kind or ("MODIFIED" if uid in self.pods else "ADDED")
            self.pods[uid] = pod
            self._publish(self.pods, {"type": kind, "object": pod})

    def put_namespace(self, name: str, labels: dict[str, str]) -> None:
        with self._lock:
            self.version += 1
            ns = {
                "kind": "Namespace",
                "apiVersion": "v1",
                "metadata": {
                    "name": name,
                    "uid": f"ns-{name}",
                    "labels": labels,
                    "resourceVersion": str(self.version),
                },
            }
            kind = "MODIFIED" if ns["metadata"]["uid"] in self.namespaces else "ADDED"
            self.namespaces[ns["metadata"]["uid"]] = ns
            self._publish(self.namespaces, {"type": kind, "object": ns})

    def put_object(self, path: str, obj: dict[str, Any]) -> None:
        """Create or update an object served at ``path`` (a key of ``OTHER_KINDS``)."""
        with self._lock:
            self.version += 1
            obj["metadata"]["resourceVersion"] = str(self.version)
            store = self.objects[path]
            uid = obj["metadata"]["uid"]
            kind = "MODIFIED" if uid in store else "ADDED"
            store[uid] = obj
            self._publish(store, {"type": kind, "object": obj})

    def delete_object(self, path: str, uid: str) -> None:
        with self._lock:
            self.version += 1
            obj = self.objects[path].pop(uid)
            obj["metadata"]["resourceVersion"] = str(self.version)
            self._publish(self.objects[path], {"type": "DELETED", "object": obj})

    def put_slice(self, resource_slice: dict[str, Any]) -> None:
        """Create or update a ResourceSlice, and tell the watchers."""
        with self._lock:
            self.version += 1
            resource_slice["metadata"]["resourceVersion"] = str(self.version)
            uid = resource_slice["metadata"]["uid"]
            kind = "MODIFIED" if uid in self.slices else "ADDED"
            self.slices[uid] = resource_slice
            self._publish(self.slices, {"type": kind, "object": resource_slice})

    def delete(self, uid: str) -> None:
        with self._lock:
            self.version += 1
            pod = self.pods.pop(uid)
            pod["metadata"]["resourceVersion"] = str(self.version)
            self._publish(self.pods, {"type": "DELETED", "object": pod})

    def _publish(self, store: dict[str, Any], event: Event) -> None:
        self._log.append((self.version, store, event))
        for w in self._watchers:
            if self._watch_store.get(id(w)) is store:
                w.put(event)

    def compact(self) -> None:
        """Forget the history so far: a watch from an older version gets 410 Gone."""
        with self._lock:
            self._oldest = self.version
            self._log.clear()

    # -- failures ----------------------------------------------------------------------------

    def expire_watches(self) -> None:
        """Tell every watcher its resourceVersion is too old (410 Gone) and end the streams."""
        self.error_watches(410, "Expired", "too old")

    def error_watches(self, code: int, reason: str, message: str) -> None:
        """End every open watch with an ERROR event carrying this ``Status``."""
        with self._lock:
            for w in self._watchers:
                w.put({"type": "ERROR", "object": status_json(code, reason, message)})

    def refuse(self, request: str, code: int, times: int = 1) -> None:
        """Answer the next ``times`` list (``request="list"``) or watch requests with the
        HTTP status ``code`` and a ``Status`` body."""
        with self._lock:
            self._refusals.extend([(request, code)] * times)

    def down(self) -> None:
        """The server goes away: its connections drop, new ones are refused."""
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()
        with self._lock:
            for w in self._watchers:
                w.put(None)
            for conn in self._connections:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)

    def up(self) -> None:
        """The server comes back, on the same address and with the same objects."""
        self._serve(self.server.server_address[1])

    def stop(self) -> None:
        if self._thread.is_alive():
            self.down()

    # -- what the clients did ----------------------------------------------------------------

    def watches(self) -> int:
        """The watches open now."""
        with self._lock:
            return len(self._watchers)


OTHER_KINDS = {  # path -> (list kind, apiVersion)
    "/apis/apps/v1/replicasets": ("ReplicaSetList", "apps/v1"),
    "/apis/batch/v1/jobs": ("JobList", "batch/v1"),
    "/api/v1/resourcequotas": ("ResourceQuotaList", "v1"),
    # Kueue's LocalQueues, both served versions (kubernetes-sigs/kueue apis/kueue/v1beta1,
    # apis/kueue/v1beta2: localqueue_types.go)
    "/apis/kueue.x-k8s.io/v1beta1/localqueues": ("LocalQueueList", "kueue.x-k8s.io/v1beta1"),
    "/apis/kueue.x-k8s.io/v1beta2/localqueues": ("LocalQueueList", "kueue.x-k8s.io/v1beta2"),
}


def _handler(api: KubeApi) -> type[BaseHTTPRequestHandler]:
    kinds = {
        "/api/v1/pods": (api.pods, "PodList"),
        "/api/v1/namespaces": (api.namespaces, "NamespaceList"),
        "/apis/resource.k8s.io/v1/resourceslices": (api.slices, "ResourceSliceList"),
        **{path: (api.objects[path], kind) for path, (kind, _) in OTHER_KINDS.items()},
    }

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # like the API server: connections are kept alive

        def setup(self) -> None:
            super().setup()
            with api._lock:
                api._connections.add(self.connection)

        def finish(self) -> None:
            with api._lock:
                api._connections.discard(self.connection)
            super().finish()

        def do_GET(self) -> None:
            url = urllib.parse.urlparse(self.path)
            params = urllib.parse.parse_qs(url.query)
            watch = params.get("watch", ["false"])[0].lower() == "true"
            with api._lock:
                api.requests.append(params)
                request = "watch" if watch else "list"
                api.paths.append((url.path, request))
                refused = next((r for r in api._refusals if r[0] == request), None)
                if refused is not None:
                    api._refusals.remove(refused)
            if url.path not in kinds:
                self.send_error(404)
                return
            if refused is not None:
                self._send_json(refused[1], status_json(refused[1], "Refused", "by the test"))
                return
            store, list_kind = kinds[url.path]
            node = ""
            for sel in params.get("fieldSelector", []):
                if sel.startswith("spec.nodeName="):
                    node = sel.split("=", 1)[1]
            if not watch:
                with api._lock:
                    items = [p for p in store.values() if _on(p, node)]
                    body = {
                        "kind": list_kind,
                        "apiVersion": OTHER_KINDS.get(url.path, ("", "v1"))[1],
                        "metadata": {"resourceVersion": str(api.version)},
                        "items": items,
                    }
                self._send_json(200, body)
                return
            timeout = float(params.get("timeoutSeconds", ["0"])[0]) or None
            version = params.get("resourceVersion", [""])[0]
            self._watch(store, node, int(version) if version.isdigit() else None, timeout)

        def _send_json(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _watch(
            self, store: dict[str, Any], node: str, since: int | None, timeout: float | None
        ) -> None:
            events: EventQueue = queue.Queue()
            with api._lock:
                if since is None:  # a watch without resourceVersion starts with the state
                    for p in store.values():
                        events.put({"type": "ADDED", "object": p})
                elif since < api._oldest:
                    events.put({"type": "ERROR", "object": status_json(410, "Expired", "gone")})
                else:  # resumed: what happened since that version
                    for version, of, event in api._log:
                        if of is store and version > since:
                            events.put(event)
                api._watchers.append(events)
                api._watch_store[id(events)] = store
                api.watches_opened += 1
                api.watch_peak = max(api.watch_peak, len(api._watchers))
            lifetimes = [t for t in (timeout, api.watch_lifetime) if t]
            deadline = time.monotonic() + min(lifetimes) if lifetimes else None
            self.send_response(200)  # one chunk per event
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                self._stream(events, node, deadline)
            except OSError:
                pass
            finally:
                self._forget(events)

        def _stream(self, events: EventQueue, node: str, deadline: float | None) -> None:
            while True:
                try:
                    event = events.get(timeout=0.05)
                except queue.Empty:
                    if self._client_gone():
                        return
                    if deadline is None or time.monotonic() < deadline:
                        continue
                    event = None
                if event is None or event["type"] == "ERROR":  # an ERROR event ends the watch
                    self._forget(events)  # before the client can see the end and watch again
                if event is not None and (event["type"] == "ERROR" or _on(event["object"], node)):
                    line = json.dumps(event).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                if event is None or event["type"] == "ERROR":
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                    return

        def _client_gone(self) -> bool:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            try:
                return self.connection.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                return True

        def _forget(self, events: EventQueue) -> None:
            with api._lock:
                if events in api._watchers:
                    api._watchers.remove(events)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def _on(pod: dict[str, Any], node: str) -> bool:
    return not node or pod.get("spec", {}).get("nodeName") == node
