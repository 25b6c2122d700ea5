"""Label history from a real loopback Kubernetes API, on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine, select

from costsvc.db.migrate import upgrade
from costsvc.db.models import PodLabels
from costsvc.k8slabels import LabelHistory, LabelWatcher
from exporter.kubepods import core_api
from tests.kubeapi import KubeApi, pod_json


def wait_until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)  # polling interval while the watcher threads work


@pytest.fixture
def api() -> Iterator[KubeApi]:
    server = KubeApi()
    yield server
    server.stop()


def test_history_follows_the_api(api: KubeApi, db_url: str) -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    history = LabelHistory(engine, "c1")
    yesterday = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(days=1)
    old = pod_json("ml", "old", "uid-old", "n1", {"team": "nlp"}, {"main": "a" * 64})
    old["metadata"]["creationTimestamp"] = yesterday.strftime("%Y-%m-%dT%H:%M:%SZ")
    api.put(old)
    api.put(pod_json("ml", "p", "uid-p", "n1", {"team": "a"}, {"main": "b" * 64}))
    api.put_namespace("ml", {"team": "ns-team"})
    watcher = LabelWatcher(history, core_api(host=api.url), lambda kind: None, retry_delay=0.05)
    watcher.start()
    try:
        assert watcher.synced["pods"].wait(10) and watcher.synced["namespaces"].wait(10)
        wait_until(lambda: api.watches() == 2)
        now = datetime.now(UTC)
        pods, spaces = history.labels_during(now - timedelta(minutes=1), now + timedelta(hours=1))
        assert pods[("ml", "p")] == {"team": "a"}
        assert spaces["ml"] == {"team": "ns-team"}

        api.put(pod_json("ml", "p", "uid-p", "n1", {"team": "b"}, {"main": "b" * 64}))
        wait_until(lambda: history.labels_during(now, now + timedelta(hours=1))[0]
                   .get(("ml", "p")) == {"team": "b"})  # fmt: skip
        api.delete("uid-old")

        def closed() -> bool:
            with engine.connect() as conn:
                q = select(PodLabels.valid_to).where(PodLabels.uid == "uid-old")
                return conn.execute(q).scalar() is not None

        wait_until(closed)
    finally:
        watcher.stop()
    # the pod deleted today still has yesterday's labels for yesterday's hours
    pods, _ = history.labels_during(yesterday, yesterday + timedelta(hours=1))
    assert pods[("ml", "old")] == {"team": "nlp"}
    with engine.connect() as conn:
        rows = conn.execute(select(PodLabels.labels, PodLabels.valid_to).where(
            PodLabels.uid == "uid-p").order_by(PodLabels.id)).all()  # fmt: skip
    assert [r.labels for r in rows] == [{"team": "a"}, {"team": "b"}]
    assert rows[0].valid_to is not None and rows[1].valid_to is None
    engine.dispose()


def test_relist_after_410_closes_pods_deleted_meanwhile(api: KubeApi, db_url: str) -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    history = LabelHistory(engine, "c1")
    api.put(pod_json("ml", "gone", "uid-gone", "n1", {"team": "x"}, {"main": "c" * 64}))
    watcher = LabelWatcher(history, core_api(host=api.url), lambda kind: None, retry_delay=0.05)
    watcher.start()
    try:
        assert watcher.synced["pods"].wait(10)
        wait_until(lambda: api.watches() == 2)
        watcher.synced["pods"].clear()
        with api._lock:  # deleted while no watch sees it
            api.pods.pop("uid-gone")
        api.expire_watches()
        assert watcher.synced["pods"].wait(10)  # relisted

        def closed() -> bool:
            with engine.connect() as conn:
                q = select(PodLabels.valid_to).where(PodLabels.uid == "uid-gone")
                return conn.execute(q).scalar() is not None

        wait_until(closed)
    finally:
        watcher.stop()
        engine.dispose()
