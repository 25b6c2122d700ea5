"""Label history from a real loopback Kubernetes API, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from costsvc.db.migrate import upgrade
from costsvc.db.models import PodLabels
from costsvc.labels.history import LabelHistory, _aware
from costsvc.labels.kube_watch import LabelWatcher
from kube.client import core_api
from tests.costsvc.history import HOUR, MODEL, ingest_with
from tests.costsvc.history_checks import by_team
from tests.kubeapi import KubeApi, pod_json, wait_until
from tests.prom import Prometheus


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
        wait_until(
            lambda: (
                history.labels_during(now, now + timedelta(hours=1))[0].get(("ml", "p"))
                == {"team": "b"}
            )
        )
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
        rows = conn.execute(
            select(PodLabels.labels, PodLabels.valid_to)
            .where(PodLabels.uid == "uid-p")
            .order_by(PodLabels.id)
        ).all()
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


def test_relist_after_410_records_a_relabel_made_meanwhile(api: KubeApi, db_url: str) -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    history = LabelHistory(engine, "c1")
    created = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1)
    pod = pod_json("ml", "r", "uid-r", "n1", {"team": "a"}, {"main": "d" * 64})
    pod["metadata"]["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    api.put(pod)
    watcher = LabelWatcher(history, core_api(host=api.url), lambda kind: None, retry_delay=0.05)
    watcher.start()
    try:
        assert watcher.synced["pods"].wait(10)
        wait_until(lambda: api.watches() == 2)
        watcher.synced["pods"].clear()
        with api._lock:  # relabelled while no watch sees it
            api.pods["uid-r"]["metadata"]["labels"] = {"team": "b"}
        before_relist = datetime.now(UTC)
        api.expire_watches()
        assert watcher.synced["pods"].wait(10)  # relisted
        # (before the fix, the relist's row collided with the first: it never got written)
        wait_until(lambda: len(rows_of(engine, "uid-r")) == 2)
    finally:
        watcher.stop()
    first, second = rows_of(engine, "uid-r")
    assert (first.labels, second.labels) == ({"team": "a"}, {"team": "b"})
    assert _aware(first.valid_from) == created  # labelled since its creation
    # the change dates from when it was seen, not from the pod's creation
    assert _aware(first.valid_to) == _aware(second.valid_from) >= before_relist
    engine.dispose()


def rows_of(engine: Any, uid: str) -> list[Any]:
    p = PodLabels
    with engine.connect() as conn:
        return list(
            conn.execute(
                select(p.labels, p.valid_from, p.valid_to).where(p.uid == uid).order_by(p.id)
            ).all()
        )


def test_namespace_history_closes_on_delete_and_reopens(db_url: str) -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    history = LabelHistory(engine, "c1")
    t = datetime(2026, 11, 1, tzinfo=UTC)
    history.observe_namespace("ml", {"team": "a"}, t + timedelta(days=3), since=t)
    history.observe_namespace("ml", {"team": "a"}, t + timedelta(days=4))  # unchanged: no row
    history.close_namespace("ml", t + timedelta(days=5))
    recreated = t + timedelta(days=6)
    history.observe_namespace("ml", {"team": "b"}, recreated + timedelta(hours=1), since=recreated)
    for day, team in ((2, "a"), (4, "a"), (5, None), (7, "b")):
        at = t + timedelta(days=day)
        _, spaces = history.labels_during(at, at + timedelta(hours=1))
        assert spaces.get("ml", {}).get("team") == team, day
    engine.dispose()


def test_a_pod_deleted_mid_hour_is_charged_to_its_team_from_the_api(
    api: KubeApi, db_url: str, prometheus: Prometheus
) -> None:
    # ml/p holds GPU-A 05:00-05:30 (history.py); the API says it belonged to team api-team from
    # the 1st and was deleted at 05:30. kube-state-metrics' "nlp" loses to the API's history.
    pod = pod_json("ml", "p", "uid-p", "n1", {"team": "api-team"}, {"main": "e" * 64})
    pod["metadata"]["creationTimestamp"] = "2026-11-01T00:00:00Z"
    api.put(pod)
    upgrade(db_url)
    engine = create_engine(db_url)
    watcher = LabelWatcher(
        LabelHistory(engine, "c1"), core_api(host=api.url), lambda kind: None, retry_delay=0.05
    )
    watcher.start()
    try:
        assert watcher.synced["pods"].wait(10)
        wait_until(lambda: api.watches() == 2)
        with api._lock:
            api.pods["uid-p"]["metadata"]["deletionTimestamp"] = "2026-11-10T05:30:00Z"
        api.delete("uid-p")
        wait_until(lambda: rows_of(engine, "uid-p")[-1].valid_to is not None)
    finally:
        watcher.stop()
    assert _aware(rows_of(engine, "uid-p")[-1].valid_to) == HOUR.replace(minute=30)
    engine.dispose()
    ingest_with(prometheus.url, db_url, MODEL, [HOUR])
    teams = by_team(db_url)
    assert teams["api-team"][0] == 1_250_000  # p's half hour, charged to its team
    assert teams["nlp"][0] == 1_666_667  # only g (labelled by kube-state-metrics) is left
