"""Rightsizing and quotas end to end: a week of history in a real Prometheus, owners and
ResourceQuotas from the loopback Kubernetes API, the advice run, the API (JSON and CSV) and
/metrics. Hand-computed answers (history in tests/costsvc/advice_history.py):

recommendations (window 7 days = 2016 five-minute points, 168 device-hours per whole GPU)
- infer/Deployment chat, H100, 9 GB / 12 % -> mig 1g.10gb: 2.50 x 730 = 1825.000000 now,
  1825 / 7 = 260.714286 after, saving 1564.285714
- infer/Deployment rank on two models: H100 -> 1g.10gb saving 1564.285714; A100 -> 1g.10gb,
  1.80 x 730 x 6/7 = 1126.285714 (activity from utilisation there, profiling on the H100)
- db/StatefulSet vecdb idle 1814 of 2016 points (90 %) -> release, saving 1825.000000
- train/Job train-llm 70 GB / 95 % -> keep; infer/Deployment embed 50 GB -> keep (found by its
  pod-template-hash: the API does not serve its ReplicaSet); scratch/fresh 3 hours ->
  insufficient; infer-mig/StatefulSet svc (by name) on 1g.10gb already -> keep (activity:
  its instance's profiling 0.7 x 1/7 = 0.1 of a GPU)

quotas (unit price of nvidia.com/gpu: 6 H100 units x 2.50 + 1 A100 x 1.80 over 7 = 2.400000;
of nvidia.com/mig-1g.10gb: 2.50 / 7 = 0.357143, rounded half to even)
- infer: hard 4, held 4, active 4: utilisation 1, nothing unused or idle
- db: hard 2, held 1, active 202/2016: unused 1 x 2.40 x 730 = 1752.000000; held idle
  1814/2016 x 2.40 x 730 = 1577.321429
- infer-mig (MIG resource): hard 7, held 1, active 1: unused 6 x 0.357143 x 730 = 1564.286340
- train (no quota): held 1; scratch (no quota, no team): held 36/2016 = 0.018
- team search = infer + infer-mig; research = db + train
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
from collections.abc import Iterator
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine

from costsvc.advice.kube_owners import OwnerWatcher
from costsvc.advice.repository import OwnerHistory, QuotaStore
from costsvc.advice.run import Options, run
from costsvc.cli import main
from costsvc.db.cost_models import activate, active_document
from costsvc.db.migrate import upgrade
from costsvc.ingest.prom import PrometheusReader
from costsvc.labels.history import LabelHistory
from costsvc.labels.kube_watch import LabelWatcher
from costsvc.rules.cost_model import parse
from dashboards.rightsizing import HELD_BY_TEAM, QUOTA_BY_TEAM, TOP_SAVINGS
from kube.client import core_api
from tests.conftest import require_binary
from tests.costsvc.advice_history import END, MODEL_DOC, T_END, history, kube_objects
from tests.costsvc.apiserver import Clock, serve
from tests.costsvc.test_api import metric
from tests.dashboards.exprs import all_expressions, substitute
from tests.kubeapi import KubeApi
from tests.prom import Prometheus

MODEL = parse(MODEL_DOC)


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    promtool, binary = require_binary("promtool"), require_binary("prometheus")
    work = tmp_path_factory.mktemp("advice")
    (work / "history.om").write_text(history())
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(work / "history.om"),
         str(work / "data")],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    prom = Prometheus(binary, work, [], extra_args=["--storage.tsdb.retention.time=100y"])
    try:
        prom.wait_ready()
        prom.until(lambda: prom.query(f"gpu_device_up @ {T_END - 600}"), 30, "blocks loaded")
        yield prom
    finally:
        prom.stop()


@pytest.fixture
def kube() -> Iterator[KubeApi]:
    server = KubeApi()
    objects = kube_objects()
    for pod in objects.pop("pods"):
        server.put(pod)
    for path, items in objects.items():
        for item in items:
            server.put_object(path, item)
    yield server
    server.stop()


def _watch(db_url: str, kube: KubeApi) -> None:
    engine = create_engine(db_url)
    labels = LabelWatcher(LabelHistory(engine, "c1"), core_api(host=kube.url), lambda k: None)
    labels.start()
    watcher = OwnerWatcher(
        OwnerHistory(engine, "c1"),
        QuotaStore(engine, "c1"),
        core_api(host=kube.url),
        lambda kind: None,
        retry_delay=0.05,
    )
    watcher.start()
    try:
        for kind, synced in [*watcher.synced.items(), *labels.synced.items()]:
            assert synced.wait(10), kind
    finally:
        watcher.stop()
        labels.stop()
        engine.dispose()


def _money(value: Decimal) -> str:
    return str(value.quantize(Decimal("0.000001"), rounding=ROUND_HALF_EVEN))


def _by_workload(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(r["namespace"], r["workload"], r["gpu_model"]): r for r in rows}


@pytest.fixture
def advised(db_url: str, week: Prometheus, kube: KubeApi) -> str:
    upgrade(db_url)
    _watch(db_url, kube)
    engine = create_engine(db_url)
    reader = PrometheusReader(week.url)
    try:
        run(engine, reader, MODEL, "c1", END, Options(step_s=300))  # the history's 5 minutes
    finally:
        reader.close()
        engine.dispose()
    return db_url


H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def test_recommendations_by_hand(advised: str, tmp_path: Path) -> None:
    with serve(advised, Clock(END), teams=["search", "research"]) as api:
        every = api.get("/v1/recommendations", all="true").json()["rows"]
        rows = api.get("/v1/recommendations").json()["rows"]
        csv_text = api.get("/v1/recommendations.csv").text
        search = api.get("/v1/recommendations", who="team:search").json()["rows"]
        research_csv = api.get("/v1/recommendations.csv", who="team:research").text
        other = api.get("/v1/recommendations", who="team:search", team="research")
        only_rank = api.get("/v1/recommendations", namespace="infer", workload="rank").json()
    got = _by_workload(every)
    chat = got[("infer", "chat", H100)]
    assert (chat["workload_kind"], chat["action"], chat["target"]) == (
        "Deployment",
        "mig",
        "1g.10gb",
    )
    assert (chat["current_monthly"], chat["recommended_monthly"], chat["saving_monthly"]) == (
        "1825.000000",
        "260.714286",
        "1564.285714",
    )
    assert chat["confidence_hours"] == "168.000000"
    assert chat["activity_source"] == "profiling"
    assert chat["activity_p95"] == "0.120000"
    assert chat["memory_peak_bytes"] == 9 * 10**9
    assert chat["team"] == "search"
    rank_h = got[("infer", "rank", H100)]
    rank_a = got[("infer", "rank", A100)]
    assert (rank_h["target"], rank_h["saving_monthly"]) == ("1g.10gb", "1564.285714")
    assert (rank_a["target"], rank_a["saving_monthly"]) == ("1g.10gb", "1126.285714")
    assert rank_a["activity_source"] == "utilisation"
    vecdb = got[("db", "vecdb", H100)]
    assert (vecdb["workload_kind"], vecdb["action"]) == ("StatefulSet", "release")
    assert vecdb["saving_monthly"] == "1825.000000"
    assert vecdb["idle_ratio"] == f"{Decimal(1814) / 2016:.6f}"
    train = got[("train", "train-llm", H100)]
    assert (train["workload_kind"], train["action"], train["saving_monthly"]) == (
        "Job",
        "keep",
        "0.000000",
    )
    embed = got[("infer", "embed", H100)]
    assert (embed["workload_kind"], embed["action"]) == ("Deployment", "keep")
    fresh = got[("scratch", "fresh", H100)]
    assert fresh["action"] == "insufficient"
    assert fresh["confidence_hours"] == "3.000000"
    svc = got[("infer-mig", "svc", H100)]
    assert (svc["workload_kind"], svc["action"], svc["activity_source"]) == (
        "StatefulSet",
        "keep",
        "profiling (MIG)",
    )
    assert svc["activity_p95"] == "0.100000"  # 0.7 of the instance, 1/7 of the GPU
    # the default answer: actionable rows only, biggest saving first
    assert [(r["namespace"], r["workload"], r["gpu_model"]) for r in rows] == [
        ("db", "vecdb", H100),
        ("infer", "chat", H100),
        ("infer", "rank", H100),
        ("infer", "rank", A100),
    ]
    # CSV: the same rows and figures
    parsed = list(csv.DictReader(io.StringIO(csv_text)))
    assert [(r["workload"], r["saving_monthly"]) for r in parsed] == [
        (r["workload"], r["saving_monthly"]) for r in rows
    ]
    # team tokens see their own team only
    assert {r["team"] for r in search} == {"search"}
    assert len(search) == 3
    assert [r["workload"] for r in csv.DictReader(io.StringIO(research_csv))] == ["vecdb"]
    assert other.status_code == 403
    assert {r["gpu_model"] for r in only_rank["rows"]} == {H100, A100}


def test_quotas_by_hand(advised: str) -> None:
    with serve(advised, Clock(END), teams=["search", "research"]) as api:
        answer = api.get("/v1/quotas").json()
        research = api.get("/v1/quotas", who="team:research").json()
    rows = {r["namespace"]: r for r in answer["rows"]}
    assert set(rows) == {"infer", "infer-mig", "db", "train", "scratch"}
    infer = rows["infer"]
    assert (infer["team"], infer["resource"], infer["source"]) == (
        "search",
        "nvidia.com/gpu",
        "kubernetes",
    )
    assert (infer["hard"], infer["used"], infer["held"], infer["active"]) == (
        "4.000",
        "4.000",
        "4.000",
        "4.000",
    )
    assert (infer["utilisation"], infer["unused_quota_monthly"], infer["held_idle_monthly"]) == (
        "1.000000",
        "0.000000",
        "0.000000",
    )
    assert infer["unit_price_per_hour"] == "2.400000"
    db = rows["db"]
    assert (db["team"], db["hard"], db["used"], db["held"], db["active"]) == (
        "research",
        "2.000",
        "1.000",
        "1.000",
        "0.100",
    )
    assert db["utilisation"] == "0.500000"
    assert db["unused_quota_monthly"] == "1752.000000"
    assert db["held_idle_monthly"] == _money(Decimal(1814) / 2016 * 2_400_000 * 730 / 10**6)
    mig = rows["infer-mig"]
    assert (mig["team"], mig["resource"], mig["hard"], mig["held"]) == (
        "search",
        "nvidia.com/mig-1g.10gb",
        "7.000",
        "1.000",
    )
    assert mig["unit_price_per_hour"] == "0.357143"
    assert mig["unused_quota_monthly"] == "1564.286340"
    train = rows["train"]
    assert (train["hard"], train["held"], train["source"]) == (None, "1.000", "none")
    assert (rows["scratch"]["team"], rows["scratch"]["held"]) == ("__unallocated__", "0.018")
    teams = {(t["team"], t["resource"]): t for t in answer["teams"]}
    assert set(teams) == {
        ("search", "nvidia.com/gpu"),
        ("search", "nvidia.com/mig-1g.10gb"),
        ("research", "nvidia.com/gpu"),
        ("__unallocated__", "nvidia.com/gpu"),
    }
    r = teams[("research", "nvidia.com/gpu")]  # db + train
    assert (r["hard"], r["held"], r["active"]) == ("2.000", "2.000", "1.100")
    assert r["unused_quota_monthly"] == "1752.000000"
    assert {row["team"] for row in research["rows"]} == {"research"}
    assert {t["team"] for t in research["teams"]} == {"research"}


def test_metrics_agree_with_the_api(advised: str) -> None:
    with serve(advised, Clock(END), teams=["search"]) as api:
        rows = api.get("/v1/recommendations").json()["rows"]
        quotas = api.get("/v1/quotas").json()["rows"]
        text = api.get("/metrics", who="admin").text
        own = api.get("/metrics", who="team:search").text
    per_team: dict[str, Decimal] = {}
    for r in rows:
        per_team[r["team"]] = per_team.get(r["team"], Decimal(0)) + Decimal(r["saving_monthly"])
    assert per_team == {"search": Decimal("4254.857142"), "research": Decimal("1825.000000")}
    for team, total in per_team.items():
        got = metric(text, "costsvc_recommendation_savings_monthly", team=team, currency="USD")
        assert got == pytest.approx(float(total), abs=1e-6)
    for r in rows:
        got = metric(
            text,
            "costsvc_workload_savings_monthly",
            workload=r["workload"],
            gpu_model=r["gpu_model"],
        )
        assert got == pytest.approx(float(r["saving_monthly"]), abs=1e-6)
    assert metric(text, "costsvc_recommendations", team="search", action="mig") == 3
    # a team token's /metrics: its own team's rightsizing and quota series only
    teams_seen = {
        s.labels["team"]
        for fam in text_string_to_metric_families(own)
        for s in fam.samples
        if s.name.startswith(("costsvc_recommendation", "costsvc_workload", "costsvc_quota"))
    }
    assert teams_seen == {"search"}
    for q in quotas:
        labels = {"namespace": q["namespace"], "resource": q["resource"]}
        assert metric(text, "costsvc_quota_held_units", **labels) == float(q["held"])
        if q["hard"] is not None:
            assert metric(text, "costsvc_quota_hard_units", **labels) == float(q["hard"])
            assert metric(text, "costsvc_quota_used_ratio", **labels) == pytest.approx(
                float(Decimal(q["used"]) / Decimal(q["hard"]))
            )
            assert metric(text, "costsvc_quota_unused_cost_monthly", **labels) == pytest.approx(
                float(q["unused_quota_monthly"]), abs=1e-6
            )


def test_recommend_command(
    advised: str, week: Prometheus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    model = tmp_path / "model.yaml"
    model.write_text(json.dumps(MODEL_DOC))
    monkeypatch.setenv("COSTSVC_DATABASE_URL", advised)
    monkeypatch.setenv("COSTSVC_PROMETHEUS_URL", week.url)
    monkeypatch.setenv("COSTSVC_COST_MODEL", str(model))
    monkeypatch.setenv("COSTSVC_CLUSTER", "c1")
    assert main(["recommend", "--end", "2026-11-20T00:00:00Z", "--top", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + 3
    assert "db/StatefulSet/vecdb" in lines[2] and "release" in lines[2]
    assert "1825.000000 USD" in lines[2]
    assert "infer/Deployment/chat" in lines[3] and "1g.10gb" in lines[3]
    assert "1564.285714 USD" in lines[3]
    assert main(["recommend", "--window", "0"]) == 2


def test_recommend_uses_the_cost_model_kept_in_the_database(
    advised: str, week: Prometheus, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """No COSTSVC_COST_MODEL: ``recommend`` prices with the model in force in the database
    (costsvc/rules/cost_model_source.py), as the ingest does; without one it says so."""
    monkeypatch.setenv("COSTSVC_DATABASE_URL", advised)
    monkeypatch.setenv("COSTSVC_PROMETHEUS_URL", week.url)
    monkeypatch.delenv("COSTSVC_COST_MODEL", raising=False)
    monkeypatch.setenv("COSTSVC_CLUSTER", "c1")
    args = ["recommend", "--end", "2026-11-20T00:00:00Z", "--top", "3"]
    engine = create_engine(advised)
    try:
        if active_document(engine) is None:
            assert main(args) == 2
            assert "no cost model" in capsys.readouterr().err
            activate(engine, parse(MODEL_DOC), "test", "cli")
    finally:
        engine.dispose()
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + 3
    assert "db/StatefulSet/vecdb" in lines[2] and "1825.000000 USD" in lines[2]


def test_dashboard_queries_agree_with_the_api(advised: str, tmp_path: Path) -> None:
    """A real Prometheus scrapes the cost service's /metrics; every query of the rightsizing
    dashboard runs there, and the top-savings table and quota-by-team figures are the API's."""
    binary = require_binary("prometheus")
    with serve(advised, Clock(END), teams=["search"]) as api:
        rows = api.get("/v1/recommendations").json()["rows"]
        teams = api.get("/v1/quotas").json()["teams"]
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {
                    "job_name": "gpu-costsvc",
                    "authorization": {"credentials": api.tokens["admin"]},
                    "static_configs": [{"targets": [api.base.removeprefix("http://")]}],
                }
            ],
        }
        prom = Prometheus(binary, tmp_path, [], config_text=yaml.safe_dump(config))
        try:
            prom.wait_ready()
            prom.until(
                lambda: prom.query("costsvc_quota_held_units"), 30, "cost-service series scraped"
            )
            for dashboard, title, expr in all_expressions():
                if dashboard == "gpu-rightsizing.json":
                    assert prom.query(expr), (title, expr)  # runs, and has data here
            top = prom.query(substitute(TOP_SAVINGS))
            quota = prom.query(substitute(QUOTA_BY_TEAM))
            held = prom.query(substitute(HELD_BY_TEAM))
        finally:
            prom.stop()
    assert sorted(
        (
            r["metric"]["workload"],
            r["metric"]["gpu_model"],
            r["metric"].get("target", ""),
            r["value"][1],
        )
        for r in top
    ) == sorted(
        (r["workload"], r["gpu_model"], r["target"], str(Decimal(r["saving_monthly"]).normalize()))
        for r in rows
    )
    api_hard = {(t["team"], t["resource"]): t["hard"] for t in teams if t["hard"] is not None}
    assert {
        (r["metric"]["team"], r["metric"]["resource"]): f"{Decimal(r['value'][1]):.3f}"
        for r in quota
    } == api_hard
    assert {
        (r["metric"]["team"], r["metric"]["resource"]): f"{Decimal(r['value'][1]):.3f}"
        for r in held
    } == {(t["team"], t["resource"]): t["held"] for t in teams}
