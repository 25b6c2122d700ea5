"""History of 2026-11-18 10:00-13:00 UTC for the Kueue ground truth (test_queues.py): Kueue's
own series as it publishes them (kubernetes-sigs/kueue pkg/metrics/metrics.go; custom labels
``custom_<name>``, pkg/metrics/custom_labels.go) and three GPUs held by pods of namespace
``train`` (team label ``ns-team``). H100 at 2.50 per GPU-hour; cost model: flavors ``h100``
and ``h100-mig`` are H100s, ``credit_lenders`` at premium 1.2 (see MODEL).

Cohort ``research``, flavor ``h100``, ``nvidia.com/gpu`` (nominal 8/4/4; GPUs used):

    hour   cq-a (alpha)  cq-b (beta -> beta2 at 11:00)  cq-c (gamma)
    10     8 of 8        7 of 4: borrows 3              1 of 4: lends 3 (its 3 unused)
    11     6 of 8        7 of 4: borrows 3              0 of 4
    12     8 of 8        4 of 4                         2 of 4: 2 idle

- 10:00: b borrows 3 x 3600 = 10800 s, c the only lender -> lent 10800. Money: 3 GPU-hours x
  2.50 x 1.2 = 9.000000 charged to beta, credited to gamma.
- 11:00: a has 2 unused, c 4: b's 10800 s split 2:4 -> a lends 3600 (idle 3600), c 7200
  (idle 7200); 9.000000 charged to beta2, credited 1:2 -> alpha 3.000000, gamma 6.000000.
- 12:00: nothing borrowed; c's 2 unused GPUs idle (7200 s).

Cohort ``mig``, flavor ``h100-mig``, ``nvidia.com/mig-1g.10gb`` (nominal 7/7, every hour):
cq-d (delta) uses 10: borrows 3 instances (10800 s); cq-e (eps) uses 2: 5 unused, lends 10800,
idle 7200. A 1g.10gb is 1 of an H100's 7 compute slices: 3 x 2.50 / 7 x 1.2 = 1.2857142…
-> 1.285714 charged to delta and credited to eps.

Cohort ``odd``: a ClusterQueue named with 300 x's (stored cut to 253), no team label
(``__unallocated__``), 2 GPUs of quota and a use of -5 (no use can be negative: 0): 7200 s idle.

Left out by the reader: a follower replica's copy of cq-a's use (``replica_role="follower"``,
value 99) and cq-a's ``cpu`` quota.

GPUs (one pod each, the whole three hours): GPU-K1 train/p1 with the queue label ``lq-b``
(LocalQueue train/lq-b: custom_team ``beta``, ``beta2`` from 11:00) -> beta, then beta2;
GPU-K2 train/p2 without the queue label -> its namespace's ns-team; GPU-K3 train/p3 with
``lq-b`` and its own team label ``own`` -> own (pod_first). Fleet: 3 x 2.50 = 7.500000 an hour.

The link of lq-b (:func:`keep_links`, as the LocalQueue watch keeps it): ClusterQueue cq-b at
10:00, cq-c from 11:00 (re-pointed) — so p1's and p3's lines are in cohort ``research``,
flavor ``h100`` (cq-b's and cq-c's one GPU flavor) every hour; p2's have no queue ("").
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine

from costsvc.db.migrate import upgrade
from costsvc.queues.links import LocalQueueHistory
from costsvc.rules.cost_model import CostModel, parse
from tests.costsvc.conftest import prometheus_over
from tests.costsvc.inference_history import _History
from tests.costsvc.scraped import as_scraped
from tests.prom import Prometheus

START = datetime(2026, 11, 18, 10, tzinfo=UTC)
HOURS = [START + timedelta(hours=i) for i in range(3)]
T = int(START.timestamp())
H100 = "NVIDIA H100 80GB HBM3"
QUEUE_LABEL = "label_kueue_x_k8s_io_queue_name"  # kube-state-metrics' kueue.x-k8s.io/queue-name


def model(
    *borrowing: dict[str, str], precedence: str = "pod_first", team_from: str = "local_queue_label"
) -> CostModel:
    return parse(
        {
            "versions": [
                {
                    "effective_from": "2026-11-01T00:00:00Z",
                    "prices": [{"model": H100, "hourly": "2.50"}],
                }
            ],
            "queues": {
                "owners": {"team_from": team_from, "precedence": precedence},
                "flavors": {"h100": H100, "h100-mig": H100},
                "borrowing": list(borrowing),
            },
        }
    )


# LocalQueue train/lq-b's ClusterQueue as the Kubernetes-API watch keeps it: cq-b since the day
# before, until 11:00, when lq-b is deleted and created again pointing to cq-c (a LocalQueue's
# spec.clusterQueue is immutable: kubernetes-sigs/kueue apis/kueue/v1beta2/localqueue_types.go)
REPOINTED = START + timedelta(hours=1)


def keep_links(db_url: str, cluster: str = "c1") -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    try:
        links = LocalQueueHistory(engine, cluster)
        links.observe("train", "lq-b", "cq-b", START, START - timedelta(days=1))
        links.close("train", "lq-b", REPOINTED)
        links.observe("train", "lq-b", "cq-c", REPOINTED, REPOINTED)
    finally:
        engine.dispose()


CREDIT = {"effective_from": "2026-11-18T10:00:00Z", "policy": "credit_lenders", "premium": "1.2"}
MODEL = model(CREDIT)
NONE = model()


def _queue(
    h: _History, cohort: str, queue: str, flavor: str, resource: str, nominal: int, uses: list[int]
) -> None:
    labels = {"cohort": cohort, "cluster_queue": queue, "flavor": flavor, "resource": resource}
    for i, used in enumerate(uses):
        start, stop = T + 3600 * i - (60 if i == 0 else 0), T + 3600 * (i + 1)
        team = {"cq-a": "alpha", "cq-c": "gamma", "cq-d": "delta", "cq-e": "eps"}.get(queue)
        team = team or ("beta" if i == 0 else "beta2")
        lab = {**labels, "replica_role": "leader", "custom_team": team}
        h.add("kueue_cluster_queue_nominal_quota", lab, nominal, start, stop)
        h.add("kueue_cluster_queue_resource_usage", lab, used, start, stop)


def history() -> str:
    h = _History()
    _queue(h, "research", "cq-a", "h100", "nvidia.com/gpu", 8, [8, 6, 8])
    _queue(h, "research", "cq-b", "h100", "nvidia.com/gpu", 4, [7, 7, 4])
    _queue(h, "research", "cq-c", "h100", "nvidia.com/gpu", 4, [1, 0, 2])
    _queue(h, "mig", "cq-d", "h100-mig", "nvidia.com/mig-1g.10gb", 7, [10, 10, 10])
    _queue(h, "mig", "cq-e", "h100-mig", "nvidia.com/mig-1g.10gb", 7, [2, 2, 2])
    before, end = T - 60, T + 3 * 3600
    a = {"cohort": "research", "cluster_queue": "cq-a", "flavor": "h100"}
    h.add(
        "kueue_cluster_queue_resource_usage",
        {**a, "resource": "nvidia.com/gpu", "replica_role": "follower"},
        99,
        before,
        end,
    )
    h.add(
        "kueue_cluster_queue_nominal_quota",
        {**a, "resource": "cpu", "replica_role": "leader"},
        64,
        before,
        end,
    )
    # hostile: a ClusterQueue name past the columns' 253 characters (cut), no team label
    # (__unallocated__), a negative use (counted as 0): 2 GPUs of quota idle every hour
    odd = {"cohort": "odd", "cluster_queue": "x" * 300, "flavor": "h100"}
    odd |= {"resource": "nvidia.com/gpu", "replica_role": "leader"}
    h.add("kueue_cluster_queue_nominal_quota", odd, 2, before, end)
    h.add("kueue_cluster_queue_resource_usage", odd, -5, before, end)
    lq = {"name": "lq-b", "namespace": "train", "status": "True", "replica_role": "leader"}
    h.add("kueue_local_queue_status", {**lq, "custom_team": "beta"}, 1, before, T + 3600)
    h.add("kueue_local_queue_status", {**lq, "custom_team": "beta2"}, 1, T + 3600, end)
    h.add("kube_namespace_labels", {"namespace": "train", "label_team": "ns-team"}, 1, before, end)
    pods = [
        ("K1", "p1", {QUEUE_LABEL: "lq-b"}),
        ("K2", "p2", {}),
        ("K3", "p3", {QUEUE_LABEL: "lq-b", "label_team": "own"}),
    ]
    for gpu, pod, labels in pods:
        device = {"gpu": "0", "UUID": f"GPU-{gpu}", "modelName": H100, "Hostname": f"node-{gpu}"}
        holder = {
            **device,
            "namespace": "train",
            "pod": pod,
            "container": "main",
            "resource": "nvidia.com/gpu",
        }
        h.add("gpu_device_up", device, 1, before, end)
        h.add("gpu_allocation_share", holder, 1, before, end)
        h.add("gpu_allocation_memory_share", holder, 1, before, end)
        h.add("kube_pod_labels", {"namespace": "train", "pod": pod, **labels}, 1, before, end)
    return h.text()


@pytest.fixture(scope="module")
def queue_prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A real Prometheus over :func:`history` (the queue tests' fleet)."""
    work = tmp_path_factory.mktemp("queues")
    (work / "history.om").write_text(as_scraped(history()))
    yield from prometheus_over(work, T)


@pytest.fixture
def db(db_url: str) -> str:
    """A fresh database of each kind (conftest's ``db_url``), as the queue tests name it."""
    return db_url
