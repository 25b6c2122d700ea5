"""Two cost-service replicas ingesting four clusters: every (cluster, hour) exactly once.

One real Prometheus holds the history of four clusters (every series labelled ``cluster``).
Two replicas — threads with their own engines and query clients, and a separate process for
the replica that dies — run costsvc/ingest/clusters.py against one database (SQLite file and
PostgreSQL). Each (cluster, hour) must be collected and stored by one replica only (one ingest
run, done), and the money must be what one ingester reading everything computes.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from costsvc.db import runs
from costsvc.db.engine import make_engine
from costsvc.db.migrate import upgrade
from costsvc.db.models import Chargeback, IngestRun
from costsvc.ingest.clusters import (
    ClusterReader,
    FleetReport,
    backfill_hours,
    discover,
    ingest_clusters,
)
from costsvc.ingest.prom import PrometheusReader
from costsvc.ingest.run import complete_hours, ingest, pending_hours
from costsvc.rules.chargeback import MONEY
from costsvc.rules.cost_model import load
from tests.costsvc.conftest import _loaded_prometheus
from tests.procs import ROOT
from tests.prom import Prometheus

MODEL = load(ROOT / "examples" / "cost-model.yaml")
H100 = "NVIDIA H100 80GB HBM3"
CLUSTERS = ["east", "north", "south", "west"]
T0 = int(datetime(2026, 11, 20, 0, tzinfo=UTC).timestamp())
HOURS = 3
START = datetime.fromtimestamp(T0, UTC)
STOP = START + timedelta(hours=HOURS)


def _history() -> str:
    """Four clusters, each with its own GPU count and pods (whole and time-sliced), the same
    UUIDs and pod names in every cluster (they must never mix), scraped every 60 s."""
    out = []

    def family(name: str, series: list[tuple[str, float]], stamps: range) -> None:
        out.append(f"# TYPE {name} gauge")
        out.extend(f"{name}{{{labels}}} {value} {t}" for labels, value in series for t in stamps)

    every = range(T0, T0 + HOURS * 3600, 60)
    up, util, share, sm, labels = [], [], [], [], []
    for c, cluster in enumerate(CLUSTERS):
        for i in range(2 + c):
            gpu = f'cluster="{cluster}",UUID="GPU-{i}",modelName="{H100}",Hostname="n{i // 2}"'
            up.append((gpu, 1))
            util.append((gpu, 20 + 10 * c + i))
            pods = 1 if i % 2 == 0 else 2  # odd GPUs time-sliced by two pods
            for p in range(pods):
                pod = f'namespace="team-{(i + p) % 3}",pod="p{i}-{p}",container="main"'
                share.append((f'{gpu},{pod},resource="nvidia.com/gpu"', 1 / pods))
                if pods > 1:
                    sm.append((f"{gpu},{pod}", 0.3 / pods))
                team = f'cluster="{cluster}",namespace="team-{(i + p) % 3}",pod="p{i}-{p}"'
                labels.append((f'{team},label_team="t{(i + p) % 3}"', 1))
    family("gpu_device_up", up, every)
    family("DCGM_FI_DEV_GPU_UTIL", util, every)
    family("gpu_allocation_share", share, every)
    family("gpu_container_sm_utilization_ratio", sm, every)
    family("kube_pod_labels", labels, every)
    return "\n".join([*out, "# EOF", ""])


@pytest.fixture(scope="module")
def four_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    yield from _loaded_prometheus(tmp_path_factory, "four-clusters", _history(), T0)


def _database(url: str) -> Engine:
    upgrade(url)
    return make_engine(url)


def _readers(prom: Prometheus) -> object:
    return lambda cluster: ClusterReader(prom.url, cluster, "default")


def _hours_after_watermark(engine: Engine) -> object:
    def hours_for(cluster: str, began: datetime) -> list[datetime]:
        return pending_hours(engine, cluster, STOP, first_run_span=timedelta(hours=HOURS))

    return hours_for


def _runs(engine: Engine) -> dict[tuple[str, datetime], list[str]]:
    r = IngestRun
    out: dict[tuple[str, datetime], list[str]] = {}
    with engine.connect() as conn:
        for cluster, hour, status in conn.execute(select(r.cluster, r.hour, r.status)):
            out.setdefault((cluster, hour.replace(tzinfo=UTC)), []).append(status)
    return out


Lines = dict[tuple[str, datetime, str, str, str], tuple[int, ...]]


def _money(engine: Engine) -> Lines:
    """Every chargeback line's money (integer micro-units), by (cluster, hour, team, pod)."""
    c = Chargeback
    key = (c.cluster, c.hour, c.team, c.namespace, c.pod)
    query = select(*key, *(func.sum(getattr(c, m)) for m in MONEY)).group_by(*key)
    with engine.connect() as conn:
        return {
            (r[0], r[1].replace(tzinfo=UTC), r[2], r[3], r[4]): tuple(int(v) for v in r[5:])
            for r in conn.execute(query)
        }


