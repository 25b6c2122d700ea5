"""One bad hour never stops the rest: an hour that fails every time (an unpriced GPU model, an
unexpected error) is recorded, listed (API, CLI, /metrics) and retried with back-off while the
hours after it are ingested; the month it is in cannot be closed unless forced (audited). A GPU
is (cluster, UUID): the same UUID in two clusters is two GPUs, each billed exactly. NaN and
infinite samples (VictoriaMetrics' staleness markers) are no reading. A real Prometheus loaded
from OpenMetrics, SQLite and PostgreSQL.

History (2026-09-10, price 2.50 per H100-hour, configured cluster ``c9``; every series
carries its own ``cluster`` label):

10:00  GPU-SAME in cluster east: east/p (team e) holds it all hour       -> e 2.500000
       GPU-SAME in cluster west: west/p (team w) holds it 10:00-10:30    -> w 1.250000,
                                                                           west idle 1.250000
11:00  GPU-B200 in east, a model the cost model does not price           -> fails every time
12:00  GPU-SAME in east, idle all hour                                   -> idle 2.500000
13:00  GPU-SAME in east: east/p holds it 13:00-13:30, then a NaN sample (a staleness
       marker); utilisation 50 % with a +Inf sample at 13:45             -> e 1.25, used 0.625
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select

from costsvc.db.migrate import upgrade
from costsvc.db.models import Chargeback, GpuPresence, IngestRun
from costsvc.db.runs import failed_hour_states, failed_hours, watermark
from costsvc.ingest.prom import PrometheusReader, Series
from costsvc.ingest.run import ingest, pending_hours
from costsvc.ingest.serial import SOURCE_DOWN_AFTER
from costsvc.rules.cost_model import parse
from tests.conftest import require_binary
from tests.costsvc.apiserver import Clock, serve
from tests.costsvc.history_checks import assert_every_hour_adds_up
from tests.prom import Prometheus

H100 = "NVIDIA H100 80GB HBM3"
H1 = datetime(2026, 9, 10, 10, tzinfo=UTC)
H2, H3, H4 = (H1 + timedelta(hours=n) for n in (1, 2, 3))
T = {h: int(h.timestamp()) for h in (H1, H2, H3, H4)}
MODEL = parse(
    {
        "versions": [
            {
                "effective_from": "2026-09-01T00:00:00Z",
                "prices": [{"model": H100, "hourly": "2.50"}],
            }
        ]
    }
)
UNPRICED = "no price for GPU model(s): NVIDIA B200"
OCT2 = datetime(2026, 10, 2, 9, tzinfo=UTC)


def _history() -> str:
    fam: dict[str, list[str]] = {}

    def add(name: str, labels: dict[str, str], values: list[tuple[int, str]]) -> None:
        text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        fam.setdefault(name, []).extend(f"{name}{{{text}}} {v} {t}" for t, v in values)

    def every(start: int, stop: int, value: str = "1") -> list[tuple[int, str]]:
        return [(t, value) for t in range(start, stop, 15)]

    def gpu(cluster: str, uuid: str = "GPU-SAME", model: str = H100) -> dict[str, str]:
        return {"cluster": cluster, "gpu": "0", "UUID": uuid, "modelName": model,
                "Hostname": f"{cluster}-node"}  # fmt: skip

    def held(cluster: str) -> dict[str, str]:
        return {**gpu(cluster), "namespace": cluster, "pod": "p", "container": "main",
                "resource": "nvidia.com/gpu"}  # fmt: skip

    t1, t2, t3, t4 = T[H1], T[H2], T[H3], T[H4]
    add("gpu_device_up", gpu("east"), every(t1 - 60, t1 + 3600) + every(t3, t4 + 3600))
    add("gpu_device_up", gpu("west"), every(t1 - 60, t1 + 3600))
    add("gpu_device_up", gpu("east", "GPU-B200", "NVIDIA B200"), every(t2, t2 + 3600))
    add("gpu_allocation_share", held("east"), every(t1, t1 + 3600))
    add("gpu_allocation_share", held("west"), every(t1, t1 + 1800))
    # 13:00: held until 13:30, when the series ends with a NaN (as a staleness marker reads)
    add("gpu_allocation_share", held("east"), [*every(t4, t4 + 1800), (t4 + 1800, "NaN")])
    util = every(t4, t4 + 3600, "50")
    util[180] = (util[180][0], "+Inf")  # 13:45: no reading, the 50 before it holds
    add("DCGM_FI_DEV_GPU_UTIL", gpu("east"), util)
    for cluster, team in (("east", "e"), ("west", "w")):
        labels = {"cluster": cluster, "namespace": cluster, "pod": "p", "label_team": team}
        add("kube_pod_labels", labels, every(t1 - 60, t4 + 3600))
    out = []
    for name, lines in fam.items():
        out.append(f"# TYPE {name} gauge")
        out.extend(sorted(lines, key=lambda line: int(line.rsplit(" ", 1)[1])))
    out.append("# EOF")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    promtool, binary = require_binary("promtool"), require_binary("prometheus")
    work = tmp_path_factory.mktemp("failures")
    (work / "history.om").write_text(_history())
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(work / "history.om"),
         str(work / "data")],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    server = Prometheus(binary, work, [], extra_args=["--storage.tsdb.retention.time=100y"])
    try:
        server.wait_ready()
        server.until(lambda: server.query(f"gpu_device_up @ {T[H1] + 60}"), 30, "blocks loaded")
        yield server
    finally:
        server.stop()


def _money(url: str) -> dict[tuple[str, str], tuple[int, int, int, int]]:
    """(allocated, used, waste, idle) per (cluster, team) over the database's hours."""
    engine = create_engine(url)
    c = Chargeback
    query = select(
        c.cluster, c.team, func.sum(c.allocated), func.sum(c.used), func.sum(c.waste),
        func.sum(c.idle),
    ).group_by(c.cluster, c.team)  # fmt: skip
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    engine.dispose()
    return {(r[0], r[1]): (int(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in rows}


def _ingest(prom_url: str, db_url: str, hours: list[datetime]) -> Any:
    upgrade(db_url)
    engine = create_engine(db_url)
    reader = PrometheusReader(prom_url)
    try:
        return ingest(engine, reader, MODEL, "c9", hours)
    finally:
        reader.close()
        engine.dispose()


def test_same_uuid_in_two_clusters_is_two_gpus_billed_exactly(
    prom: Prometheus, db_url: str
) -> None:
    report = _ingest(prom.url, db_url, [H1])
    assert report.done == [H1], report.failed
    assert _money(db_url) == {
        ("east", "e"): (2_500_000, 0, 0, 0),  # no utilisation series: efficiency unknown
        ("west", "w"): (1_250_000, 0, 0, 0),
        ("west", "__idle__"): (0, 0, 0, 1_250_000),
    }
    engine = create_engine(db_url)
    with engine.connect() as conn:
        g = GpuPresence
        gpus = conn.execute(select(g.cluster, g.gpu_uuid, g.node, g.cost).order_by(g.cluster))
        assert [tuple(r) for r in gpus] == [
            ("east", "GPU-SAME", "east-node", 2_500_000),
            ("west", "GPU-SAME", "west-node", 2_500_000),
        ]
    engine.dispose()
    assert assert_every_hour_adds_up(db_url) == 2


def test_an_hour_that_always_fails_does_not_stop_the_hours_after_it(
    prom: Prometheus, db_url: str
) -> None:
    report = _ingest(prom.url, db_url, [H1, H2, H3, H4])
    assert report.done == [H1, H3, H4]
    assert report.failed == {H2: UNPRICED}
    engine = create_engine(db_url)
    assert watermark(engine, "c9") == H4  # past the failed hour
    assert failed_hours(engine, "c9") == [H2]
    # 13:00: held 13:00-13:30 at 50 % (the NaN ends the hold; the +Inf is no reading)
    east = _money(db_url)[("east", "e")]
    assert east == (2_500_000 + 1_250_000, 625_000, 625_000, 0)
    stop = H4 + timedelta(hours=1, minutes=5)
    now = datetime.now(UTC)
    # nothing new, and the failed hour waits for its back-off: 1 h, then 2 h, 4 h ... 24 h
    assert pending_hours(engine, "c9", stop, now=now) == []
    assert pending_hours(engine, "c9", stop, now=now + timedelta(hours=1)) == [H2]
    reader = PrometheusReader(prom.url)
    try:
        assert ingest(engine, reader, MODEL, "c9", [H2]).failed == {H2: UNPRICED}
    finally:
        reader.close()
    (state,) = failed_hour_states(engine)
    assert (state.cluster, state.hour, state.attempts, state.error) == ("c9", H2, 2, UNPRICED)
    later = state.last_attempt_at
    assert pending_hours(engine, "c9", stop, now=later + timedelta(hours=1)) == []
    assert pending_hours(engine, "c9", stop, now=later + timedelta(hours=2)) == [H2]
    # a new cost model (the price added) makes the retry due at once
    priced = parse(
        {
            "versions": [
                {
                    "effective_from": "2026-09-01T00:00:00Z",
                    "prices": [
                        {"model": H100, "hourly": "2.50"},
                        {"model": "NVIDIA B200", "hourly": "6.00"},
                    ],
                }
            ]
        }
    )
    from costsvc.db.runs import record_cost_model

    new_id = record_cost_model(engine, priced)
    assert pending_hours(engine, "c9", stop, now=later, model_id=new_id) == [H2]
    engine.dispose()
    assert assert_every_hour_adds_up(db_url) == 4


class _Faulty(PrometheusReader):
    """The real reader, with an unexpected error in one hour's data."""

    def __init__(self, url: str, bad: datetime) -> None:
        super().__init__(url)
        self.bad = bad

    def raw(self, selector: str, at: datetime, seconds: int) -> list[Series]:
        if self.bad <= at < self.bad + timedelta(hours=1):
            raise RuntimeError("a bug in this hour's data")
        return super().raw(selector, at, seconds)


def test_an_unexpected_error_fails_only_its_hour(prom: Prometheus, db_url: str) -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    reader = _Faulty(prom.url, H3)
    try:
        report = ingest(engine, reader, MODEL, "c9", [H1, H3, H4])
    finally:
        reader.close()
    assert report.done == [H1, H4]
    assert report.failed == {H3: "RuntimeError: a bug in this hour's data"}
    assert failed_hours(engine, "c9") == [H3]
    engine.dispose()


def test_a_source_that_is_down_stops_the_run_and_nothing_is_skipped(db_url: str) -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    dead = PrometheusReader("http://127.0.0.1:9", timeout=2)
    try:
        report = ingest(engine, dead, MODEL, "c9", [H1, H3, H4])
    finally:
        dead.close()
    assert report.done == [] and list(report.failed) == [H1, H3][:SOURCE_DOWN_AFTER]
    with engine.connect() as conn:  # 13:00 was not tried: it is still after the watermark
        assert conn.execute(select(func.count()).select_from(IngestRun)).scalar() == 2
    assert watermark(engine, "c9") is None
    engine.dispose()


@pytest.fixture
def failed_db(prom: Prometheus, db_url: str) -> str:
    report = _ingest(prom.url, db_url, [H1, H2, H3, H4])
    assert report.failed == {H2: UNPRICED}
    return db_url


def test_failed_hours_are_listed_counted_and_block_the_close(
    failed_db: str, tmp_path: Path
) -> None:
    with serve(failed_db, Clock(OCT2), ["e"]) as api:
        r = api.get("/v1/ingest/failed-hours", "finance")
        assert r.status_code == 200, r.text
        (row,) = r.json()
        assert (row["cluster"], row["hour"], row["attempts"], row["error"]) == (
            "c9", "2026-09-10T11:00:00Z", 1, UNPRICED
        )  # fmt: skip
        first = datetime.fromisoformat(row["last_attempt_at"])
        assert datetime.fromisoformat(row["next_retry_at"]) - first == timedelta(hours=1)
        assert api.get("/v1/ingest/failed-hours", "admin").json() == r.json()
        assert api.get("/v1/ingest/failed-hours", "team:e").status_code == 403
        assert api.get("/v1/ingest/failed-hours", None).status_code == 401

        exposition = api.get("/metrics", "admin").text
        assert 'costsvc_ingest_failed_hours{cluster="c9"} 1.0' in exposition

        fin = api.auth("finance")
        refused = api.http.post("/v1/months/2026-09/close", headers=fin)
        assert refused.status_code == 409
        assert "1 failed hour(s): c9 2026-09-10T11:00:00Z;" in refused.text
        assert "c9 2026-09-10T14:00:00Z..2026-09-30T23:00:00Z (490 hours)" in refused.text
        assert not api.get("/v1/months/2026-09", "finance").json()["closed"]
        forced = api.http.post("/v1/months/2026-09/close", params={"force": "1"}, headers=fin)
        assert forced.status_code == 200 and forced.json()["closed"], forced.text
        entry = api.get("/v1/audit", "admin").json()[0]
        assert (entry["action"], entry["actor"], entry["detail"]["forced"]) == (
            "month.close", "finance", True
        )  # fmt: skip
        assert entry["detail"]["skipped"] == [
            {"cluster": "c9", "state": "failed", "first": "2026-09-10T11:00:00Z",
             "last": "2026-09-10T11:00:00Z", "hours": 1},
            {"cluster": "c9", "state": "missing", "first": "2026-09-10T14:00:00Z",
             "last": "2026-09-30T23:00:00Z", "hours": 490},
        ]  # fmt: skip

    env = {**os.environ, "COSTSVC_DATABASE_URL": failed_db}
    status = subprocess.run(
        [sys.executable, "-m", "costsvc.cli", "ingest", "--status"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert status.returncode == 1, status.stderr
    assert "cluster c9: ingested up to 2026-09-10T13:00:00Z" in status.stdout
    assert "c9\t2026-09-10T11:00:00Z\t1\t" in status.stdout and UNPRICED in status.stdout


def test_the_cli_refuses_to_close_a_month_with_failed_hours(failed_db: str) -> None:
    env = {**os.environ, "COSTSVC_DATABASE_URL": failed_db}
    cli = [sys.executable, "-m", "costsvc.cli", "close", "--month", "2026-09", "--as", "ops"]
    refused = subprocess.run(cli, env=env, capture_output=True, text=True, check=False)
    assert refused.returncode == 3, refused.stderr
    assert "c9 2026-09-10T11:00:00Z" in refused.stderr and "failed hour" in refused.stderr
    engine = create_engine(failed_db)
    from costsvc.months.repository import month_close

    assert month_close(engine, "2026-09") is None
    forced = subprocess.run([*cli, "--force"], env=env, capture_output=True, text=True, check=False)
    assert forced.returncode == 0 and "closed 2026-09" in forced.stdout, forced.stderr
    closed = month_close(engine, "2026-09")
    assert closed is not None and closed.closed_by == "ops"
    engine.dispose()


def test_the_failed_hours_gauge_is_zero_once_the_hour_is_done(
    prom: Prometheus, db_url: str
) -> None:
    _ingest(prom.url, db_url, [H1, H2])
    engine = create_engine(db_url)
    # the operator adds the price: the hour is done and no longer listed
    priced = parse(
        {
            "versions": [
                {
                    "effective_from": "2026-09-01T00:00:00Z",
                    "prices": [
                        {"model": H100, "hourly": "2.50"},
                        {"model": "NVIDIA B200", "hourly": "6.00"},
                    ],
                }
            ]
        }
    )
    reader = PrometheusReader(prom.url)
    try:
        assert ingest(engine, reader, priced, "c9", [H2]).done == [H2]
    finally:
        reader.close()
    assert failed_hour_states(engine) == []
    engine.dispose()
    with serve(db_url, Clock(OCT2)) as api:
        assert api.get("/v1/ingest/failed-hours", "finance").json() == []
        assert 'costsvc_ingest_failed_hours{cluster="c9"} 0.0' in api.get("/metrics", "admin").text
    status = subprocess.run(
        [sys.executable, "-m", "costsvc.cli", "ingest", "--status"],
        env={**os.environ, "COSTSVC_DATABASE_URL": db_url},
        capture_output=True,
        text=True,
        check=False,
    )
    assert status.returncode == 0 and "no failed hours" in status.stdout, status.stderr
    idle = {k[0]: v[3] for k, v in _money(db_url).items() if k[1] == "__idle__"}
    assert idle == {"west": 1_250_000, "east": 6_000_000}  # the B200 nobody held, at 6.00


def test_a_run_in_progress_is_a_failure_only_once_it_is_stale(db_url: str) -> None:
    """Another process's ingest of an hour is not a failed hour; a run killed mid-hour is,
    once it has been running far longer than any hour takes."""
    from sqlalchemy import update

    from costsvc.db.runs import RUNNING_GRACE, record_cost_model, start_run

    upgrade(db_url)
    engine = create_engine(db_url)
    run = start_run(engine, "c9", H1, "ingest", record_cost_model(engine, MODEL))
    assert failed_hour_states(engine) == []
    long_ago = datetime.now(UTC) - RUNNING_GRACE - timedelta(minutes=1)
    with engine.begin() as conn:
        conn.execute(update(IngestRun).where(IngestRun.id == run).values(started_at=long_ago))
    assert [(f.hour, f.attempts, f.error) for f in failed_hour_states(engine)] == [(H1, 1, None)]
    engine.dispose()
