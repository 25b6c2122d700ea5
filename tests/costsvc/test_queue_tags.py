"""The Kueue queue of a pod's chargeback line — its LocalQueue, ClusterQueue, cohort and
flavor — and the labels that decided its owner, through a real Prometheus on SQLite and
PostgreSQL (queue_history.py's fleet; lq-b's ClusterQueue as the LocalQueue watch keeps it:
cq-b at 10:00, cq-c from 11:00, ``keep_links``), ``group_by`` on ``/v1/costs``, the owner rule's
``cluster_queue_label``, and the LocalQueue watch itself against a loopback Kubernetes API."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select

from costsvc.db.models import Chargeback, GpuPresence
from costsvc.db.queue_links import LocalQueueLinks
from costsvc.ingest.reprice import reprice, stale_hours
from costsvc.queues.kube_watch import LocalQueueWatcher
from costsvc.queues.links import LocalQueueHistory
from kube.client import core_api, custom_api
from tests.costsvc import queue_history
from tests.costsvc.apiserver import Api, Clock, serve
from tests.costsvc.conftest import fresh_database
from tests.costsvc.history import ingest_with
from tests.costsvc.history_checks import as_utc
from tests.costsvc.queue_history import CREDIT, HOURS, MODEL, keep_links, model
from tests.kubeapi import KubeApi, wait_until
from tests.prom import Prometheus

H10, H11, H12 = HOURS
FLEET = 3 * 7_500_000  # 3 GPUs x 2.50 x 3 hours, micro-units
NOBODY = "team=namespace:team;project=-;stage=-"  # p2: its namespace's team label decided
WINDOW = {"start": "2026-11-18T10:00:00Z", "end": "2026-11-18T13:00:00Z"}


def tags(cluster_queue: str, owner_from: str) -> tuple[str, ...]:
    return ("lq-b", cluster_queue, "research", "h100", owner_from)


queue_prom, db = queue_history.queue_prom, queue_history.db  # the fleet, each database


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, queue_prom: Prometheus
) -> Iterator[Api]:
    with fresh_database(request.param, request, tmp_path_factory.mktemp("tapi")) as url:
        keep_links(url)
        ingest_with(queue_prom.url, url, MODEL, HOURS)
        with serve(url, Clock(datetime(2026, 11, 21, tzinfo=UTC)), ["beta2"]) as running:
            yield running


def line_tags(url: str) -> dict[tuple[datetime, str], tuple[Any, ...]]:
    """(hour, pod) -> team, queue, ClusterQueue, cohort, flavor, owner_from of its line."""
    engine = create_engine(url)
    c = Chargeback
    cols = (c.team, c.queue, c.cluster_queue, c.cohort, c.flavor, c.owner_from)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(c.hour, c.pod, *cols).where(c.pod != "")).all()
            return {(as_utc(r[0]), r[1]): tuple(r[2:]) for r in rows}
    finally:
        engine.dispose()


def sums_by(url: str, column: str) -> dict[str, int]:
    """Σ allocated + idle of the three hours per value of ``column``, and the fleet's cost."""
    engine = create_engine(url)
    c, g = Chargeback, GpuPresence
    try:
        with engine.connect() as conn:
            found = conn.execute(
                select(getattr(c, column), func.sum(c.allocated + c.idle)).group_by(
                    getattr(c, column)
                )
            ).all()
            fleet = conn.execute(select(func.sum(g.cost))).scalar()
    finally:
        engine.dispose()
    assert fleet == FLEET
    return {k: int(v) for k, v in found if v}