def _one_ingester(prom: Prometheus, tmp: Path) -> Lines:
    """What one ingester reading every series computes (today's single-replica path)."""
    engine = _database(f"sqlite:///{tmp / 'one.db'}")
    reader = PrometheusReader(prom.url)
    try:
        report = ingest(engine, reader, MODEL, "default", complete_hours(START, STOP))
        assert len(report.done) == HOURS, report.failed
        return _money(engine)
    finally:
        reader.close()
        engine.dispose()


def _every_hour_once(engine: Engine) -> None:
    expected = {(c, h) for c in CLUSTERS for h in complete_hours(START, STOP)}
    found = _runs(engine)
    assert set(found) == expected
    assert all(statuses == ["done"] for statuses in found.values()), found


def test_two_replicas_ingest_each_cluster_hour_once_with_one_ingesters_money(
    db_url: str, four_clusters: Prometheus, tmp_path: Path
) -> None:
    engines = [_database(db_url), make_engine(db_url)]
    reports: list[FleetReport | None] = [None, None]
    skipped_by_b = threading.Event()  # B found A's first cluster claimed
    b_stored = threading.Event()  # ... and stored an hour of another one
    b_started = threading.Event()
    errors: list[BaseException] = []

    def replica(k: int) -> None:
        engine = engines[k]

        def progress(cluster: str, hour: datetime, error: str | None) -> None:
            assert error is None, error
            if k == 0 and cluster == CLUSTERS[0] and hour == START:
                # replica A holds its first cluster until B has found it claimed and has
                # stored an hour of a cluster of its own
                b_started.set()
                assert b_stored.wait(120), "replica B never met A's claim"
            if k == 1:
                assert skipped_by_b.is_set()
                b_stored.set()

        def on_skip(cluster: str) -> None:
            if k == 1:
                skipped_by_b.set()

        try:
            if k == 1:
                assert b_started.wait(60)
            reports[k] = ingest_clusters(
                engine,
                _readers(four_clusters),  # type: ignore[arg-type]
                MODEL,
                CLUSTERS,
                _hours_after_watermark(engine),  # type: ignore[arg-type]
                progress=progress,
                on_skip=on_skip,
            )
        except BaseException as exc:
            errors.append(exc)
            b_stored.set()
            b_started.set()

    threads = [threading.Thread(target=replica, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    a, b = reports
    assert a is not None and b is not None
    # both worked, on different clusters, and together on every one
    assert CLUSTERS[0] in a.done and CLUSTERS[0] not in b.done
    assert b.done, "replica B ingested nothing"
    assert not set(a.done) & set(b.done)
    assert set(a.done) | set(b.done) == set(CLUSTERS)
    _every_hour_once(engines[0])
    lines = _money(engines[0])
    assert {key[0] for key in lines} == set(CLUSTERS)
    assert sum(money[0] for money in lines.values()) > 0
    assert lines == _one_ingester(four_clusters, tmp_path)
    for engine in engines:
        engine.dispose()


def test_a_replica_that_dies_loses_its_claim_and_its_hours_are_ingested_once(
    db_url: str, four_clusters: Prometheus
) -> None:
    engine = _database(db_url)
    # a replica in its own process claims "north" and dies holding it
    code = (
        "import sys\n"
        "from costsvc.db import runs\n"
        "from costsvc.db.engine import make_engine\n"
        f"with runs.claim_cluster(make_engine({db_url!r}), 'north') as got:\n"
        "    print('claimed' if got else 'held', flush=True)\n"
        "    sys.stdin.read()\n"
    )
    dying = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert dying.stdout is not None
        assert dying.stdout.readline().strip() == "claimed"
        first = ingest_clusters(
            engine,
            _readers(four_clusters),  # type: ignore[arg-type]
            MODEL,
            CLUSTERS,
            _hours_after_watermark(engine),  # type: ignore[arg-type]
        )
        assert first.skipped == ["north"]
        assert set(first.done) == set(CLUSTERS) - {"north"}
    finally:
        dying.kill()
        dying.wait(30)
    _until_free(engine, "north")
    second = ingest_clusters(
        engine,
        _readers(four_clusters),  # type: ignore[arg-type]
        MODEL,
        CLUSTERS,
        _hours_after_watermark(engine),  # type: ignore[arg-type]
    )
    assert set(second.done) == {"north"} and not second.skipped
    _every_hour_once(engine)
    engine.dispose()


def _until_free(engine: Engine, cluster: str) -> None:
    """Wait until the dead replica's claim is gone (PostgreSQL ends its session when it sees
    the client's socket closed)."""
    deadline = time.monotonic() + 30
    while True:
        with runs.claim_cluster(engine, cluster) as got:
            if got:
                return
        assert time.monotonic() < deadline, "the dead replica's claim was never released"
        time.sleep(0.05)  # polling interval while waiting for the server to end the session


def test_a_backfill_run_by_two_replicas_collects_each_hour_once(
    db_url: str, four_clusters: Prometheus
) -> None:
    """A backfill range given to both replicas: the second, started while the first ran,
    leaves the hours the first did."""
    engine = _database(db_url)
    hours = complete_hours(START, STOP)
    began = datetime.now(UTC)
    readers = _readers(four_clusters)
    one = ingest_clusters(engine, readers, MODEL, CLUSTERS, backfill_hours(engine, hours))  # type: ignore[arg-type]
    assert set(one.done) == set(CLUSTERS)
    # the second replica began before the first finished: nothing is left for it
    later = backfill_hours(engine, hours)
    assert all(later(c, began) == [] for c in CLUSTERS)
    _every_hour_once(engine)
    engine.dispose()


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_each_clusters_hours_in_worker_processes(
    db_url: str, four_clusters: Prometheus, tmp_path: Path
) -> None:
    """COSTSVC_INGEST_WORKERS with COSTSVC_CLUSTERS: each cluster's hours in two worker
    processes (costsvc/ingest/parallel.py, their ClusterReader rebuilt from its spec), under
    this replica's claim: every (cluster, hour) once, one ingester's money."""
    engine = _database(db_url)
    hours = complete_hours(START, STOP)
    report = ingest_clusters(
        engine,
        _readers(four_clusters),  # type: ignore[arg-type]
        MODEL,
        CLUSTERS,
        backfill_hours(engine, hours),
        workers=2,
    )
    assert all(r.done == hours and not r.failed for r in report.done.values()), report
    _every_hour_once(engine)
    assert _money(engine) == _one_ingester(four_clusters, tmp_path)
    assert all(runs.watermark(engine, c) == hours[-1] for c in CLUSTERS)
    engine.dispose()


def test_discovery_and_scoped_reads(four_clusters: Prometheus) -> None:
    reader = PrometheusReader(four_clusters.url)
    try:
        assert discover(reader, START, STOP, "default") == CLUSTERS
    finally:
        reader.close()
    scoped = ClusterReader(four_clusters.url, "south", "default")
    try:
        at = START + timedelta(hours=1)
        found = scoped.raw("gpu_device_up", at, 3600)
        assert {s.labels["cluster"] for s in found} == {"south"}
        assert len(found) == 2 + CLUSTERS.index("south")
    finally:
        scoped.close()


def test_the_command_line_ingests_every_discovered_cluster(
    four_clusters: Prometheus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from costsvc.cli import main

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("COSTSVC_DATABASE_URL", url)
    monkeypatch.setenv("COSTSVC_PROMETHEUS_URL", four_clusters.url)
    monkeypatch.setenv("COSTSVC_COST_MODEL", str(ROOT / "examples" / "cost-model.yaml"))
    monkeypatch.setenv("COSTSVC_CLUSTERS", '["*"]')
    assert main(["db", "upgrade"]) == 0
    window = ["--start", START.isoformat(), "--end", STOP.isoformat()]
    assert main(["ingest", *window]) == 0
    engine = make_engine(url)
    _every_hour_once(engine)
    engine.dispose()


def test_cluster_names_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from costsvc.kit.settings import Settings

    monkeypatch.setenv("COSTSVC_CLUSTERS", '["west", "east", "west"]')
    assert Settings().clusters == ["east", "west"]
    monkeypatch.setenv("COSTSVC_CLUSTERS", '["east\\"}"]')
    with pytest.raises(ValidationError, match="not a cluster name"):
        Settings()
