"""The dashboards' scope: every query filtered by the cluster, money in the cost service's own
currency (never one written in), and links that keep the variables and reach the pages."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from costsvc.metrics.series import ADVICE_FAMILIES, FAMILIES, INFERENCE_FAMILIES
from tests.dashboards.exprs import load
from tests.dashboards.series import metric_names, vector_selectors
from tests.dashboards.test_dashboards import (
    _LABEL_VALUES,
    ALL,
    data_panels,
    label_values_selector,
    links_of,
    variable_query,
    variables,
)


def page_paths() -> set[str]:
    """The cost service's page routes (/ui/...)."""
    from costsvc.pages import explore, overview, team

    return {r.path for m in (explore, overview, team) for r in m.router.routes}


@pytest.mark.parametrize("name", ALL)
def test_links_keep_the_variables_and_reach_the_cost_service_pages(name: str) -> None:
    """The other dashboards with this one's variables and time range; the cost service's
    overview and explorer at the `costsvc_url` variable's address for the range's month or
    days; from series of a team, that team's page and explorer view."""
    d = load(name)
    [others] = [link for link in d["links"] if link["type"] == "dashboards"]
    assert others["tags"] == ["gpu-finops"]
    assert others["includeVars"] is True and others["keepTime"] is True
    url_var = {v["name"]: v for v in variables(d)}["costsvc_url"]
    assert url_var["type"] == "textbox" and url_var["query"].startswith("http")
    pages = [link for link in links_of(d) if link["type"] == "link"]
    assert {link["title"] for link in d["links"]} >= {
        "Cost service: overview",
        "Cost service: explore",
    }
    routes = page_paths()
    for link in pages:
        url = link["url"]
        assert url.startswith("${costsvc_url}/ui/") and link["targetBlank"] is True, url
        path = url.removeprefix("${costsvc_url}").split("?")[0]
        assert path.replace("${__field.labels.team}", "{team}") in routes, url
        assert "${__from:date:" in url, url  # the range goes along
    for p in data_panels(d):
        urls = json.dumps(p["fieldConfig"]["defaults"].get("links") or [])
        if "__field.labels.team" in urls:
            assert all(re.search(r"\bby \([^)]*\bteam\b", t["expr"]) for t in p["targets"])


def test_team_links_on_the_money_dashboards() -> None:
    for name, least in (("gpu-finops.json", 6), ("gpu-rightsizing.json", 2)):
        linked = [
            p["title"]
            for p in data_panels(load(name))
            if "/ui/teams/${__field.labels.team}"
            in json.dumps(p["fieldConfig"]["defaults"].get("links") or [])
        ]
        assert len(linked) >= least, (name, linked)


# ------------------------------------------------------------------ the cluster, everywhere

CLUSTER_MATCHER = re.compile(r'(?:^|[\s,])cluster=~"\$cluster"')


def cluster_gaps(dashboard: dict[str, Any]) -> list[str]:
    """Every series selector of the dashboard's queries (panels and variables, the cluster
    variable's own excepted) without the matcher cluster=~"$cluster"."""
    exprs = [(p["title"], t["expr"]) for p in data_panels(dashboard) for t in p["targets"]]
    exprs += [
        (f"variable {v['name']}", label_values_selector(variable_query(v)))
        for v in variables(dashboard)
        if v["type"] == "query" and v["name"] != "cluster"
    ]
    return [
        f"{where}: {name}{{{matchers}}}"
        for where, expr in exprs
        for name, matchers in vector_selectors(expr)
        if not CLUSTER_MATCHER.search(matchers)
    ]


@pytest.mark.parametrize("name", ALL)
def test_every_query_selects_the_cluster(name: str) -> None:
    """Each dashboard has a multi-value `cluster` variable with All (the regex .*, which also
    matches series without the label), and every series selector of every query reads it."""
    d = load(name)
    cluster = {v["name"]: v for v in variables(d)}["cluster"]
    assert cluster["type"] == "query"
    assert cluster["multi"] is True and cluster["includeAll"] is True
    assert cluster["allValue"] == ".*"
    assert cluster_gaps(d) == []


def test_the_cluster_check_fails_on_a_query_without_it() -> None:
    d = load("gpu-finops.json")
    planted = json.loads(json.dumps(d))
    panel = json.loads(json.dumps(data_panels(d)[0]))
    panel["targets"] = [
        {
            "expr": 'sum(costsvc_cost_month_to_date{cluster=~"$cluster", team=~"$team"}) '
            '/ sum(costsvc_cost_rate_per_hour{team=~"$team", xcluster=~"$cluster"}) + count(up)'
        }
    ]
    planted["panels"].append(panel)
    assert cluster_gaps(planted) == [
        f'{panel["title"]}: costsvc_cost_rate_per_hour{{team=~"$team", xcluster=~"$cluster"}}',
        f"{panel['title']}: up{{}}",
    ]


# ------------------------------------------------------------------ PromQL


MONEY_SERIES = frozenset(
    name
    for name, _, labels in (*FAMILIES, *ADVICE_FAMILIES, *INFERENCE_FAMILIES)
    if "currency" in labels
)


