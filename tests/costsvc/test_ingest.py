"""Ground truth end to end: synthetic history written as OpenMetrics, loaded into a real
Prometheus with promtool, ingested into SQLite and PostgreSQL, compared with money computed
by hand (price 2.50 per GPU-hour, hour 2026-11-10 05:00 UTC):

GPU-A  pod ml/p (team nlp) holds it 05:00-05:30, busy 80 %  -> allocated 1.250000, used 1.000000
GPU-B  time-sliced x4: search/a holds 2 replicas, search/b 1, one unheld (equal policy);
       no pod labels: the namespace's team label applies -> a 1.250000, b 0.625000
GPU-C  ml/g (team nlp) holds it, but every series has a 20-minute gap 05:20-05:40
       -> allocated 2.50 x 40/60 = 1.666667; the GPU existed all hour
idle (separate) = 1.25 + 0.625 + 0.833333 = 2.708333; fleet = 3 x 2.50 = 7.500000
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select

from costsvc.costmodel import parse
from costsvc.db.migrate import upgrade
from costsvc.db.models import Chargeback, GpuPresence, IngestRun, UsageFact
from costsvc.ingest.prom import PrometheusReader
from costsvc.ingest.run import complete_hours, ingest, watermark
from tests.conftest import require_binary
from tests.prom import Prometheus

HOUR = datetime(2026, 11, 10, 5, tzinfo=UTC)
T0 = int(HOUR.timestamp())
HOUR2 = datetime(2026, 11, 10, 6, tzinfo=UTC)
T1 = int(HOUR2.timestamp())
H100 = "NVIDIA H100 80GB HBM3"
MODEL = parse({"versions": [{"effective_from": "2026-11-01T00:00:00Z",
                             "prices": [{"model": H100, "hourly": "2.50"}]}]})  # fmt: skip


def series(name: str, labels: dict[str, str], value: float, start: int, stop: int) -> list[str]:
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return [f"{name}{{{text}}} {value} {t}" for t in range(start, stop, 15)]


def gpu_labels(uuid: str) -> dict[str, str]:
    return {"gpu": "0", "UUID": uuid, "modelName": H100, "Hostname": f"node-{uuid[-1]}"}


def history() -> str:
    fam: dict[str, list[str]] = {}

    def add(name: str, labels: dict[str, str], value: float, start: int, stop: int) -> None:
        fam.setdefault(name, []).extend(series(name, labels, value, start, stop))

    before, end = T0 - 60, T0 + 3600
    for uuid in ("GPU-A", "GPU-B"):
        add("gpu_device_up", gpu_labels(uuid), 1, before, end)
    a = gpu_labels("GPU-A")
    add("gpu_allocation_share", {**a, "namespace": "ml", "pod": "p", "container": "main",
                                 "resource": "nvidia.com/gpu"}, 1, T0, T0 + 1800)  # fmt: skip
    add("DCGM_FI_DEV_GPU_UTIL", a, 80, before, end)
    b = gpu_labels("GPU-B")
    for pod, share, sm in (("a", 0.5, 0.3), ("b", 0.25, 0.1)):
        holder = {**b, "namespace": "search", "pod": pod, "container": "main"}
        add("gpu_allocation_share", {**holder, "resource": "nvidia.com/gpu.shared"}, share,
            before, end)  # fmt: skip
        add("gpu_container_sm_utilization_ratio", holder, sm, before, end)
    c = gpu_labels("GPU-C")
    for start, stop in ((before, T0 + 1200), (T0 + 2400, end)):  # a 20-minute gap
        add("gpu_device_up", c, 1, start, stop)
        add("gpu_allocation_share", {**c, "namespace": "ml", "pod": "g", "container": "main",
                                     "resource": "nvidia.com/gpu"}, 1, start, stop)  # fmt: skip
    for pod in ("p", "g"):
        labels = {"namespace": "ml", "pod": pod, "label_team": "nlp", "label_project": "llm",
                  "label_stage": "prod"}  # fmt: skip
        add("kube_pod_labels", labels, 1, before, end)
    add("kube_namespace_labels", {"namespace": "search", "label_team": "search"}, 1, before, end)

    # hour 06:00: a MIG H100 on node pool "mig-pool" (7.00/h) as 3g.40gb + 2g.20gb + 2 x 1g.10gb
    # (x holds GI 2 and 9, y holds GI 3, GI 10 unheld), and a spot H100 (2.50 - 60 % = 1.00)
    s1, e1 = T1, T1 + 3600  # nothing of it may fall into the 05:00 hour
    m = {**gpu_labels("GPU-M"), "node_pool": "mig-pool"}
    add("gpu_device_up", m, 1, s1, e1)
    layout = (("2", "3g.40gb", 3, 4, "x"), ("3", "2g.20gb", 2, 2, "y"),
              ("9", "1g.10gb", 1, 1, "x2"), ("10", "1g.10gb", 1, 1, None))  # fmt: skip
    for gi, profile, compute, memory, pod in layout:
        inst = {**gpu_labels("GPU-M"), "GPU_I_ID": gi, "GPU_I_PROFILE": profile}
        add("gpu_mig_instance_info", {**inst, "compute_slices": str(compute),
                                      "memory_slices": str(memory)}, 1, s1, e1)  # fmt: skip
        if pod:
            holder = {**inst, "namespace": "mig", "pod": pod, "container": "main",
                      "resource": f"nvidia.com/mig-{profile}"}  # fmt: skip
            add("gpu_allocation_share", holder, compute / 7, s1, e1)
            add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", inst, 0.5, s1, e1)
    spot = {**gpu_labels("GPU-S"), "node_pool": "spot"}
    add("gpu_device_up", spot, 1, s1, e1)
    add("gpu_allocation_share", {**spot, "namespace": "mig", "pod": "z", "container": "main",
                                 "resource": "nvidia.com/gpu"}, 1, s1, e1)  # fmt: skip
    for pod, team in (("x", "x"), ("x2", "x"), ("y", "y"), ("z", "z")):
        add("kube_pod_labels", {"namespace": "mig", "pod": pod, "label_team": team}, 1, s1, e1)
    # GPU-R is held by mig/r, relabelled from team "before" to "after" at 06:30: the labels it
    # had last in the hour decide
    r = gpu_labels("GPU-R")
    add("gpu_device_up", r, 1, s1, e1)
    add("gpu_allocation_share", {**r, "namespace": "mig", "pod": "r", "container": "main",
                                 "resource": "nvidia.com/gpu"}, 1, s1, e1)  # fmt: skip
    add("kube_pod_labels", {"namespace": "mig", "pod": "r", "label_team": "before"}, 1, s1,
        T1 + 1800)  # fmt: skip
    add("kube_pod_labels", {"namespace": "mig", "pod": "r", "label_team": "after"}, 1, T1 + 1800,
        e1)  # fmt: skip
    out = []
    for name, lines in fam.items():
        out.append(f"# TYPE {name} gauge")
        out.extend(lines)
    out.append("# EOF")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    promtool, binary = require_binary("promtool"), require_binary("prometheus")
    work = tmp_path_factory.mktemp("history")
    (work / "history.om").write_text(history())
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics",
                    str(work / "history.om"), str(work / "data")],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    prom = Prometheus(binary, work, [], extra_args=["--storage.tsdb.retention.time=100y"])
    try:
        prom.wait_ready()
        prom.until(lambda: prom.query(f"gpu_device_up @ {T0 + 60}"), 30, "blocks loaded")
        yield prom
    finally:
        prom.stop()


def by_team(url: str) -> dict[str, tuple[int, int, int, int]]:
    engine = create_engine(url)
    with engine.connect() as conn:
        c = Chargeback
        query = select(c.team, func.sum(c.allocated), func.sum(c.used), func.sum(c.waste),
                       func.sum(c.idle)).group_by(c.team)  # fmt: skip
        rows = conn.execute(query).all()
    engine.dispose()
    return {r[0]: (int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows}


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
    # 1.25; b 360 of 900 -> 0.25 of 0.625. GPU-C has no utilisation series: all waste.
    assert by_team(db_url) == {
        "nlp": (1_250_000 + 1_666_667, 1_000_000, 250_000 + 1_666_667, 0),
        "search": (1_875_000, 750_000 + 250_000, 500_000 + 375_000, 0),
        "__idle__": (0, 0, 0, 1_250_000 + 625_000 + 833_333),
    }
    fleet = sum(a + i for a, _, _, i in by_team(db_url).values())
    assert fleet == 7_500_000  # attributed + idle = fleet cost, to the micro-unit
    assert watermark(engine, "c1") == HOUR
    engine.dispose()


def test_rerun_replaces_the_hour_identically(prometheus: Prometheus, db_url: str) -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    reader = PrometheusReader(prometheus.url)

    def snapshot() -> list[Any]:
        with engine.connect() as conn:
            return [sorted(tuple(r)[1:] for r in conn.execute(select(t)).all())
                    for t in (Chargeback, UsageFact, GpuPresence)]  # fmt: skip

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
    model.write_text(f'versions: [{{effective_from: "2026-11-01T00:00:00Z", prices: '
                     f'[{{model: "{H100}", hourly: "2.50"}}]}}]\n')  # fmt: skip
    return {"COSTSVC_DATABASE_URL": db_url, "COSTSVC_PROMETHEUS_URL": prometheus.url,
            "COSTSVC_COST_MODEL": str(model), "COSTSVC_CLUSTER": "c1"}  # fmt: skip


def test_cli_ingest_backfills_then_resumes_from_the_watermark(
    prometheus: Prometheus, db_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import os
    import sys

    from tests.procs import ROOT

    env = {**os.environ, **cli_env(prometheus, db_url, tmp_path_factory.mktemp("m"))}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "costsvc.cli", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip

    assert cli("db", "upgrade").returncode == 0
    done = cli("ingest", "--start", "2026-11-10T05:00:00Z", "--end", "2026-11-10T06:00:00Z")
    assert done.returncode == 0, done.stderr
    assert "ingested 1 hour(s)" in done.stdout
    assert sum(a + i for a, _, _, i in by_team(db_url).values()) == 7_500_000
    again = cli("ingest", "--end", "2026-11-10T06:30:00Z")  # from the watermark: nothing new
    assert again.returncode == 0 and "ingested 0 hour(s)" in again.stdout


def _utc(value: Any) -> Any:
    if isinstance(value, datetime):  # SQLite gives naive UTC, PostgreSQL aware
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value


def _tables(url: str) -> list[Any]:
    engine = create_engine(url)
    with engine.connect() as conn:
        out = [sorted(tuple(_utc(v) for v in tuple(r)[1:]) for r in conn.execute(select(t)).all())
               for t in (Chargeback, UsageFact, GpuPresence)]  # fmt: skip
    engine.dispose()
    return out


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


def test_kill_9_mid_backfill_then_rerun_gives_identical_tables(
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
    clean = subprocess.run([sys.executable, "-m", "costsvc.cli", "ingest", *span], cwd=ROOT,
                           env={**os.environ, **env(reference)}, capture_output=True,
                           text=True, timeout=120, check=False)  # fmt: skip
    assert clean.returncode == 0, clean.stderr
    victim = Process([sys.executable, "-m", "costsvc.cli", "ingest", *span], env=env(db_url))
    victim.wait_for(r"2/6 hours", timeout=60)  # some hours are in, the rest not yet
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(10)
    rerun = subprocess.run([sys.executable, "-m", "costsvc.cli", "ingest", *span], cwd=ROOT,
                           env={**os.environ, **env(db_url)}, capture_output=True, text=True,
                           timeout=120, check=False)  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr
    assert _tables(db_url) == _tables(reference)


@pytest.mark.parametrize(
    ("basis", "expected"),
    # compute: x holds 3/7 + 1/7 of 7.00 = 4.00, y 2/7 = 2.00, GI 10 idle 1.00
    # memory:  x holds 4/8 + 1/8 of 7.00 = 4.375, y 2/8 = 1.75, idle 0.875
    # spot GPU: z holds it all hour at 2.50 - 60 % = 1.00
    # relabelled GPU-R: all of its 2.50 to "after", nothing to "before"
    [("compute", {"x": 4_000_000, "y": 2_000_000, "z": 1_000_000, "after": 2_500_000,
                  "__idle__": 1_000_000}),
     ("memory", {"x": 4_375_000, "y": 1_750_000, "z": 1_000_000, "after": 2_500_000,
                 "__idle__": 875_000})],
)  # fmt: skip
def test_mig_layout_and_node_pools(
    prometheus: Prometheus, db_url: str, basis: str, expected: dict[str, int]
) -> None:
    model = parse({"policies": {"mig_share_basis": basis}, "versions": [
        {"effective_from": "2026-11-01T00:00:00Z", "prices": [
            {"model": H100, "hourly": "2.50"},
            {"model": H100, "node_pool": "mig-pool", "hourly": "7.00"},
            {"model": H100, "node_pool": "spot", "pricing": "spot", "hourly": "2.50",
             "discount": "0.6"}]}]})  # fmt: skip
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
    # GR engine active 0.5 on the held instances: half of the allocated cost was used
    assert by_team(db_url)["x"][1] == expected["x"] // 2


def test_label_history_from_the_api_wins_and_outlives_the_pod(
    prometheus: Prometheus, db_url: str
) -> None:
    from costsvc.k8slabels import LabelHistory

    upgrade(db_url)
    engine = create_engine(db_url)
    history = LabelHistory(engine, "c1")
    # ml/p was labelled team=api-team from the 1st, and deleted at 05:30, mid-hour
    history.observe_pod("uid-p", "ml", "p", {"team": "api-team", "project": "llm"},
                        datetime(2026, 11, 1, tzinfo=UTC))  # fmt: skip
    history.close_pod("uid-p", HOUR.replace(minute=30))
    reader = PrometheusReader(prometheus.url)
    try:
        assert ingest(engine, reader, MODEL, "c1", [HOUR]).done == [HOUR]
    finally:
        reader.close()
        engine.dispose()
    teams = by_team(db_url)
    assert teams["api-team"][0] == 1_250_000  # p's half hour, charged to its team
    assert teams["nlp"][0] == 1_666_667  # only g (labelled by kube-state-metrics) is left


def _ingest_with(prometheus: Prometheus, db_url: str, model: Any, hours: list[datetime]) -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    reader = PrometheusReader(prometheus.url)
    try:
        assert ingest(engine, reader, model, "c1", hours).done == hours
    finally:
        reader.close()
        engine.dispose()


def _model(price: str = "2.50", **policies: str) -> Any:
    return parse(
        {
            "policies": policies,
            "versions": [
                {
                    "effective_from": "2026-11-01T00:00:00Z",
                    "prices": [{"model": H100, "hourly": price}],
                }
            ],
        }
    )


def test_usage_policy_moves_money_between_teams_only(prometheus: Prometheus, db_url: str) -> None:
    # GPU-B's held replicas cost 1.875 (a 1.25 + b 0.625); by SM time 0.3 : 0.1 -> 1.40625 and
    # 0.46875. Both search pods: the team total and the idle line are unchanged.
    _ingest_with(prometheus, db_url, _model(shared_gpu_policy="usage"), [HOUR])
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
    [("weighted", {"nlp": 1_648_551, "search": 1_059_782}),
     ("even", {"nlp": 1_354_167, "search": 1_354_166})],  # an equal part per team
)  # fmt: skip
def test_idle_policies_through_ingestion(
    prometheus: Prometheus, db_url: str, policy: str, idle: dict[str, int]
) -> None:
    _ingest_with(prometheus, db_url, _model(idle_policy=policy), [HOUR])
    teams = by_team(db_url)
    assert {t: v[3] for t, v in teams.items()} == idle
    assert sum(a + i for a, _, _, i in teams.values()) == 7_500_000


def test_price_change_and_back_dated_reprice(prometheus: Prometheus, db_url: str) -> None:
    # a new price (3.00) from 06:00: the 05:00 hour keeps 2.50, the 06:00 hour takes 3.00
    changed = parse({"versions": [
        {"effective_from": "2026-11-01T00:00:00Z", "prices": [{"model": H100, "hourly": "2.50"}]},
        {"effective_from": "2026-11-10T06:00:00Z", "prices": [{"model": H100, "hourly": "3.00"}]},
    ]})  # fmt: skip
    _ingest_with(prometheus, db_url, changed, [HOUR])
    assert sum(a + i for a, _, _, i in by_team(db_url).values()) == 7_500_000  # 3 GPUs x 2.50
    # back-dated to 05:00 and the hour ingested again: repriced, exactly that hour
    back = parse({"versions": [
        {"effective_from": "2026-11-01T00:00:00Z", "prices": [{"model": H100, "hourly": "2.50"}]},
        {"effective_from": "2026-11-10T05:00:00Z", "prices": [{"model": H100, "hourly": "3.00"}]},
    ]})  # fmt: skip
    _ingest_with(prometheus, db_url, back, [HOUR])
    teams = by_team(db_url)
    assert sum(a + i for a, _, _, i in teams.values()) == 9_000_000  # 3 GPUs x 3.00
    assert teams["nlp"][0] == 1_500_000 + 2_000_000  # p's half hour + g's 40 minutes at 3.00
