"""End to end: a real Prometheus scraping real exporters (two simulated nodes) and the cost
service; the cost service ingesting from that Prometheus into a real PostgreSQL; then every
PromQL expression of every dashboard panel and every alert rule evaluated against that
Prometheus — none may fail, and every dashboard query whose metrics exist must return data."""

from __future__ import annotations

import csv
import io
import re
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import create_engine, func, select

from costsvc.auth.tokens import create_token
from costsvc.db.models import PodLabels, PodOwner
from costsvc.ingest.prom import PrometheusReader
from costsvc.ingest.serial import ingest_hours
from costsvc.rules.cost_model import load
from exporter.simulate.spec import load as load_spec
from tests.conftest import require_binary
from tests.costsvc.conftest import fresh_database
from tests.costsvc.history_checks import assert_every_hour_adds_up
from tests.dashboards.exprs import all_expressions
from tests.dashboards.series import metric_names
from tests.dashboards.test_dashboards import expr_of
from tests.kubeapi import KubeApi, pod_json
from tests.procs import LISTENING, ROOT, Process, start_exporter
from tests.prom import Prometheus, free_port

RULES = ROOT / "alerts" / "gpu-finops.rules.yml"


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Any]]:
    from costsvc.db.migrate import upgrade

    binary = require_binary("prometheus")
    work = tmp_path_factory.mktemp("e2e")
    exits = ExitStack()
    db_url = exits.enter_context(fresh_database("postgresql", request, work))
    upgrade(db_url)
    procs: list[Process] = []
    prom = None
    # the pods of the shared node, with their team labels, in a loopback Kubernetes API that
    # the cost service's label watcher lists and watches (the production label path)
    kube = KubeApi()
    created = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    shared = load_spec(ROOT / "examples" / "fleet-shared.yaml")
    for pod in shared.pods:
        obj = pod_json(
            pod.namespace,
            pod.name,
            pod.pod_uid(),
            shared.hostname,
            dict(pod.labels),
            {c.name: f"{i:064x}" for i, c in enumerate(pod.containers)},
        )
        obj["metadata"]["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
        kube.put(obj)
    try:
        ports = []
        for spec in ("fleet-shared.yaml", "fleet-h100x8.yaml"):
            proc, port = start_exporter(
                "--simulate", str(ROOT / "examples" / spec), "--collect-interval", "1s"
            )
            procs.append(proc)
            ports.append(port)
        api_port = free_port()
        costsvc = Process(
            [sys.executable, "-m", "costsvc.cli", "serve", "--no-ingest"],
            env={
                "COSTSVC_DATABASE_URL": db_url,
                "COSTSVC_CLUSTER": "e2e",
                "COSTSVC_LISTEN_ADDRESS": f"127.0.0.1:{api_port}",
                "COSTSVC_KUBE_API_URL": kube.url,
            },
        )
        procs.append(costsvc)
        costsvc.wait_for(LISTENING, 30)
        engine = create_engine(db_url)
        deadline = time.monotonic() + 30
        while engine.connect().execute(
            select(func.count()).select_from(PodLabels)
        ).scalar_one() < len(shared.pods):
            assert time.monotonic() < deadline, "the label watcher did not record the pods"
            time.sleep(0.1)
        while engine.connect().execute(
            select(func.count()).select_from(PodOwner)
        ).scalar_one() < len(shared.pods):
            assert time.monotonic() < deadline, "the owner watcher did not record the pods"
            time.sleep(0.1)
        # both histories from one pods list + watch (kube/watch.py SharedWatches)
        assert kube.paths.count(("/api/v1/pods", "list")) == 1, kube.paths
        # Prometheus scrapes the cost service with a metrics token from a file, as the
        # compose stack and the ServiceMonitor do (docs/security.md)
        token_file = work / "costsvc-token"
        token_file.write_text(create_token(engine, "prometheus", "metrics", None, "e2e") + "\n")
        engine.dispose()
        config = {
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "evaluation_interval": "1s",
            },
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {
                    "job_name": "gpu-exporter",
                    "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in ports]}],
                },
                {
                    "job_name": "gpu-costsvc",
                    "static_configs": [{"targets": [f"127.0.0.1:{api_port}"]}],
                    "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
                },
            ],
        }
        prom = Prometheus(binary, work, [], config_text=yaml.safe_dump(config))
        prom.wait_ready()
        # enough history for rate() windows: a few scrapes of every target
        prom.until(
            lambda: (
                prom.query("min(count_over_time(gpu_device_up[1m])) >= 5")
                and len(prom.query("gpu_device_up")) >= 9
            ),
            60,
            "five scrapes of every GPU of both nodes",
        )
        # ingest the current (partial) hour into PostgreSQL through the production serial loop
        # (ingest() itself takes complete hours only: costsvc/ingest/run.py clip_end)
        hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        engine = create_engine(db_url)
        reader = PrometheusReader(prom.url)
        model = load(ROOT / "examples" / "cost-model.yaml")
        report = ingest_hours(engine, reader, model, "e2e", [hour])
        reader.close()
        engine.dispose()
        assert report.done == [hour], report.failed
        # the cost service's /metrics (read from that database) is scraped too
        prom.until(
            lambda: prom.query('costsvc_cost_month_to_date{team="nlp"}'),
            30,
            "cost-service series in Prometheus",
        )
        yield {"prom": prom, "db_url": db_url, "api": f"http://127.0.0.1:{api_port}"}
    finally:
        if prom is not None:
            prom.stop()
        for p in procs:
            p.stop()
        kube.stop()
        exits.close()


