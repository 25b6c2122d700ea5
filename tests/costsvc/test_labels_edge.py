"""A pod's kube-state-metrics labels are read over the hour and the look-back its holding is
read with (costsvc/ingest/hour.py ``LATEST_SECONDS``): a pod that leaves just after the hour
starts still held its GPU into the hour, and its team is its own — whichever target was scraped
last (kube-state-metrics before the hour, the exporter after its start) and whichever engine
answers. Real Prometheus, the scraped form, SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import create_engine, select

from costsvc.db.models import Chargeback
from tests.costsvc.conftest import _loaded_prometheus
from tests.costsvc.history import H100, ingest_with, model
from tests.costsvc.scraped import Families, exporter_gpu
from tests.prom import Prometheus

T0 = int(datetime(2026, 11, 20, 16, tzinfo=UTC).timestamp())  # an hour the cost model prices
HOUR = datetime.fromtimestamp(T0, UTC)


def _history() -> str:
    """From 10 minutes before the hour to its end: node n1's exporter, scraped at :05 of each
    minute, shows GPU-A and GPU-B; ``stay`` holds GPU-A throughout, ``leave`` holds GPU-B until
    its last sample at T0 + 5 s (so 60 s into the hour: a sample holds one scrape interval).
    kube-state-metrics, scraped at :50, shows both pods' labels — ``leave``'s last at T0 - 10 s,
    before the hour, when the pod was deleted."""
    history = Families()
    exporter = 'job="gpu-exporter",instance="n1:9400"'
    ksm = 'job="kube-state-metrics",instance="ksm:8080"'
    for minute in range(T0 - 600, T0 + 3600, 60):
        t = minute + 5
        history.add("up", exporter, 1, t)
        for uuid, pod in (("GPU-A", "stay"), ("GPU-B", "leave")):
            gpu = exporter_gpu(uuid, "n1", H100)
            history.add("gpu_device_up", gpu, 1, t)
            if pod == "stay" or t <= T0 + 5:
                holder = f',namespace="ns",pod="{pod}",container="main"'
                history.add("gpu_allocation_share", gpu + holder, 1, t)
        t = minute + 50
        history.add("up", ksm, 1, t)
        for pod in ("stay", "leave"):
            if pod == "stay" or t < T0:
                labels = f'namespace="ns",pod="{pod}",label_team="{pod}",{ksm}'
                history.add("kube_pod_labels", labels, 1, t)
    return history.text()


@pytest.fixture(scope="module")
def edge_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    yield from _loaded_prometheus(tmp_path_factory, "labels-edge", _history(), T0, scraped=False)


@pytest.mark.parametrize("raw_only", [False, True], ids=["summaries", "samples"])
def test_a_pod_that_left_early_in_the_hour_is_its_teams(
    edge_prometheus: Prometheus, db_url: str, raw_only: bool
) -> None:
    ingest_with(edge_prometheus.url, db_url, model(), [HOUR], raw_only=raw_only)
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            c = Chargeback
            rows = conn.execute(select(c.pod, c.team, c.allocated).where(c.hour == HOUR)).all()
    finally:
        engine.dispose()
    teams = {pod: team for pod, team, _ in rows if pod}
    assert teams == {"stay": "stay", "leave": "leave"}, rows
    held = {pod: int(allocated) for pod, _, allocated in rows if pod}
    assert 0 < held["leave"] < held["stay"]  # (the control: it held a minute, not the hour)
