"""The shared list/watch loop against the loopback Kubernetes API, with the official client."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes.watch
import pytest

from kube.client import core_api
from kube.watch import ListWatch
from tests.kubeapi import KubeApi, pod_json, wait_until


def pod(name: str, node: str = "n1", team: str = "nlp") -> dict[str, Any]:
    return pod_json("ml", name, f"uid-{name}", node, {"team": team}, {"main": name * 64})


class Consumer:
    """What a user of the loop knows: the pods by uid, from lists and events."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, str]] = {}  # uid -> labels
        self.lists: list[int] = []  # the number of items of each list
        self.events: list[tuple[str, str]] = []  # (type, uid)
        self.errors: list[tuple[str, int | None]] = []  # (stage, HTTP status or None)
        self._lock = threading.Lock()

    def on_list(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self.pods = {p["metadata"]["uid"]: p["metadata"]["labels"] for p in items}
            self.lists.append(len(items))

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        with self._lock:
            self.events.append((kind, meta["uid"]))
            if kind == "DELETED":
                self.pods.pop(meta["uid"], None)
            else:
                self.pods[meta["uid"]] = meta["labels"]

    def on_error(self, stage: str, exc: Exception) -> None:
        with self._lock:  # (not the exception itself: its traceback would keep its watch alive)
            self.errors.append((stage, getattr(exc, "status", None)))


Start = Callable[..., tuple[ListWatch, Consumer]]


@pytest.fixture
def api() -> Iterator[KubeApi]:
    server = KubeApi()
    yield server
    server.stop()


@pytest.fixture
def start(api: KubeApi) -> Iterator[Start]:
    started: list[ListWatch] = []

    def start(node: str = "n1", watch_timeout: int = 300) -> tuple[ListWatch, Consumer]:
        consumer = Consumer()
        loop = ListWatch(
            core_api(host=api.url).list_pod_for_all_namespaces,
            consumer.on_list,
            consumer.on_event,
            consumer.on_error,
            params={"field_selector": f"spec.nodeName={node}"},
            name=f"test-watch-{node}",
            watch_timeout=watch_timeout,
            retry_delay=0.05,
        )
        loop.start()
        started.append(loop)
        assert loop.synced.wait(10)
        wait_until(lambda: api.watches() == 1)  # listed, and watching
        return loop, consumer

    yield start
    for loop in started:
        loop.stop()


def test_added_modified_deleted_reach_the_handler(api: KubeApi, start: Start) -> None:
    api.put(pod("a"))
    api.put(pod("x", node="n2"))
    _, seen = start("n1")
    assert seen.pods == {"uid-a": {"team": "nlp"}}  # the field selector went with the list
    assert api.requests[-1]["fieldSelector"] == ["spec.nodeName=n1"]  # and with the watch

    api.put(pod("a", team="vision"))
    api.put(pod("b"))
    api.put(pod("y", node="n2"))
    api.delete("uid-a")
    wait_until(lambda: len(seen.events) == 3)
    assert seen.events == [("MODIFIED", "uid-a"), ("ADDED", "uid-b"), ("DELETED", "uid-a")]
    assert seen.pods == {"uid-b": {"team": "nlp"}}
    assert seen.lists == [1]
    assert seen.errors == []


def test_a_410_error_event_relists(api: KubeApi, start: Start) -> None:
    api.put(pod("a"))
    loop, seen = start()
    loop.synced.clear()
    with api._lock:  # created while the watch is broken: only a list can find it
        api.pods["uid-b"] = pod("b")
    api.expire_watches()  # an ERROR event, its object a Status with code 410
    assert loop.synced.wait(10)
    assert set(seen.pods) == {"uid-a", "uid-b"}
    assert seen.lists == [1, 2]
    assert seen.errors == []  # an expected turn of events, not a failure
    wait_until(lambda: api.watches() == 1)


def test_a_watch_answered_with_http_410_relists(api: KubeApi, start: Start) -> None:
    api.put(pod("a"))
    api.refuse("watch", 410)
    _, seen = start()
    assert seen.lists == [1, 1]  # listed, the watch refused (Gone), listed again
    api.put(pod("b"))
    wait_until(lambda: "uid-b" in seen.pods)
    assert seen.errors == []


def test_other_error_events_are_counted_and_the_watch_resumes(api: KubeApi, start: Start) -> None:
    api.put(pod("a"))
    _, seen = start()
    api.error_watches(500, "InternalError", "etcd leader changed")
    wait_until(lambda: seen.errors == [("watch", 500)])
    api.put(pod("b"))  # the next watch resumes from the last resourceVersion: nothing lost
    wait_until(lambda: "uid-b" in seen.pods)
    assert seen.lists == [1]
    assert seen.errors == [("watch", 500)]


def test_a_refused_list_keeps_the_state_and_is_counted(api: KubeApi, start: Start) -> None:
    api.put(pod("a"))
    loop, seen = start()
    api.refuse("list", 503, times=2)
    loop.synced.clear()
    api.expire_watches()
    assert loop.synced.wait(10)
    assert seen.errors == [("list", 503), ("list", 503)]
    assert seen.lists == [1, 1]  # a refused list is not an empty one
    assert seen.pods == {"uid-a": {"team": "nlp"}}


@pytest.mark.parametrize("compacted", [False, True])
def test_api_down_keeps_the_last_known_state_and_recovers(
    api: KubeApi, start: Start, compacted: bool
) -> None:
    api.put(pod("a"))
    _, seen = start()
    api.down()
    wait_until(lambda: len(seen.errors) >= 3)
    assert {stage for stage, _ in seen.errors} == {"watch"}
    assert seen.pods == {"uid-a": {"team": "nlp"}}  # nothing cleared
    api.put(pod("a", team="vision"))  # changed while the consumer could not see it
    api.put(pod("b"))
    if compacted:  # down so long that those changes are no longer in the server's history
        api.compact()
    api.up()
    wait_until(lambda: seen.pods == {"uid-a": {"team": "vision"}, "uid-b": {"team": "nlp"}})
    # resumed from the last resourceVersion, or listed again where that is gone
    assert seen.lists == ([1, 2] if compacted else [1])
    wait_until(lambda: api.watches() == 1)


def test_open_watches_never_grow(
    api: KubeApi, start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    created: list[weakref.ref[kubernetes.watch.Watch]] = []

    class Tracked(kubernetes.watch.Watch):
        def __init__(self) -> None:
            super().__init__()
            created.append(weakref.ref(self))

    monkeypatch.setattr(kubernetes.watch, "Watch", Tracked)
    api.watch_lifetime = 0.05  # the server ends every watch at once: the loop watches again
    api.put(pod("a"))
    loop, seen = start()
    held: list[int] = []  # how many watches were alive, now and then

    def rewatched(times: int) -> None:
        wait_until(lambda: api.watches_opened >= times)
        gc.collect()
        held.append(sum(ref() is not None for ref in created))

    def ended(end_watches: Callable[[], None], until: Callable[[], bool]) -> None:
        def check() -> bool:
            end_watches()  # (again while none was open)
            return until()

        wait_until(check)

    rewatched(10)
    ended(api.expire_watches, lambda: len(seen.lists) >= 2)  # 410 Gone: relisted
    rewatched(20)
    ended(lambda: api.error_watches(500, "InternalError", "etcd"), lambda: bool(seen.errors))
    rewatched(40)
    api.put(pod("b"))
    wait_until(lambda: "uid-b" in seen.pods)
    assert api.watch_peak == 1  # open on the server: never more than one at a time
    assert max(held) == 1  # and never more than one held by the loop
    loop.stop()
    gc.collect()
    assert all(ref() is None for ref in created)
    wait_until(lambda: api.watches() == 0)


def test_stop_ends_the_open_watch_and_the_thread(api: KubeApi, start: Start) -> None:
    loop, _ = start(node="stopping")
    loop.stop()
    assert "test-watch-stopping" not in {t.name for t in threading.enumerate()}
    wait_until(lambda: api.watches() == 0)  # the server saw the connection close
