"""The Grafana dashboards: structure, data source wiring, PromQL that parses, known series only."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.conftest import require_binary
from tests.dashboards.exprs import (
    BUILTINS,
    DASHBOARD_FILES,
    DASHBOARDS_DIR,
    all_expressions,
    dashboards,
    iter_panels,
    load,
    substitute,
    variables_used,
)
from tests.dashboards.series import (
    ALLOWED_METRICS,
    EXPORTER_METRICS,
    NVLINK_COUNTERS,
    metric_names,
)
from tests.prom import promtool_test

REPO = DASHBOARDS_DIR.parent
DS_REF = {"type": "prometheus", "uid": "${datasource}"}
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*(\w+)\s*\)\s*$", re.DOTALL)

# ------------------------------------------------------------------ helpers


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "dashboards_generate", DASHBOARDS_DIR / "generate.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def panels_of(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return list(iter_panels(dashboard["panels"]))


def data_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in panels_of(dashboard) if p["type"] != "row"]


def variables(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return list(dashboard["templating"]["list"])


def variable_query(var: dict[str, Any]) -> str:
    q = var.get("query")
    return str(q.get("query", "")) if isinstance(q, dict) else str(q or "")


def label_values_selector(query: str) -> str:
    m = _LABEL_VALUES.match(query)
    assert m, f"variable query is not label_values(selector, label): {query!r}"
    return m.group(1).strip()


def links_of(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's links and every panel's data links."""
    return [
        *dashboard["links"],
        *(
            link
            for p in data_panels(dashboard)
            for link in p["fieldConfig"]["defaults"].get("links") or []
        ),
    ]


ALL = list(DASHBOARD_FILES)


@pytest.fixture(scope="module")
def boards() -> dict[str, dict[str, Any]]:
    return dashboards()


# ------------------------------------------------------------------ structure


@pytest.mark.parametrize("name", ALL)
def test_valid_json_and_metadata(name: str) -> None:
    d = load(name)
    assert isinstance(d, dict)
    assert d["schemaVersion"] >= 39
    assert d["title"]
    assert d["description"]
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", d["uid"]), d["uid"]
    assert d.get("id") is None, "provisioned dashboards carry no database id"


def test_uids_and_titles_unique(boards: dict[str, dict[str, Any]]) -> None:
    uids = [d["uid"] for d in boards.values()]
    titles = [d["title"] for d in boards.values()]
    assert len(set(uids)) == len(uids)
    assert len(set(titles)) == len(titles)


@pytest.mark.parametrize("name", ALL)
def test_datasource_variable(name: str) -> None:
    vs = {v["name"]: v for v in variables(load(name))}
    ds = vs["datasource"]
    assert ds["type"] == "datasource"
    assert ds["query"] == "prometheus"
    for v in vs.values():
        if v["type"] == "query":
            assert v["datasource"] == DS_REF, v["name"]


@pytest.mark.parametrize("name", ALL)
def test_every_panel_reads_the_datasource_variable(name: str) -> None:
    d = load(name)
    panels = data_panels(d)
    assert len(panels) >= 8
    for p in panels:
        assert p["datasource"] == DS_REF, p["title"]
        targets = p.get("targets") or []
        assert targets, f"{p['title']}: no targets"
        for t in targets:
            assert t["datasource"] == DS_REF, p["title"]
            assert t.get("expr", "").strip(), f"{p['title']}: empty expr"
        refs = [t["refId"] for t in targets]
        assert len(set(refs)) == len(refs), p["title"]


@pytest.mark.parametrize("name", ALL)
def test_panels_have_ids_grid_titles_descriptions_units(name: str) -> None:
    d = load(name)
    panels = panels_of(d)
    ids = [p["id"] for p in panels]
    assert len(set(ids)) == len(ids), "panel ids must be unique"
    for p in panels:
        g = p["gridPos"]
        assert {"h", "w", "x", "y"} <= g.keys(), p["title"]
        assert g["w"] > 0 and g["h"] > 0 and g["x"] >= 0 and g["y"] >= 0
        assert g["x"] + g["w"] <= 24, p["title"]
        assert p["title"]
    for p in data_panels(d):
        assert p["description"].strip(), f"{p['title']}: no description"
        assert p["fieldConfig"]["defaults"]["unit"], f"{p['title']}: no unit"


