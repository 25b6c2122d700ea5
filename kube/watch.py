"""One Kubernetes list -> watch -> relist loop, run in a thread of its own.

The loop lists a resource and hands its items to ``on_list``, then watches it from the list's
resourceVersion and hands each ADDED, MODIFIED or DELETED object to ``on_event`` (as the API
serves it: a dict). When the server ends a watch (after ``watch_timeout`` at the latest) the
loop watches again from the last resourceVersion it saw.

Failures, as the API conventions describe them: a watch that fails ends with an ``ERROR``
event whose object is a ``Status``; the client raises it as an ``ApiException`` carrying the
status's code. Code 410 Gone, in that event or as the HTTP answer to a watch, means the
resourceVersion is too old: list again at once. Anything else (another status, a refused list,
the API server down, a broken stream) goes to ``on_error`` and the loop tries again after
``retry_delay``: from the last resourceVersion if it has one, else with a list. Nothing is
cleared on a failure, so consumers keep the last known state until the API answers again.

At most one watch is open per loop: each one replaces the last, and :meth:`ListWatch.stop`
ends it. The ``kubernetes`` client is imported only when a loop runs.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

log = logging.getLogger(__name__)
GONE = 410
CHANGES = frozenset({"ADDED", "MODIFIED", "DELETED"})  # (BOOKMARK only moves the version on)


class ListWatch:
    """List, then watch, one kind of object: ``list_fn`` is a client method such as
    ``CoreV1Api.list_namespace``; ``params`` (e.g. ``field_selector``) go to both requests."""

    def __init__(
        self,
        list_fn: Callable[..., Any],
        on_list: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
        on_error: Callable[[str, Exception], None],
        *,
        params: Mapping[str, str] | None = None,
        name: str = "kube-watch",
        watch_timeout: int = 300,
        retry_delay: float = 5.0,
    ) -> None:
        """``on_error(stage, exc)``: ``stage`` is ``"list"`` or ``"watch"``."""
        self._list_fn = list_fn
        self._on_list = on_list
        self._on_event = on_event
        self._on_error = on_error
        self._params = dict(params or {})
        self._watch_timeout = watch_timeout
        self._retry_delay = retry_delay
        self._version = ""  # the last resourceVersion seen; empty: list first
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watch: Any = None  # the open kubernetes.watch.Watch, if any
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.synced = threading.Event()  # set after each successful list

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """End the open watch and join the thread (waiting ``timeout`` seconds at most)."""
        self._stopping.set()
        deadline = time.monotonic() + timeout
        while self._thread.is_alive() and time.monotonic() < deadline:
            with self._lock:
                if self._watch is not None:  # (again each time: a watch whose request was
                    self._watch.stop()  # still on its way would have missed the first)
            self._thread.join(0.05)

    def _run(self) -> None:
        from kubernetes.client.exceptions import ApiException

        while not self._stopping.is_set():
            try:
                if not self._version:
                    self._version = self._list()
                self._follow()
            except ApiException as exc:
                if exc.status == GONE and self._version:  # too old: list again, now
                    self._version = ""
                    continue
                self._failed(exc)
            except Exception as exc:  # the API server is down, or the stream broke
                self._failed(exc)

    def _list(self) -> str:
        from kubernetes.client.exceptions import ApiException

        response = self._list_fn(_preload_content=False, **self._params)
        status = getattr(response, "status", 200)
        if not 200 <= status <= 299:  # (a raw response is not checked by every client version)
            raise ApiException(status=status, reason=getattr(response, "reason", ""))
        body = json.loads(response.data)
        self._on_list(body.get("items") or [])
        self.synced.set()
        return str((body.get("metadata") or {}).get("resourceVersion", ""))

    def _follow(self) -> None:
        """One watch from the last resourceVersion, until the server ends it."""
        from kubernetes import watch

        current = watch.Watch()
        with self._lock:
            if self._stopping.is_set():
                return
            self._watch = current  # replaces the last one: there is never more than one
        try:
            # (deserialize=False would break the client's own handling of ERROR events)
            for event in current.stream(
                self._list_fn,
                resource_version=self._version,
                timeout_seconds=self._watch_timeout,
                **self._params,
            ):
                if self._stopping.is_set():
                    return
                self._apply(event)
        finally:
            with self._lock:
                self._watch = None

    def _apply(self, event: dict[str, Any]) -> None:
        obj = event.get("raw_object")
        if not isinstance(obj, dict):
            return
        kind = event.get("type", "")
        if kind in CHANGES:
            self._on_event(kind, obj)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self._version = str(version)

    def _failed(self, exc: Exception) -> None:
        self._on_error("watch" if self._version else "list", exc)
        self._stopping.wait(self._retry_delay)


class KindWatches:
    """One :class:`ListWatch` loop per kind of object, sharing their handlers: a subclass says
    what a listed set and an event mean (``_listed(kind, items)``, ``_apply(kind, event_type,
    obj)``); a failure is counted through ``on_error(kind)`` and logged."""

    def __init__(
        self,
        lists: Mapping[str, Callable[..., Any]],
        on_error: Callable[[str], None],
        *,
        name: str,
        retry_delay: float = 5.0,
        watch_timeout: int = 300,
    ) -> None:
        self._on_error = on_error
        self.lists = dict(lists)  # kind -> the client's list method (read by SharedWatches)
        self._loops = {
            kind: ListWatch(
                fn,
                partial(self._listed, kind),
                partial(self._apply, kind),
                partial(self._failed, kind),
                name=f"{name}-{kind}",
                watch_timeout=watch_timeout,
                retry_delay=retry_delay,
            )
            for kind, fn in lists.items()
        }
        self.synced = {kind: loop.synced for kind, loop in self._loops.items()}

    def start(self) -> None:
        for loop in self._loops.values():
            loop.start()

    def stop(self) -> None:
        for loop in self._loops.values():
            loop.stop()

    def _listed(self, kind: str, items: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    def _apply(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        raise NotImplementedError

    def _failed(self, kind: str, stage: str, exc: Exception) -> None:
        self._on_error(kind)
        log.warning("kubernetes API (%s %s): %s", kind, stage, exc)


class SharedWatches(KindWatches):
    """Several :class:`KindWatches`' handlers over one loop per kind: a kind that more than one
    of them follows (the cost service's label and owner histories both follow every pod) is
    listed and watched once, and each list and event is handed to each of them in turn. Only
    this group's loops run; ``synced`` is per kind, as for one group."""

    def __init__(
        self,
        *groups: KindWatches,
        name: str,
        retry_delay: float = 5.0,
        watch_timeout: int = 300,
    ) -> None:
        self._groups = groups
        lists: dict[str, Callable[..., Any]] = {}
        for group in groups:
            for kind, fn in group.lists.items():
                lists.setdefault(kind, fn)
        super().__init__(
            lists,
            lambda kind: None,
            name=name,
            retry_delay=retry_delay,
            watch_timeout=watch_timeout,
        )

    def _listed(self, kind: str, items: list[dict[str, Any]]) -> None:
        for group in self._groups:
            if kind in group.lists:
                group._listed(kind, items)

    def _apply(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        for group in self._groups:
            if kind in group.lists:
                group._apply(kind, event_type, obj)

    def _failed(self, kind: str, stage: str, exc: Exception) -> None:
        for group in self._groups:
            if kind in group.lists:
                group._on_error(kind)
        log.warning("kubernetes API (%s %s): %s", kind, stage, exc)