def test_each_line_carries_its_queue_and_what_decided_its_owner(api: Api) -> None:
    found = line_tags(api.db_url)
    by_label = "team=local_queue:custom_team;project=-;stage=-"  # lq-b's custom label
    own = "team=pod:team;project=-;stage=-"  # p3's own team label (pod_first)
    assert found == {
        (H10, "p1"): ("beta", *tags("cq-b", by_label)),
        (H11, "p1"): ("beta2", *tags("cq-c", by_label)),  # lq-b re-pointed to cq-c at 11:00
        (H12, "p1"): ("beta2", *tags("cq-c", by_label)),
        **{(h, "p2"): ("ns-team", "", "", "", "", NOBODY) for h in HOURS},  # no queue label
        (H10, "p3"): ("own", *tags("cq-b", own)),
        (H11, "p3"): ("own", *tags("cq-c", own)),
        (H12, "p3"): ("own", *tags("cq-c", own)),
    }
    # each grouping adds up to the fleet's cost exactly: p1 + p3 (2 GPUs x 3 h x 2.50 = 15)
    # and p2 (7.50); by ClusterQueue: cq-b 2 GPUs at 10:00 (5), cq-c 2 GPUs at 11-12 (10)
    assert sums_by(api.db_url, "queue") == {"lq-b": 15_000_000, "": 7_500_000}
    assert sums_by(api.db_url, "cluster_queue") == {
        "cq-b": 5_000_000,
        "cq-c": 10_000_000,
        "": 7_500_000,
    }
    assert sums_by(api.db_url, "cohort") == {"research": 15_000_000, "": 7_500_000}
    assert sums_by(api.db_url, "flavor") == {"h100": 15_000_000, "": 7_500_000}


def _costs(api: Api, who: str, **params: str) -> list[tuple[Any, ...]]:
    r = api.get("/v1/costs", who, **WINDOW, **params)
    assert r.status_code == 200, r.text
    return [(*r_["group"].values(), r_["total_cost"]) for r_ in r.json()["rows"]]


def test_v1_costs_groups_by_queue_cluster_queue_cohort_and_flavor(api: Api) -> None:
    # the same figures as the chargeback's sums above, as the API writes money
    assert sorted(_costs(api, "finance", group_by="queue")) == [
        ("", "7.500000"),
        ("lq-b", "15.000000"),
    ]
    found = _costs(api, "finance", group_by="cohort,cluster_queue,flavor")
    assert sorted(found) == [
        ("", "", "", "7.500000"),
        ("research", "cq-b", "h100", "5.000000"),
        ("research", "cq-c", "h100", "10.000000"),
    ]
    # filtered by a ClusterQueue: cq-c's 2 GPU-hours of p1 and p3 at 11:00 and 12:00
    assert _costs(api, "finance", group_by="pod", cluster_queue="cq-c") == [
        ("p1", "5.000000"),
        ("p3", "5.000000"),
    ]
    # a team sees its own lines only: beta2 is p1's team from 11:00 (2 GPU-hours on cq-c)
    assert _costs(api, "team:beta2", group_by="team,queue,cluster_queue") == [
        ("beta2", "lq-b", "cq-c", "5.000000")
    ]
    for bad in ({"group_by": "queue,queue"}, {"group_by": "queues"}, {"cohort": "\x00" * 9}):
        r = api.get("/v1/costs", "finance", **{**WINDOW, **bad})
        assert r.status_code in (400, 422) and len(r.text) < 500, (bad, r.text)


def test_cluster_queue_label_without_and_with_the_watch(queue_prom: Prometheus, db: str) -> None:
    by_cq = model(CREDIT, team_from="cluster_queue_label")
    # no LocalQueue watch: lq-b's ClusterQueue is unknown (""), so p1's team falls back to its
    # namespace's label; the queue is still the pod's label
    ingest_with(queue_prom.url, db, by_cq, HOURS)
    found = line_tags(db)
    assert {found[(h, "p1")] for h in HOURS} == {("ns-team", "lq-b", "", "", "", NOBODY)}
    assert sums_by(db, "cluster_queue") == {"": FLEET}
    # with the watch's history: p1's team is its ClusterQueue's custom label in each hour —
    # cq-b's beta at 10:00, cq-c's gamma after lq-b was re-pointed; p3 keeps its own label
    keep_links(db)
    ingest_with(queue_prom.url, db, by_cq, HOURS)
    by_label = "team=cluster_queue:custom_team;project=-;stage=-"
    want = {
        (H10, "p1"): ("beta", *tags("cq-b", by_label)),
        (H11, "p1"): ("gamma", *tags("cq-c", by_label)),
        (H12, "p1"): ("gamma", *tags("cq-c", by_label)),
    }
    assert {k: v for k, v in line_tags(db).items() if k[1] == "p1"} == want
    # a reprice keeps the lines' queues and owners as charged
    later = model(team_from="cluster_queue_label")  # the policy none: every hour repriced
    engine = create_engine(db)
    try:
        assert stale_hours(engine, later) == HOURS
        assert reprice(engine, later, "c1", HOURS).done == HOURS
    finally:
        engine.dispose()
    assert {k: v for k, v in line_tags(db).items() if k[1] == "p1"} == want
    assert sums_by(db, "queue") == {"lq-b": 15_000_000, "": 7_500_000}


