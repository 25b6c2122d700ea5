"""The HTTP API over real HTTP (uvicorn on loopback) against SQLite and PostgreSQL, with data
put there by the ingestion path from the real Prometheus of history.py."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, func, insert, select

from costsvc.db.migrate import upgrade
from costsvc.db.models import Chargeback, GpuPresence
from costsvc.kit.ratios import ratio_text as shown
from costsvc.metrics.series import collect
from costsvc.reports.monthly import chargeback_csv
from costsvc.rules.chargeback import IDLE, UNALLOCATED
from tests.costsvc.apiserver import NOV20, Api, Clock, serve
from tests.costsvc.conftest import fresh_database
from tests.costsvc.history import (
    ELEVENTH,
    FIFTEENTH,
    HOSTILE,
    HOUR,
    HOUR2,
    HOUR3,
    MODEL,
    ingest_with,
)
from tests.costsvc.history_checks import as_utc, by_team
from tests.costsvc.test_focus import OR_BRANCHES, VALIDATOR_TIMEOUT
from tests.costsvc.test_focus import _junit as junit_status
from tests.costsvc.test_focus import _run_validator as run_validator
from tests.dashboards.test_dashboards import expr_of
from tests.prom import Prometheus, promtool_test

HOURS = [HOUR, HOUR2, HOUR3, ELEVENTH, FIFTEENTH, FIFTEENTH + timedelta(hours=1)]
TEAMS = ["a", "b", "nlp"]
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def dec(micro: int) -> str:
    return f"{Decimal(micro).scaleb(-6):.6f}"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def ingested(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, prometheus: Prometheus
) -> Iterator[str]:
    """One database of each kind holding every hour of history.py, ingested from Prometheus."""
    with fresh_database(request.param, request, tmp_path_factory.mktemp("api")) as url:
        ingest_with(prometheus.url, url, MODEL, HOURS)
        yield url


@pytest.fixture(scope="module")
def api(ingested: str) -> Iterator[Api]:
    with serve(ingested, Clock(NOV20), TEAMS) as running:
        yield running


def test_costs_by_team_equal_the_ingested_money(api: Api) -> None:
    r = api.get(
        "/v1/costs", start="2026-11-01T00:00:00Z", end="2026-12-01T00:00:00Z", group_by="team"
    )
    assert r.status_code == 200, r.text
    got = {row["group"]["team"]: row for row in r.json()["rows"]}
    expected = by_team(api.db_url)
    assert set(got) == set(expected)
    for team, (alloc, used, waste, idle) in expected.items():
        row = got[team]
        assert (
            row["allocated_cost"],
            row["used_cost"],
            row["allocated_idle_cost"],
            row["idle_cost"],
            row["total_cost"],
        ) == (dec(alloc), dec(used), dec(waste), dec(idle), dec(alloc + idle))
        assert row["currency"] == "USD"
    # hand-computed in history.py: 7 x 1g.10gb at 07:00, team a 3 slices, b 2, c 1
    assert got["a"]["allocated_cost"] == "1.071429"
    assert got[UNALLOCATED]["total_cost"] == "2.500000"
    assert IDLE in got and got[IDLE]["allocated_cost"] == "0.000000"


def test_unknown_efficiency_is_null_never_zero(api: Api) -> None:
    """A holding with no utilisation series (history.py: GPU-C at 05:00, the 1g.10gb instances
    of GPU-7 at 07:00, no GPM) has unknown efficiency: its allocated cost is reported as
    unmeasured, efficiency is used / (used + waste) of what was measured, or null."""
    r = api.get(
        "/v1/costs", start="2026-11-01T00:00:00Z", end="2026-12-01T00:00:00Z", group_by="team"
    )
    assert r.status_code == 200, r.text
    got = {row["group"]["team"]: row for row in r.json()["rows"]}
    for team, (alloc, used, waste, _) in by_team(api.db_url).items():
        row = got[team]
        assert row["unmeasured_cost"] == dec(alloc - used - waste)
        measured = used + waste
        eff = None if not measured else shown(Decimal(used) / Decimal(measured))
        assert row["efficiency"] == eff, team
    # team a: three MIG instances with no activity series at all: unknown, not 0 %
    assert got["a"]["efficiency"] is None
    assert got["a"]["unmeasured_cost"] == got["a"]["allocated_cost"] == "1.071429"
    assert got["a"]["used_cost"] == got["a"]["allocated_idle_cost"] == "0.000000"
    # nlp: pod p used 1.00 of its measured 1.25; GPU-C's 1.666667 is unmeasured: 80 %, not 34 %
    assert got["nlp"]["efficiency"] == "0.800000"
    assert got["nlp"]["unmeasured_cost"] == "1.666667"
    # the cost service's own series: no efficiency where nothing was measured
    engine = create_engine(api.db_url)
    try:
        families = {m.name: m for m in collect(engine, NOV20)}
    finally:
        engine.dispose()
    ratio = {s.labels["team"]: s.value for s in families["costsvc_efficiency_ratio"].samples}
    assert "a" not in ratio
    assert ratio["nlp"] == pytest.approx(0.8)


def test_every_hour_adds_up_through_the_api(api: Api) -> None:
    r = api.get("/v1/costs", start="2026-11-10T00:00:00Z", end="2026-11-16T00:00:00Z", step="hour")
    assert r.status_code == 200, r.text
    per_hour = {row["start"]: Decimal(row["total_cost"]) for row in r.json()["rows"]}
    engine = create_engine(api.db_url)
    with engine.connect() as conn:
        fleet = {
            f"{as_utc(h):%Y-%m-%dT%H:00:00Z}": Decimal(int(v)).scaleb(-6)
            for h, v in conn.execute(
                select(GpuPresence.hour, func.sum(GpuPresence.cost)).group_by(GpuPresence.hour)
            )
        }
    engine.dispose()
    assert per_hour == fleet
    assert len(per_hour) == len(HOURS)


def test_group_by_mig_profile_gpu_model_and_node(api: Api) -> None:
    r = api.get(
        "/v1/costs",
        start="2026-11-10T07:00:00Z",
        end="2026-11-10T08:00:00Z",
        group_by="mig_profile,team",
        team=["a", "b", "c"],
    )
    rows = {
        (x["group"]["mig_profile"], x["group"]["team"]): x["allocated_cost"]
        for x in r.json()["rows"]
    }
    assert rows == {
        ("1g.10gb", "a"): "1.071429",
        ("1g.10gb", "b"): "0.714286",
        ("1g.10gb", "c"): "0.357142",
    }
    r = api.get(
        "/v1/costs",
        start="2026-11-10T05:00:00Z",
        end="2026-11-10T06:00:00Z",
        group_by=["gpu_model", "node"],
    )
    nodes = {x["group"]["node"]: x for x in r.json()["rows"]}
    assert {x["group"]["gpu_model"] for x in r.json()["rows"]} == {"NVIDIA H100 80GB HBM3"}
    assert nodes["node-A"]["total_cost"] == "2.500000"  # held half the hour + idle half
    assert nodes["node-A"]["allocated_cost"] == "1.250000"


def test_windows(api: Api) -> None:
    api.clock.now = datetime(2026, 11, 10, 8, 30, tzinfo=UTC)
    try:
        today = api.get("/v1/costs", window="today").json()
        # live windows end with the hour now is in (its rows come when it is ingested)
        assert (today["start"], today["end"]) == ("2026-11-10T00:00:00Z", "2026-11-10T09:00:00Z")
        engine = create_engine(api.db_url)
        with engine.connect() as conn:
            fleet = conn.execute(
                select(func.sum(GpuPresence.cost)).where(
                    GpuPresence.hour < datetime(2026, 11, 11, tzinfo=UTC)
                )
            ).scalar_one()
        engine.dispose()
        assert sum(Decimal(x["total_cost"]) for x in today["rows"]) == Decimal(dec(int(fleet)))
        week = api.get("/v1/costs", window="week").json()
        assert week["start"] == "2026-11-09T00:00:00Z"  # the Monday
        assert api.get("/v1/costs", window="7d").json()["start"] == "2026-11-03T09:00:00Z"
        last = api.get("/v1/costs", window="lastmonth").json()
        assert (last["start"], last["end"], last["rows"]) == (
            "2026-10-01T00:00:00Z",
            "2026-11-01T00:00:00Z",
            [],
        )
        assert api.get("/v1/costs", window="yesterday").json()["rows"] == []
    finally:
        api.clock.now = NOV20


@pytest.mark.parametrize(
    ("params", "status", "says"),
    [
        ({"window": "fortnight"}, 400, "window"),
        ({"window": "0d"}, 400, "window"),
        ({"window": "today", "start": "2026-11-01T00:00:00Z"}, 400, "either"),
        ({"start": "2026-11-01T00:00:00"}, 400, "time zone"),
        ({"start": "2026-11-02T00:00:00Z", "end": "2026-11-01T00:00:00Z"}, 400, "after"),
        ({"start": "yesterday-ish"}, 422, "start"),
        ({"group_by": "colour"}, 400, "group_by"),
        ({"group_by": "team,team"}, 400, "twice"),
        ({"step": "fortnight"}, 422, "step"),
        ({"idle": "shared"}, 422, "idle"),
    ],
)
def test_bad_parameters_are_4xx_with_a_message(
    api: Api, params: dict[str, Any], status: int, says: str
) -> None:
    r = api.get("/v1/costs", **params)
    assert r.status_code == status, r.text
    assert says in r.text


def test_bad_report_parameters(api: Api) -> None:
    assert api.get("/v1/reports/chargeback.csv", month="2026-13").status_code == 422
    assert api.get("/v1/reports/chargeback.csv").status_code == 422
    r = api.get("/v1/reports/chargeback.csv", month="2026-11", group_by="colour")
    assert r.status_code == 400 and "group_by" in r.text


def read_csv(body: str) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    by_csv = list(csv.DictReader(io.StringIO(body)))
    frame = pandas.read_csv(io.StringIO(body), dtype=str, keep_default_na=False)
    return by_csv, frame.to_dict("records")


def test_chargeback_csv_adds_up_and_reads_back_the_same(api: Api) -> None:
    r = api.get("/v1/reports/chargeback.csv", month="2026-11")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    rows, frame = read_csv(r.text)
    assert rows == frame
    assert list(rows[0])[:4] == [
        "billing_month",
        "charge_period_start",
        "charge_period_end",
        "charge_class",
    ]
    engine = create_engine(api.db_url)
    with engine.connect() as conn:
        fleet = conn.execute(select(func.sum(GpuPresence.cost))).scalar_one()
        n = conn.execute(select(func.count()).select_from(Chargeback)).scalar_one()
    engine.dispose()
    assert len(rows) == n
    assert sum(Decimal(x["total_cost"]) for x in rows) == Decimal(int(fleet)).scaleb(-6)
    grouped = api.get("/v1/reports/chargeback.csv", month="2026-11", group_by="team").text
    g_rows, g_frame = read_csv(grouped)
    assert g_rows == g_frame
    assert sum(Decimal(x["total_cost"]) for x in g_rows) == Decimal(int(fleet)).scaleb(-6)


def test_hostile_labels_come_out_safe(api: Api) -> None:
    body = api.get("/v1/reports/chargeback.csv", month="2026-11", group_by="team,project").text
    rows, frame = read_csv(body)
    assert rows == frame
    teams = {x["team"] for x in rows}
    for value in HOSTILE:
        expected = "'" + value if value.startswith(FORMULA_START) else value
        assert expected in teams, (value, teams)
    for x in rows:
        for column in ("team", "project"):
            assert not x[column].startswith(FORMULA_START), x
    # JSON carries the exact values (JSON needs no neutralising, only correct escaping)
    r = api.get(
        "/v1/costs",
        start="2026-11-11T09:00:00Z",
        end="2026-11-11T10:00:00Z",
        group_by="team,project",
    )
    got = {(x["group"]["team"], x["group"]["project"]) for x in r.json()["rows"]}
    assert {(v, v[::-1]) for v in HOSTILE} <= got
    # the exposition format: the parser gives back the exact label values
    exposition = api.get("/metrics", "finance").text
    seen = {
        s.labels["team"]
        for fam in text_string_to_metric_families(exposition)
        if fam.name == "costsvc_cost_month_to_date"
        for s in fam.samples
    }
    assert set(HOSTILE) <= seen


def test_team_summary(api: Api) -> None:
    r = api.get("/v1/teams/a/summary")
    assert r.status_code == 200, r.text
    s = r.json()
    assert (s["team"], s["month"], s["month_to_date"]) == ("a", "2026-11", "1.071429")
    assert [p["pod"] for p in s["top_pods_by_waste"]][:1] in (["a1"], ["a2"], ["a3"])
    assert s["budget"] is None


def test_no_token_is_401_and_open_endpoints_carry_no_secrets(api: Api) -> None:
    for path in (
        "/v1/costs",
        "/v1/teams/a/summary",
        "/v1/reports/chargeback.csv?month=2026-11",
        "/v1/reports/focus.csv?month=2026-11",
        "/v1/budgets",
        "/v1/tokens",
        "/v1/audit",
        "/v1/months/2026-11",
        "/v1/cost-model",
    ):
        assert api.http.get(path).status_code == 401, path
        bad = api.http.get(path, headers={"Authorization": "Bearer gfo_not-a-token"})
        assert bad.status_code == 401, path
    assert api.http.get("/healthz").json() == {"status": "ok"}
    metrics = api.get("/metrics", "metrics").text
    for token in api.tokens.values():
        assert token not in metrics
    assert "sha256" not in metrics


def metric(exposition: str, name: str, **labels: str) -> float:
    found = [
        s.value
        for fam in text_string_to_metric_families(exposition)
        for s in fam.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, labels, found)
    return float(found[0])


def test_budget_status_forecast_and_metrics(api: Api) -> None:
    admin = api.auth("admin")
    r = api.http.post("/v1/budgets", json={"team": "a", "amount": "10"}, headers=admin)
    assert r.status_code == 201, r.text
    budget = r.json()["id"]
    try:
        s = api.get(f"/v1/budgets/{budget}/status").json()
        # now 2026-11-20 12:00; the last ingested hour is 11-15 12:00, the first 11-10 05:00:
        # the trend window is 11-10 05:00 .. 11-15 13:00 = 128 h, in which team a spent
        # 1.071429 -> 8371 micro/h; 371 h are left until 12-01 00:00
        rate, left, mtd = 8371, 371, 1_071_429
        assert (s["month_to_date"], s["burn_rate_per_hour"]) == (dec(mtd), dec(rate))
        assert s["forecast"] == dec(mtd + rate * left)
        # 0.1071429 shown rounded down, as every ratio (costsvc/kit/ratios.py shown)
        assert (s["used_ratio"], s["forecast_ratio"]) == ("0.107142", "0.417707")
        assert s["crossed"] == []
        summary = api.get("/v1/teams/a/summary").json()
        assert summary["budget"]["forecast_ratio"] == "0.417707"
        assert summary["hours_left"] == left

        text = api.get("/metrics", "metrics").text
        assert metric(text, "costsvc_budget_amount", team="a", project="") == 10.0
        assert metric(text, "costsvc_budget_used_ratio", team="a") == pytest.approx(0.1071429)
        assert metric(text, "costsvc_budget_forecast_ratio", team="a") == pytest.approx(0.417707)
        assert metric(text, "costsvc_cost_month_to_date", team="a") == pytest.approx(1.071429)
        # team a ran 3 pods this month: each one's share of the budget is 10 / 3
        for pod in ("a1", "a2", "a3"):
            ratio = metric(text, "costsvc_pod_budget_share_ratio", team="a", pod=pod)
            assert ratio == pytest.approx(0.357143 / (10 / 3), abs=1e-6)
        lag = (NOV20 - datetime(2026, 11, 15, 13, tzinfo=UTC)).total_seconds()
        assert metric(text, "costsvc_ingest_lag_seconds", cluster="c1") == lag
        assert metric(text, "costsvc_ingest_errors_total", cluster="c1") == 0
        assert metric(text, "costsvc_idle_cost_month_to_date", cluster="c1", currency="USD") > 0
    finally:
        assert api.http.delete(f"/v1/budgets/{budget}", headers=admin).status_code == 204


def test_the_dashboards_projected_month_end_is_the_apis_forecast(api: Api, tmp_path: Path) -> None:
    """One forecast rule (costsvc/costs/queries.py ``forecast``): the FinOps dashboard's
    *Projected month end*, evaluated by Prometheus's engine (promtool) on the series /metrics
    exposes, equals /v1/teams/{team}/summary's forecast, per team and for two teams together.
    Hand-computed for team a (test_budget_status_forecast_and_metrics): 1.071429 month to date
    + 0.008371 an hour x 371 hours left = 4.177070."""
    teams = ["a", "b", "nlp"]
    summaries = {t: api.get(f"/v1/teams/{t}/summary").json() for t in teams}
    assert summaries["a"]["forecast"] == dec(1_071_429 + 8371 * 371) == "4.177070"
    [currency] = {s["currency"] for s in summaries.values()}
    exposed = [
        s
        for fam in text_string_to_metric_families(api.get("/metrics", "metrics").text)
        for s in fam.samples
        if s.name == "costsvc_cost_forecast_month_end" and s.labels["team"] in teams
    ]
    assert {s.labels["team"] for s in exposed} == set(teams)
    series = [
        {
            "series": "costsvc_cost_forecast_month_end{"
            + ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(s.labels.items()))
            + "}",
            "values": f"{s.value!r}x2",
        }
        for s in exposed
    ]
    # compared in micro-units, the money's precision (a float sum need not be exact)
    picks = [*([t] for t in teams), ["a", "nlp"]]
    cases = [
        {
            "expr": "round(("
            + expr_of(
                "gpu-finops.json",
                "Projected month end",
                values={"team": "|".join(pick), "currency": currency},
            )
            + ") * 1000000)",
            "eval_time": "1m",
            "exp_samples": [
                {
                    "labels": "{}",
                    "value": int(sum(Decimal(summaries[t]["forecast"]) for t in pick) * 1_000_000),
                }
            ],
        }
        for pick in picks
    ]
    promtool_test(tmp_path, {"interval": "1m", "input_series": series, "promql_expr_test": cases})


@pytest.mark.timeout(VALIDATOR_TIMEOUT + 60)
def test_the_focus_export_of_ingested_data_passes_the_validator(api: Api, tmp_path: Path) -> None:
    """The month as the API exports it (MIG, shared, idle and unallocated lines, hostile
    labels) through the FinOps Foundation's focus-validator: no rule fails (but the InvoiceId
    either/or branch, whose parent rule must pass: see test_focus.py)."""
    r = api.get("/v1/reports/focus.csv", month="2026-11")
    assert r.status_code == 200
    path = tmp_path / "focus.csv"
    path.write_bytes(r.content)
    junit = tmp_path / "focus.xml"
    proc = run_validator(path, junit)
    root, status = junit_status(junit)
    report = f"{proc.stdout}\n{proc.stderr}"
    failed = {rule for rule, s in status.items() if s in ("failure", "error")}
    assert failed <= set(OR_BRANCHES), report
    assert all(status[OR_BRANCHES[rule]] == "passed" for rule in failed), report
    assert root.get("errors") == "0" and int(root.get("tests", "0")) > 50, report
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert len(rows) == len(
        read_csv(api.get("/v1/reports/chargeback.csv", month="2026-11").text)[0]
    )


def test_every_metrics_family_is_documented(api: Api) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "costsvc-metrics.md").read_text()
    documented = set(re.findall(r"^\| `(costsvc_[a-z_]+)`", doc, re.M))
    exposed = {
        fam.name for fam in text_string_to_metric_families(api.get("/metrics", "metrics").text)
    }
    exposed = {f"{n}_total" if n == "costsvc_ingest_errors" else n for n in exposed}
    assert exposed == documented


@pytest.mark.parametrize("group_by", [None, ["team", "project"], ["pod", "mig_profile"]])
@pytest.mark.parametrize("team", [None, HOSTILE[0], "a"])
def test_copy_and_python_write_the_same_bytes(
    api: Api, group_by: list[str] | None, team: str | None, tmp_path: Path
) -> None:
    """On PostgreSQL the CSV comes from COPY with the formatting in SQL (the fast path); it
    must be byte for byte what the Python path writes: SQLite's, over a copy of the same
    chargeback rows (on SQLite both are the Python path)."""
    engine = create_engine(api.db_url)
    python_path = f"sqlite:///{tmp_path / 'copy.db'}"
    upgrade(python_path)
    copy = create_engine(python_path)
    try:
        with engine.connect() as source, copy.begin() as target:
            rows = [dict(r._mapping) for r in source.execute(select(Chargeback.__table__))]
            target.execute(insert(Chargeback.__table__), rows)
        fast = "".join(chargeback_csv(engine, "2026-11", group_by, team))
        slow = "".join(chargeback_csv(copy, "2026-11", group_by, team))
    finally:
        engine.dispose()
        copy.dispose()
    assert fast == slow
    assert fast.count("\n") > (1 if team else 10)