def test_ingested_from_live_exporters_adds_up(stack: dict[str, Any]) -> None:
    assert assert_every_hour_adds_up(stack["db_url"]) == 1
    prom: Prometheus = stack["prom"]
    teams = {r["metric"]["team"] for r in prom.query("costsvc_cost_month_to_date")}
    assert {"nlp", "vision", "search", "__unallocated__", "__idle__"} <= teams
    assert httpx.get(f"{stack['api']}/healthz", timeout=10).json() == {"status": "ok"}


FILTER = re.compile(r"\s*(>=|<=|==|!=|>|<)\s*-?[\d.]+\s*$")  # a trailing "> 0" filter
SELECTOR = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^}"]|"(?:[^"\\]|\\.)*")*\})')


def selectors(expr: str) -> list[str]:
    found = [m.group(0) for m in SELECTOR.finditer(expr)]
    braced = {m.group(1) for m in SELECTOR.finditer(expr)}
    return found + sorted(metric_names(expr) - braced)


def test_every_dashboard_query_runs_and_returns_data_when_its_metrics_exist(
    stack: dict[str, Any],
) -> None:
    """A query is expected to return data when each of its series selectors matches series
    in this scenario; a trailing threshold filter (``> 0``) is taken off for that check (the
    condition it shows may rightly be false right now)."""
    prom: Prometheus = stack["prom"]
    empty, checked = [], 0
    for dashboard, title, expr in all_expressions():
        prom.query(expr)  # asserts status "success": valid PromQL, evaluated on real data
        wanted = selectors(expr)
        if not wanted or not all(prom.query(f"count({sel})") for sel in wanted):
            continue
        checked += 1
        if not prom.query(FILTER.sub("", expr)):
            empty.append(f"{dashboard} / {title}: {expr}")
    assert checked >= 60, checked
    assert not empty, "queries whose series exist but return nothing:\n" + "\n".join(empty)