def _local_queue(namespace: str, name: str, uid: str, cluster_queue: str, version: str) -> Any:
    return {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "LocalQueue",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "creationTimestamp": "2026-11-18T09:00:00Z",
        },
        "spec": {"clusterQueue": cluster_queue},
    }


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_the_local_queue_watch_keeps_each_link_over_time(db: str, version: str) -> None:
    from costsvc.db.migrate import upgrade

    upgrade(db)
    kube = KubeApi()
    path = f"/apis/kueue.x-k8s.io/{version}/localqueues"
    kube.put_object(path, _local_queue("train", "lq-b", "u1", "cq-b", version))
    kube.put_object(path, _local_queue("train", "lq-x", "u2", "y" * 300, version))  # cut
    engine = create_engine(db)
    history = LocalQueueHistory(engine, "c1")
    api = custom_api(core_api(host=kube.url))
    watcher = LocalQueueWatcher(history, api, version, lambda kind: None, retry_delay=0.05)
    since = datetime(2026, 11, 18, 9, tzinfo=UTC)
    try:
        watcher.start()
        wait_until(watcher.synced["localqueues"].is_set)
        now = datetime.now(UTC)
        # listed: each LocalQueue points there since its creation
        assert history.links_during(since, since + timedelta(hours=1)) == {
            ("train", "lq-b"): "cq-b",
            ("train", "lq-x"): "y" * 253,
        }
        # re-pointed: deleted, then created again under its name with another ClusterQueue
        tomorrow = now + timedelta(days=1), now + timedelta(days=2)
        kube.delete_object(path, "u1")
        wait_until(lambda: ("train", "lq-b") not in history.links_during(*tomorrow))
        kube.put_object(path, _local_queue("train", "lq-b", "u3", "cq-c", version))
        wait_until(lambda: history.links_during(*tomorrow).get(("train", "lq-b")) == "cq-c")
    finally:
        watcher.stop()
        kube.stop()
    # the hour it was listed in still says cq-b; two rows, the first closed
    assert history.links_during(since, since + timedelta(hours=1))[("train", "lq-b")] == "cq-b"
    with engine.connect() as conn:
        t = LocalQueueLinks
        rows = conn.execute(
            select(t.cluster_queue, t.valid_from, t.valid_to)
            .where(t.name == "lq-b")
            .order_by(t.valid_from)
        ).all()
    engine.dispose()
    assert [(r[0], r[2] is None) for r in rows] == [("cq-b", False), ("cq-c", True)]
    assert as_utc(rows[0][1]) == since
    assert as_utc(rows[0][2]) <= as_utc(rows[1][1])


def test_serve_watches_local_queues_when_a_version_is_set(db: str) -> None:
    """``serve``'s watches (costsvc/cli.py): the LocalQueues join the label watch with
    ``COSTSVC_KUEUE_API_VERSION``; without it they are not listed."""
    from costsvc.cli import _label_watcher
    from costsvc.db.migrate import upgrade
    from costsvc.kit.settings import Settings

    upgrade(db)
    kube = KubeApi()
    path = "/apis/kueue.x-k8s.io/v1beta2/localqueues"
    kube.put_object(path, _local_queue("train", "lq-b", "u1", "cq-b", "v1beta2"))
    engine = create_engine(db)
    since = datetime(2026, 11, 18, 9, tzinfo=UTC), datetime(2026, 11, 18, 10, tzinfo=UTC)
    try:
        plain = _label_watcher(Settings(database_url=db, kube_api_url=kube.url, cluster="c1"))
        plain.stop()
        assert "localqueues" not in plain.lists
        asked = Settings(
            database_url=db, kube_api_url=kube.url, cluster="c1", kueue_api_version="v1beta2"
        )
        watcher = _label_watcher(asked)
        try:
            history = LocalQueueHistory(engine, "c1")
            wait_until(lambda: history.links_during(*since) == {("train", "lq-b"): "cq-b"})
        finally:
            watcher.stop()
    finally:
        kube.stop()
        engine.dispose()
    assert (path, "list") in kube.paths
