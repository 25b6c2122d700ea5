"""Ground truth end to end: the synthetic history of history.py in a real Prometheus,
ingested into SQLite and PostgreSQL, compared with money computed by hand (see history.py)."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select

from costsvc.db.migrate import upgrade
from costsvc.db.models import Chargeback, GpuPresence, IngestRun, UsageFact
from costsvc.db.runs import watermark
from costsvc.ingest.prom import PrometheusReader
from costsvc.ingest.run import complete_hours, ingest
from costsvc.rules.cost_model import parse
from tests.costsvc.history import H100, HOUR, HOUR2, MODEL, TWELFTH, ingest_with
from tests.costsvc.history import model as _model
from tests.costsvc.history_checks import assert_every_hour_adds_up, by_team, tables
from tests.prom import Prometheus


def test_ground_truth(prometheus: Prometheus, db_url: str) -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    reader = PrometheusReader(prometheus.url)
    try:
        report = ingest(engine, reader, MODEL, "c1", [HOUR])
    finally:
        reader.close()
    assert report.done == [HOUR] and not report.failed
    # search: a uses 1080 of its 1800 held GPU-seconds (0.3 of the GPU vs 0.5 held) -> 0.75 of
    # 1.25; b 360 of 900 -> 0.25 of 0.625. GPU-C has no utilisation series: its 1.666667 is
    # neither used nor waste (efficiency unknown, not 0 %): allocated - used - waste.
    assert by_team(db_url) == {
        "nlp": (1_250_000 + 1_666_667, 1_000_000, 250_000, 0),
        "search": (1_875_000, 750_000 + 250_000, 500_000 + 375_000, 0),
        "__idle__": (0, 0, 0, 1_250_000 + 625_000 + 833_333),
    }
    fleet = sum(a + i for a, _, _, i in by_team(db_url).values())
    assert fleet == 7_500_000  # attributed + idle = fleet cost, to the micro-unit
    assert assert_every_hour_adds_up(db_url) == 1
    assert watermark(engine, "c1") == HOUR
    engine.dispose()


def test_rerun_replaces_the_hour_identically(prometheus: Prometheus, db_url: str) -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    reader = PrometheusReader(prometheus.url)

    def snapshot() -> list[Any]:
        with engine.connect() as conn:
            return [
                sorted(tuple(r)[1:] for r in conn.execute(select(t)).all())
                for t in (Chargeback, UsageFact, GpuPresence)
            ]

    try:
        ingest(engine, reader, MODEL, "c1", [HOUR])
        first = snapshot()
        ingest(engine, reader, MODEL, "c1", [HOUR])
        assert snapshot() == first
    finally:
        reader.close()
        engine.dispose()


def test_prometheus_down_leaves_nothing_partial_and_is_retried(
    prometheus: Prometheus, db_url: str
) -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    dead = PrometheusReader("http://127.0.0.1:9", timeout=2)
    report = ingest(engine, dead, MODEL, "c1", [HOUR])
    dead.close()
    assert report.done == [] and HOUR in report.failed
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Chargeback)).scalar() == 0
        assert conn.execute(select(IngestRun.status)).scalars().all() == ["failed"]
    assert watermark(engine, "c1") is None
    reader = PrometheusReader(prometheus.url)
    assert ingest(engine, reader, MODEL, "c1", [HOUR]).done == [HOUR]  # the retry
    reader.close()
    engine.dispose()


def test_complete_hours() -> None:
    start = datetime(2026, 11, 10, 4, 30, tzinfo=UTC)
    end = datetime(2026, 11, 10, 7, 10, tzinfo=UTC)
    assert complete_hours(start, end) == [datetime(2026, 11, 10, h, tzinfo=UTC) for h in (5, 6)]


def cli_env(prometheus: Prometheus, db_url: str, tmp: Path) -> dict[str, str]:
    """Environment for the gpu-costsvc command against the history Prometheus."""
    model = tmp / "cost.yaml"
    model.write_text(
        f'versions: [{{effective_from: "2026-11-01T00:00:00Z", prices: '
        f'[{{model: "{H100}", hourly: "2.50"}}]}}]\n'
    )
    return {
        "COSTSVC_DATABASE_URL": db_url,
        "COSTSVC_PROMETHEUS_URL": prometheus.url,
        "COSTSVC_COST_MODEL": str(model),
        "COSTSVC_CLUSTER": "c1",
    }


def test_cli_ingest_backfills_then_resumes_from_the_watermark(
    prometheus: Prometheus, db_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import os
    import sys

    from tests.procs import ROOT

    env = {**os.environ, **cli_env(prometheus, db_url, tmp_path_factory.mktemp("m"))}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "costsvc.cli", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    assert cli("db", "upgrade").returncode == 0
    done = cli("ingest", "--start", "2026-11-10T05:00:00Z", "--end", "2026-11-10T06:00:00Z")
    assert done.returncode == 0, done.stderr
    assert "ingested 1 hour(s)" in done.stdout
    assert sum(a + i for a, _, _, i in by_team(db_url).values()) == 7_500_000
    again = cli("ingest", "--end", "2026-11-10T06:30:00Z")  # from the watermark: nothing new
    assert again.returncode == 0 and "ingested 0 hour(s)" in again.stdout


def test_two_ingesters_at_once_never_double_count(prometheus: Prometheus, db_url: str) -> None:
    import threading

    upgrade(db_url)
    errors: list[BaseException] = []

    def one() -> None:
        engine = create_engine(db_url, connect_args={"timeout": 30} if "sqlite" in db_url else {})
        reader = PrometheusReader(prometheus.url)
        try:
            for _ in range(3):
                assert ingest(engine, reader, MODEL, "c1", [HOUR]).done == [HOUR]
        except BaseException as exc:
            errors.append(exc)
        finally:
            reader.close()
            engine.dispose()

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert sum(a + i for a, _, _, i in by_team(db_url).values()) == 7_500_000
    assert_every_hour_adds_up(db_url)


def test_kill_9_mid_backfill_then_rerun_gives_identicaltables(
    prometheus: Prometheus, db_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import os
    import signal
    import sys

    from tests.procs import ROOT, Process

    reference = f"sqlite:///{tmp_path_factory.mktemp('ref') / 'ref.db'}"
    span = ("--start", "2026-11-10T03:00:00Z", "--end", "2026-11-10T09:00:00Z")

    def env(url: str) -> dict[str, str]:
        return cli_env(prometheus, url, tmp_path_factory.mktemp("m"))

    for url in (reference, db_url):
        upgrade(url)
    clean = subprocess.run(
        [sys.executable, "-m", "costsvc.cli", "ingest", *span],
        cwd=ROOT,
        env={**os.environ, **env(reference)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert clean.returncode == 0, clean.stderr
    victim = Process([sys.executable, "-m", "costsvc.cli", "ingest", *span], env=env(db_url))
    victim.wait_for(r"2/6 hours", timeout=60)  # some hours are in, the rest not yet
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(10)
    rerun = subprocess.run(
        [sys.executable, "-m", "costsvc.cli", "ingest", *span],
        cwd=ROOT,
        env={**os.environ, **env(db_url)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert rerun.returncode == 0, rerun.stderr
    assert tables(db_url) == tables(reference)
    assert assert_every_hour_adds_up(db_url) >= 3  # 05:00, 06:00 and 07:00 (two clusters)


@pytest.mark.parametrize(
    ("basis", "expected"),
    # compute: x holds 3/7 + 1/7 of 7.00 = 4.00, y 2/7 = 2.00, GI 10 idle 1.00
    # memory:  x holds 4/8 + 1/8 of 7.00 = 4.375, y 2/8 = 1.75, idle 0.875
    # spot GPU: z holds it all hour at 2.50 - 60 % = 1.00
    # relabelled GPU-R: all of its 2.50 to "after", nothing to "before"
    [
        (
            "compute",
            {
                "x": 4_000_000,
                "y": 2_000_000,
                "z": 1_000_000,
                "after": 2_500_000,
                "__idle__": 1_000_000,
            },
        ),
        (
            "memory",
            {
                "x": 4_375_000,
                "y": 1_750_000,
                "z": 1_000_000,
                "after": 2_500_000,
                "__idle__": 875_000,
            },
        ),
    ],
)
def test_mig_layout_and_node_pools(
    prometheus: Prometheus, db_url: str, basis: str, expected: dict[str, int]
) -> None:
    model = parse(
        {
            "policies": {"mig_share_basis": basis},
            "versions": [
                {
                    "effective_from": "2026-11-01T00:00:00Z",
                    "prices": [
                        {"model": H100, "hourly": "2.50"},
                        {"model": H100, "node_pool": "mig-pool", "hourly": "7.00"},
                        {
                            "model": H100,
                            "node_pool": "spot",
                            "pricing": "spot",
                            "hourly": "2.50",
                            "discount": "0.6",
                        },
                    ],
                }
            ],
        }
    )
    upgrade(db_url)
    engine = create_engine(db_url)
    reader = PrometheusReader(prometheus.url)
    try:
        assert ingest(engine, reader, model, "c1", [HOUR2]).done == [HOUR2]
    finally:
        reader.close()
        engine.dispose()
    got = {team: a + i for team, (a, _, _, i) in by_team(db_url).items()}
    assert got == expected
    assert_every_hour_adds_up(db_url)
    # GR engine active 0.5 on the held instances: half of the allocated cost was used
    assert by_team(db_url)["x"][1] == expected["x"] // 2


def test_usage_policy_moves_money_between_teams_only(prometheus: Prometheus, db_url: str) -> None:
    # GPU-B's held replicas cost 1.875 (a 1.25 + b 0.625); by SM time 0.3 : 0.1 -> 1.40625 and
    # 0.46875. Both search pods: the team total and the idle line are unchanged.
    ingest_with(prometheus.url, db_url, _model(shared_gpu_policy="usage"), [HOUR])
    engine = create_engine(db_url)
    with engine.connect() as conn:
        pods = dict(conn.execute(select(Chargeback.pod, Chargeback.allocated)).all())
    engine.dispose()
    assert (pods["a"], pods["b"]) == (1_406_250, 468_750)
    teams = by_team(db_url)
    assert teams["search"][0] == 1_875_000
    assert teams["__idle__"][3] == 2_708_333


@pytest.mark.parametrize(
    ("policy", "idle"),
    # idle 2.708333 spread over the lines by allocated cost: p 1.25, g 1.666667, a 1.25,
    # b 0.625 of 4.791667 -> 706521.6, 942029.0, 706521.6, 353260.8; largest remainder gives
    # p 706522, g 942029, a 706521, b 353261 -> nlp 1648551, search 1059782
    [
        ("weighted", {"nlp": 1_648_551, "search": 1_059_782}),
        ("even", {"nlp": 1_354_167, "search": 1_354_166}),
    ],  # an equal part per team
)
def test_idle_policies_through_ingestion(
    prometheus: Prometheus, db_url: str, policy: str, idle: dict[str, int]
) -> None:
    ingest_with(prometheus.url, db_url, _model(idle_policy=policy), [HOUR])
    teams = by_team(db_url)
    assert {t: v[3] for t, v in teams.items()} == idle
    assert sum(a + i for a, _, _, i in teams.values()) == 7_500_000
    assert_every_hour_adds_up(db_url)


def test_price_change_and_back_dated_reprice(prometheus: Prometheus, db_url: str) -> None:
    # a new price (3.00) from 06:00: the 05:00 hour keeps 2.50, the 06:00 hour takes 3.00
    changed = parse(
        {
            "versions": [
                {
                    "effective_from": "2026-11-01T00:00:00Z",
                    "prices": [{"model": H100, "hourly": "2.50"}],
                },
                {
                    "effective_from": "2026-11-10T06:00:00Z",
                    "prices": [{"model": H100, "hourly": "3.00"}],
                },
            ]
        }
    )
    ingest_with(prometheus.url, db_url, changed, [HOUR])
    assert sum(a + i for a, _, _, i in by_team(db_url).values()) == 7_500_000  # 3 GPUs x 2.50
    # back-dated to 05:00 and the hour ingested again: repriced, exactly that hour
    back = parse(
        {
            "versions": [
                {
                    "effective_from": "2026-11-01T00:00:00Z",
                    "prices": [{"model": H100, "hourly": "2.50"}],
                },
                {
                    "effective_from": "2026-11-10T05:00:00Z",
                    "prices": [{"model": H100, "hourly": "3.00"}],
                },
            ]
        }
    )
    ingest_with(prometheus.url, db_url, back, [HOUR])
    teams = by_team(db_url)
    assert sum(a + i for a, _, _, i in teams.values()) == 9_000_000  # 3 GPUs x 3.00
    assert teams["nlp"][0] == 1_500_000 + 2_000_000  # p's half hour + g's 40 minutes at 3.00


def test_a_failed_hour_behind_the_watermark_is_retried(prometheus: Prometheus, db_url: str) -> None:
    from costsvc.db.runs import failed_hours
    from costsvc.ingest.run import pending_hours

    ingest_with(prometheus.url, db_url, MODEL, [HOUR2])  # the watermark is at 06:00
    engine = create_engine(db_url)
    dead = PrometheusReader("http://127.0.0.1:9", timeout=2)
    assert HOUR in ingest(engine, dead, MODEL, "c1", [HOUR]).failed  # a backfill that failed
    dead.close()
    assert watermark(engine, "c1") == HOUR2
    assert failed_hours(engine, "c1") == [HOUR]
    stop = datetime(2026, 11, 10, 6, 30, tzinfo=UTC)
    now = datetime.now(UTC)
    assert pending_hours(engine, "c1", stop, now=now) == []  # it failed just now: back-off
    later = now + timedelta(hours=1)  # the first retry is due an hour after the failure
    assert pending_hours(engine, "c1", stop, now=later) == [HOUR]  # nothing new after 06:00
    reader = PrometheusReader(prometheus.url)
    retry = pending_hours(engine, "c1", stop, now=later)
    assert ingest(engine, reader, MODEL, "c1", retry).done == [HOUR]
    reader.close()
    assert failed_hours(engine, "c1") == []
    engine.dispose()
    assert_every_hour_adds_up(db_url)


def test_an_unpriced_gpu_model_fails_the_hour_naming_it(
    prometheus: Prometheus, db_url: str
) -> None:
    l4 = {"model": "NVIDIA L4", "hourly": "0.80"}
    only_l4 = parse({"versions": [{"effective_from": "2026-11-01T00:00:00Z", "prices": [l4]}]})
    upgrade(db_url)
    engine = create_engine(db_url)
    reader = PrometheusReader(prometheus.url)
    report = ingest(engine, reader, only_l4, "c1", [HOUR])
    reader.close()
    assert report.failed == {HOUR: f"no price for GPU model(s): {H100}"}
    with engine.connect() as conn:
        for table in (Chargeback, UsageFact, GpuPresence):  # nothing priced at $0
            assert conn.execute(select(func.count()).select_from(table)).scalar() == 0
        assert conn.execute(select(IngestRun.status, IngestRun.error)).one() == (
            "failed",
            f"no price for GPU model(s): {H100}",
        )
    engine.dispose()


def test_the_node_comes_from_hostname_as_well_as_hostname(
    prometheus: Prometheus, db_url: str
) -> None:
    """dcgm-exporter's main branch (and gpu-exporter --hostname-label hostname) writes the host
    label as ``hostname``: the GPU's node is read from either."""
    ingest_with(prometheus.url, db_url, MODEL, [TWELFTH])
    engine = create_engine(db_url)
    with engine.connect() as conn:
        nodes = dict(conn.execute(select(GpuPresence.gpu_uuid, GpuPresence.node)).all())
        idle = conn.execute(select(Chargeback.node).where(Chargeback.team == "__idle__")).all()
    engine.dispose()
    assert nodes == {"GPU-L": "node-lower"}
    assert [n for (n,) in idle] == ["node-lower"]