def test_every_alert_rule_evaluates(stack: dict[str, Any]) -> None:
    prom: Prometheus = stack["prom"]
    rules = yaml.safe_load(RULES.read_text())
    n = 0
    for group in rules["groups"]:
        for rule in group["rules"]:
            prom.query(rule["expr"])  # valid PromQL against real data
            n += 1
    assert n >= 20
    # Prometheus itself loaded and evaluated every rule without error
    answer = httpx.get(f"{prom.url}/api/v1/rules", timeout=10).json()
    loaded = [r for g in answer["data"]["groups"] for r in g["rules"]]
    assert len(loaded) == n
    prom.until(
        lambda: all(
            r.get("lastEvaluation", "").startswith("20")
            for g in httpx.get(f"{prom.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
            for r in g["rules"]
        ),
        30,
        "every rule evaluated",
    )
    rules_now = httpx.get(f"{prom.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
    bad = [
        (r["name"], r.get("lastError"))
        for g in rules_now
        for r in g["rules"]
        if r.get("health") != "ok"
    ]
    assert not bad, bad


def test_energy_and_carbon_are_the_same_everywhere(stack: dict[str, Any]) -> None:
    """The same kWh and CO2e for a team in /v1/costs, the chargeback CSV, FOCUS, the cost
    service's /metrics as scraped by Prometheus, and the FinOps dashboard's panels evaluated
    by that Prometheus (energy from the simulated exporters' energy counters)."""
    engine = create_engine(stack["db_url"])
    token = create_token(engine, "e2e-energy", "admin", None, "test")
    engine.dispose()
    http = httpx.Client(base_url=stack["api"], headers={"Authorization": f"Bearer {token}"})
    month = datetime.now(UTC).strftime("%Y-%m")
    answer = http.get("/v1/costs", params={"window": "month", "group_by": "team"}).json()
    api = {r["group"]["team"]: (r["energy_kwh"], r["co2e_kg"]) for r in answer["rows"]}
    assert Decimal(api["nlp"][0]) > 0 and Decimal(api["nlp"][1]) > 0, api
    # the team summary, and an energy budget: its status and its /metrics ratio
    summary = http.get("/v1/teams/nlp/summary").json()["energy"]
    assert (summary["month_to_date_kwh"], summary["month_to_date_co2e_kg"]) == api["nlp"]
    budget_kwh = (Decimal(api["nlp"][0]) * 2).quantize(Decimal("0.000001"))  # about half used
    made = http.post(
        "/v1/budgets", json={"team": "nlp", "amount": "1000", "energy_kwh": str(budget_kwh)}
    )
    assert made.status_code == 201, made.text
    assert made.json()["energy_kwh"] == f"{budget_kwh:.9f}"
    status = http.get(f"/v1/budgets/{made.json()['id']}/status").json()["energy"]
    assert status["month_to_date_kwh"] == api["nlp"][0]
    used = Decimal(api["nlp"][0]) / budget_kwh
    assert abs(Decimal(status["used_ratio"]) - used) < Decimal("0.00001")
    exposed_ratio = stack["prom"].until(
        lambda: stack["prom"].query('costsvc_budget_energy_used_ratio{team="nlp"}'),
        30,
        "the energy budget's ratio scraped",
    )
    assert abs(Decimal(exposed_ratio[0]["value"][1]) - used) < Decimal("0.00001")
    csv_rows = list(
        csv.DictReader(
            io.StringIO(
                http.get(
                    "/v1/reports/chargeback.csv", params={"month": month, "group_by": "team"}
                ).text
            )
        )
    )
    assert {r["team"]: (r["energy_kwh"], r["co2e_kg"]) for r in csv_rows} == api
    focus_rows = list(
        csv.DictReader(io.StringIO(http.get("/v1/reports/focus.csv", params={"month": month}).text))
    )
    http.close()
    prom: Prometheus = stack["prom"]
    exposed = {
        r["metric"]["team"]: Decimal(r["value"][1])
        for r in prom.query("sum by (team) (costsvc_energy_month_to_date_joules) / 3600000")
    }
    carbon = {
        r["metric"]["team"]: Decimal(r["value"][1])
        for r in prom.query("sum by (team) (costsvc_carbon_month_to_date_grams) / 1000")
    }
    energy_panel = {
        r["metric"]["team"]: Decimal(r["value"][1])
        for r in prom.query(expr_of("gpu-finops.json", "Energy by team"))
    }
    carbon_panel = {
        r["metric"]["team"]: Decimal(r["value"][1])
        for r in prom.query(expr_of("gpu-finops.json", "CO2e by team"))
    }
    for team, (kwh, kg) in api.items():
        mine = [r for r in focus_rows if r["x_Team"] == team]
        # FOCUS rows are per hour and line, each rounded to 9 places of a kWh
        slack = Decimal("1e-9") * len(mine)
        assert abs(sum(Decimal(r["x_EnergyKWh"]) for r in mine) - Decimal(kwh)) <= slack
        assert sum(Decimal(r["x_CarbonKgCO2e"]) for r in mine) == Decimal(kg)  # mg: exact
        # the exposition is a float: the same figure to its precision
        for shown, exact in (
            (exposed[team], kwh),
            (energy_panel[team], kwh),
            (carbon[team], kg),
            (carbon_panel[team], kg),
        ):
            assert abs(shown - Decimal(exact)) <= Decimal("1e-9") + Decimal(exact) * Decimal(
                "1e-12"
            ), (team, shown, exact)