def money_gaps(dashboard: dict[str, Any]) -> list[str]:
    """Money shown with a hard-coded currency: a currency (or custom prefix/suffix) unit on
    any panel, a money panel (one reading a money series, ratios aside) whose unit is not
    plain numbers or whose title does not name the `currency` variable, a money series read
    without currency=~"$currency"."""
    out = []
    for p in data_panels(dashboard):
        unit = p["fieldConfig"]["defaults"]["unit"]
        if re.match(r"(currency|prefix:|suffix:)", unit):
            out.append(f"{p['title']}: unit {unit}")
        read = [
            (n, m)
            for t in p["targets"]
            for n, m in vector_selectors(t["expr"])
            if n in MONEY_SERIES
        ]
        shown = unit == "short" and p["title"].endswith(" (${currency})")
        if read and unit != "percentunit" and not shown:
            out.append(f"{p['title']}: money shown as {unit!r} without the currency")
        out += [f"{p['title']}: {n}{{{m}}}" for n, m in read if CURRENCY_MATCHER not in m]
    return out


CURRENCY_MATCHER = 'currency=~"$currency"'


@pytest.mark.parametrize("name", ["gpu-finops.json", "gpu-rightsizing.json"])
def test_no_money_unit_is_hard_coded(name: str) -> None:
    """The currency is the one the cost service's series carry: a single-value `currency`
    variable of their `currency` label, named in each money panel's title."""
    d = load(name)
    currency = {v["name"]: v for v in variables(d)}["currency"]
    assert currency["multi"] is False and currency["includeAll"] is False
    series, label = _LABEL_VALUES.match(variable_query(currency)).groups()  # type: ignore[union-attr]
    assert label == "currency" and metric_names(series) <= MONEY_SERIES
    assert money_gaps(d) == []
    assert any(p["title"].endswith(" (${currency})") for p in data_panels(d))


@pytest.mark.parametrize("name", ALL)
def test_no_currency_unit_anywhere(name: str) -> None:
    assert money_gaps(load(name)) == []


def test_the_money_check_fails_on_a_hard_coded_currency() -> None:
    d = json.loads(json.dumps(load("gpu-finops.json")))
    [panel] = [p for p in data_panels(d) if p["title"].startswith("Spend rate")]
    panel["fieldConfig"]["defaults"]["unit"] = "currencyUSD"
    assert money_gaps(d) == [
        f"{panel['title']}: unit currencyUSD",
        f"{panel['title']}: money shown as 'currencyUSD' without the currency",
    ]
    panel["fieldConfig"]["defaults"]["unit"] = "short"
    panel["title"] = "Spend rate"
    panel["targets"][0]["expr"] = 'sum(costsvc_cost_rate_per_hour{cluster=~"$cluster"})'
    assert money_gaps(d) == [
        "Spend rate: money shown as 'short' without the currency",
        'Spend rate: costsvc_cost_rate_per_hour{cluster=~"$cluster"}',
    ]


# ------------------------------------------------------------------ joins within a cluster

# the cost service's series per cluster (docs/costsvc-metrics.md, "The `cluster` label")
PER_CLUSTER = frozenset(
    name
    for name, _, labels in (*FAMILIES, *ADVICE_FAMILIES, *INFERENCE_FAMILIES)
    if "cluster" in labels
)
JOIN = re.compile(r"\b(on|ignoring)\s*\(([^)]*)\)")


def join_gaps(dashboard: dict[str, Any]) -> tuple[int, list[str]]:
    """(how many joins the queries of per-cluster series make, those that match across
    clusters): an ``on (...)`` without ``cluster``, an ``ignoring (...)`` with it. Such a join
    pairs one cluster's line with another's (or fails many-to-one) once two are selected."""
    joins, gaps = 0, []
    for p in data_panels(dashboard):
        for t in p["targets"]:
            names = metric_names(t["expr"])
            if not names or not names <= PER_CLUSTER:
                continue
            for kind, labels in JOIN.findall(t["expr"]):
                joins += 1
                has = "cluster" in {x.strip() for x in labels.split(",")}
                if has != (kind == "on"):
                    gaps.append(f"{p['title']}: {kind} ({labels})")
    return joins, gaps


@pytest.mark.parametrize("name", ["gpu-finops.json", "gpu-rightsizing.json"])
def test_joins_of_the_money_series_stay_within_a_cluster(name: str) -> None:
    joins, gaps = join_gaps(load(name))
    assert gaps == []
    assert joins > 0 or name == "gpu-rightsizing.json"  # FinOps' cost-weighted efficiency


def test_the_join_check_fails_on_a_join_across_clusters() -> None:
    d = json.loads(json.dumps(load("gpu-finops.json")))
    panel = data_panels(d)[0]
    panel["targets"] = [
        {
            "expr": 'sum(costsvc_efficiency_ratio{cluster=~"$cluster"} * on (team, project, '
            'stage) costsvc_cost_month_to_date{cluster=~"$cluster"})'
        }
    ]
    assert join_gaps(d)[1] == [f"{panel['title']}: on (team, project, stage)"]