def _overlaps(panels: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for i, a in enumerate(panels):
        for b in panels[i + 1 :]:
            ga, gb = a["gridPos"], b["gridPos"]
            if (
                ga["x"] < gb["x"] + gb["w"]
                and gb["x"] < ga["x"] + ga["w"]
                and ga["y"] < gb["y"] + gb["h"]
                and gb["y"] < ga["y"] + ga["h"]
            ):
                out.append((a["title"], b["title"]))
    return out


@pytest.mark.parametrize("name", ALL)
def test_panels_do_not_overlap(name: str) -> None:
    d = load(name)
    assert _overlaps(d["panels"]) == []
    for row in d["panels"]:
        assert _overlaps(row.get("panels", [])) == [], row["title"]


@pytest.mark.parametrize("name", ALL)
def test_units_where_they_matter(name: str) -> None:
    """Panels on a series with a unit show that unit."""
    expected = {
        "DCGM_FI_DEV_GPU_TEMP": {"celsius"},
        "DCGM_FI_DEV_MEMORY_TEMP": {"celsius"},
        "DCGM_FI_DEV_POWER_USAGE": {"watt"},
        "DCGM_FI_DEV_FB_USED": {"mbytes", "percentunit"},
        "gpu_container_memory_used_bytes": {"bytes"},
        "DCGM_FI_DEV_GPU_UTIL": {"percent"},
        "costsvc_cost_month_to_date": {"short", "percentunit"},
        "costsvc_budget_used_ratio": {"percentunit", "short"},
    }
    for p in data_panels(load(name)):
        unit = p["fieldConfig"]["defaults"]["unit"]
        for t in p["targets"]:
            for metric in metric_names(t["expr"]) & expected.keys():
                assert unit in expected[metric], (p["title"], metric, unit)


# ------------------------------------------------------------------ variables


@pytest.mark.parametrize("name", ALL)
def test_variables_defined_before_use_and_used_as_regex(name: str) -> None:
    d = load(name)
    defined: set[str] = set()
    for v in variables(d):
        if v["type"] == "query":
            q = variable_query(v)
            assert q == v["definition"]
            assert variables_used(q) <= defined, f"{v['name']} refers to a later variable"
            _only_regex_matchers(q, v["name"])
        defined.add(v["name"])
    assert {"datasource"} < defined
    used: set[str] = set()
    for p in data_panels(d):
        for t in p["targets"]:
            _only_regex_matchers(t["expr"], p["title"])
            used |= variables_used(t["expr"])
    builtins = {n for n in used if n.startswith("__")}
    assert builtins <= BUILTINS.keys()
    assert used - builtins <= defined, used - builtins - defined
    unused = defined - used - {"datasource"} - variables_used(json.dumps(links_of(d)))
    # a variable only feeds others (e.g. modelName narrows Hostname), links or is used by panels
    feeding = set().union(*(variables_used(variable_query(v)) for v in variables(d)))
    assert unused <= feeding, f"variables nobody uses: {unused - feeding}"


def _only_regex_matchers(expr: str, where: str) -> None:
    """Multi-value/All variables expand to regexes: they may only appear as label=~"$var"."""
    rest = re.sub(r'\w+\s*[=!]~\s*"\$\{?\w+\}?"', "", expr)
    stray = {v for v in variables_used(rest) if not v.startswith("__")}
    assert not stray, f'{where}: variables outside label=~"$var": {stray}'


@pytest.mark.parametrize("name", ALL)
def test_variable_queries_use_known_series(name: str) -> None:
    for v in variables(load(name)):
        if v["type"] == "query":
            selector = substitute(label_values_selector(variable_query(v)))
            assert metric_names(selector) <= ALLOWED_METRICS, (v["name"], selector)


# ------------------------------------------------------------------ links


def test_all_expressions_covers_every_target(boards: dict[str, dict[str, Any]]) -> None:
    exprs = all_expressions()
    n = sum(len(p["targets"]) for d in boards.values() for p in data_panels(d))
    assert len(exprs) == n
    for dashboard, title, expr in exprs:
        assert dashboard in DASHBOARD_FILES and title
        assert "$" not in expr and "[[" not in expr, expr


def test_all_expressions_takes_values() -> None:
    exprs = all_expressions({"__range": "2h", "Hostname": "node-a"})
    assert any("[2h]" in e for _, _, e in exprs)
    assert any('Hostname=~"node-a"' in e for _, _, e in exprs)


def test_metric_name_parser() -> None:
    expr = (
        'sum by (label_team) (a_b{x=~"$v", y="or"} * on (namespace, pod) group_left (t) '
        'label_replace(topk by (n) (1, max by (n, t) (kube_pod_labels{t=~".*"})), "t", "u", '
        '"t", "")) / 3.6e9 + time() - rate(c:d[$__rate_interval] offset 5m) or vector(0)'
    )
    assert metric_names(expr) == {"a_b", "kube_pod_labels", "c:d"}


@pytest.mark.parametrize("name", ALL)
def test_every_expression_uses_known_series(name: str) -> None:
    for p in data_panels(load(name)):
        for t in p["targets"]:
            names = metric_names(substitute(t["expr"]))
            assert names, f"{p['title']}: no series in {t['expr']}"
            unknown = names - ALLOWED_METRICS
            assert not unknown, f"{p['title']}: unknown series {unknown}"


def test_allowed_exporter_series_are_documented() -> None:
    doc = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", doc))
    assert documented >= EXPORTER_METRICS, EXPORTER_METRICS - documented
    for k in NVLINK_COUNTERS:
        assert f"`DCGM_FI_DEV_NVLINK_{k}_ERROR_COUNT_L17`" in doc


@pytest.mark.parametrize("name", ALL)
def test_every_expression_parses(name: str, tmp_path: Path) -> None:
    """promtool parses each panel and variable expression, as recording rules."""
    promtool = require_binary("promtool")
    stem = name.removesuffix(".json").replace("-", "_")
    rules = []
    d = load(name)
    for p in data_panels(d):
        for t in p["targets"]:
            record = f"dashboard:{stem}:panel{p['id']}_{t['refId']}"
            rules.append({"record": record, "expr": substitute(t["expr"])})
    for v in variables(d):
        if v["type"] == "query":
            selector = substitute(label_values_selector(variable_query(v)))
            rules.append({"record": f"dashboard:{stem}:var_{v['name']}", "expr": selector})
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps({"groups": [{"name": stem, "rules": rules}]}, indent=1))
    proc = subprocess.run(
        [promtool, "check", "rules", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(rules)} rules found" in proc.stdout, proc.stdout


# ------------------------------------------------------------------ generator and provisioning


def test_committed_json_is_the_generators_output() -> None:
    gen = generator()
    built = gen.build()
    assert sorted(built) == sorted(DASHBOARD_FILES)
    for name, dashboard in built.items():
        committed = (DASHBOARDS_DIR / name).read_text(encoding="utf-8")
        assert committed == gen.render(dashboard), f"{name} is stale: python dashboards/generate.py"


# the cost service's money series: those with a `currency` label
def test_provisioning_files() -> None:
    prov = DASHBOARDS_DIR / "provisioning"
    ds = yaml.safe_load((prov / "datasources.yml").read_text(encoding="utf-8"))
    assert ds["apiVersion"] == 1
    [prom] = ds["datasources"]
    assert prom["type"] == "prometheus"
    assert prom["uid"] == "prometheus"
    assert prom["url"] == "http://prometheus:9090"
    assert prom["isDefault"] is True
    dash = yaml.safe_load((prov / "dashboards.yml").read_text(encoding="utf-8"))
    assert dash["apiVersion"] == 1
    [provider] = dash["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"


# ------------------------------------------------------------------ the joins compute what they say


def expr_of(name: str, title: str, ref: str = "A", values: dict[str, str] | None = None) -> str:
    """A panel's query by its title (a money panel's without the currency it names), its
    variables `values` or All."""
    [panel] = [
        p for p in data_panels(load(name)) if p["title"].removesuffix(" (${currency})") == title
    ]
    [t] = [t for t in panel["targets"] if t["refId"] == ref]
    return substitute(t["expr"], values)


def test_joins_evaluate_as_intended(tmp_path: Path) -> None:
    """promtool evaluates the trickiest expressions on a small fleet: a whole GPU at 25 %
    utilisation, a MIG 3g instance with no process (fully idle), a half time-slice GPU at 50 %;
    teams from kube_pod_labels, a pod without the label is __unallocated__."""
    gpu = 'Hostname="n1", modelName="H100", UUID="GPU-{g}", gpu="{g}"'
    mig3g = 'GPU_I_PROFILE="3g.40gb"'
    holder = gpu + ', namespace="{ns}", pod="{pod}", container="main"'
    series = {
        "gpu_allocation_share{" + holder.format(g=0, ns="a", pod="p1") + "}": "1",
        "gpu_container_sm_utilization_ratio{" + holder.format(g=0, ns="a", pod="p1") + "}": "0.25",
        "gpu_allocation_share{"
        + holder.format(g=1, ns="b", pod="p2")
        + ', GPU_I_ID="1", GPU_I_PROFILE="3g.40gb"}': "0.4",
        "gpu_allocation_share{" + holder.format(g=2, ns="c", pod="p3") + "}": "0.5",
        "gpu_container_sm_utilization_ratio{" + holder.format(g=2, ns="c", pod="p3") + "}": "0.5",
        "gpu_mig_instance_info{" + gpu.format(g=1) + f', GPU_I_ID="1", {mig3g}}}': "1",
        "gpu_mig_instance_info{" + gpu.format(g=1) + f', GPU_I_ID="2", {mig3g}}}': "1",
        'kube_pod_labels{namespace="a", pod="p1", label_team="nlp"}': "1",
        'kube_pod_labels{namespace="b", pod="p2", label_team="vision"}': "1",
        'kube_pod_labels{namespace="c", pod="p3"}': "1",
        'costsvc_cost_month_to_date{team="nlp", project="x", stage="prod", currency="USD"}': "300",
        'costsvc_cost_month_to_date{team="__idle__", project="", stage="", currency="USD"}': "100",
        'costsvc_cost_rate_per_hour{team="nlp", project="x", stage="prod", currency="USD"}': "2",
        'costsvc_cost_forecast_month_end{team="nlp", currency="USD"}': "1700",
        'costsvc_cost_forecast_month_end{team="__idle__", currency="USD"}': "250",
        'costsvc_cost_forecast_month_end{team="nlp", currency="EUR"}': "9999",
        'costsvc_efficiency_ratio{team="nlp", project="x", stage="prod"}': "0.5",
        'costsvc_energy_month_to_date_joules{team="nlp", project="x", stage="prod"}': "5400000",
        'costsvc_energy_month_to_date_joules{team="nlp", project="y", stage="dev"}': "1800000",
        'costsvc_carbon_month_to_date_grams{team="nlp", project="x", stage="prod"}': "750",
    }
    w = "gpu-workloads.json"
    cases = [
        (expr_of(w, "Allocated but idle"), [("{}", 0.75 + 0.4 + 0.25)]),
        (
            expr_of(w, "Allocated-but-idle GPUs by team"),
            [
                ('{label_team="nlp"}', 0.75),
                ('{label_team="vision"}', 0.4),
                ('{label_team="__unallocated__"}', 0.25),
            ],
        ),
        (
            expr_of(w, "Teams now", "C"),
            [
                ('{label_team="nlp"}', 0.25),
                ('{label_team="vision"}', 0.0),
                ('{label_team="__unallocated__"}', 0.5),
            ],
        ),
        (
            expr_of("gpu-mig.json", "Unallocated instances"),
            [('{Hostname="n1", gpu="1", GPU_I_ID="2", GPU_I_PROFILE="3g.40gb"}', 1)],
        ),
        # the cost service's forecast per team, summed (never extrapolated here)
        (
            expr_of("gpu-finops.json", "Projected month end", values={"currency": "USD"}),
            [("{}", 1700 + 250)],
        ),
        (expr_of("gpu-finops.json", "Cost-weighted efficiency"), [("{}", 0.5)]),
        # 5.4 MJ + 1.8 MJ = 2 kWh; 750 g = 0.75 kg
        (expr_of("gpu-finops.json", "Energy by team"), [('{team="nlp"}', 2)]),
        (expr_of("gpu-finops.json", "CO2e by team"), [('{team="nlp"}', 0.75)]),
    ]
    tests = {
        "interval": "1m",
        "input_series": [{"series": s, "values": f"{v}x5"} for s, v in series.items()],
        "promql_expr_test": [
            {
                "expr": expr,
                "eval_time": "0m",
                "exp_samples": [{"labels": labels, "value": value} for labels, value in want],
            }
            for expr, want in cases
        ],
    }
    promtool_test(tmp_path, tests)


def test_xid_panels_count_a_codes_first_xid(tmp_path: Path) -> None:
    """A code's first XID makes its counter series, at 1: increase() alone never sees it
    (the GPUCriticalXID alert's rule). Counted the minute it appears, and in the range's
    total; a later XID of the same code by its increase, not twice."""
    gpu = 'Hostname="n1", modelName="H100", UUID="GPU-0", gpu="0"'
    f = "gpu-fleet.json"
    by_code = expr_of(f, "XID errors by code").replace("[1m]", "[2m]").replace(" 1m", " 2m")
    total = expr_of(f, "Last XID per GPU", "B").replace("[1h]", "[10m]").replace(" 1h", " 10m")
    tests = {
        "interval": "1m",
        "input_series": [
            # XID 31 first at minute 4, again at minute 19; XID 13 at 1 all along
            {"series": f'gpu_xid_errors_total{{{gpu}, xid="31"}}', "values": "_x4 1x14 2x10"},
            {"series": f'gpu_xid_errors_total{{{gpu}, xid="13"}}', "values": "1x30"},
        ],
        "promql_expr_test": [
            {
                "expr": by_code,
                "eval_time": "5m",
                "exp_samples": [{"labels": '{Hostname="n1", gpu="0", xid="31"}', "value": 1}],
            },
            {"expr": by_code, "eval_time": "12m", "exp_samples": []},
            {
                "expr": by_code,
                "eval_time": "20m",
                "exp_samples": [{"labels": '{Hostname="n1", gpu="0", xid="31"}', "value": 1}],
            },
            {
                "expr": total,
                "eval_time": "10m",
                "exp_samples": [{"labels": '{Hostname="n1", gpu="0"}', "value": 1}],
            },
        ],
    }
    promtool_test(tmp_path, tests)
