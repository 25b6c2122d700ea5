"""The OpenCost UI's report builder against gpu-costsvc, over real HTTP, on SQLite and
PostgreSQL, with a finance and a team token: its filter suggestions (opencost/opencost-ui at
5babf86 ``app/services/report-filter-autocomplete.ts`` ``fetchReportFilterAutocomplete``:
``GET ${BASE_URL}/allocation/autocomplete`` with ``window``, ``field``, ``limit=25``, ``search``
when typed, ``filter`` from the other rules, ``parseFilters``; the UI's nginx strips ``/model``:
``default.nginx.conf.template``), and a filter on ``"__unallocated__"``, which OpenCost reads as
the empty value (opencost/opencost ``core/pkg/filter/transform/unallocated.go``)."""

from __future__ import annotations

from typing import Any

import pytest

from costsvc.opencost.aggregates import opencost_kind
from costsvc.rules.chargeback import IDLE
from tests.costsvc.allocation_checks import allocation_api, assert_money_as_v1, ui_get
from tests.costsvc.apiserver import Api
from tests.costsvc.opencost_clients import axios_query, ui_params

api = pytest.fixture(allocation_api, scope="module", params=["sqlite", "postgresql"], name="api")
WINDOW = "14d"  # the clock is 2026-11-20 12:00: every hour of history.py
WHO = ("finance", "team:nlp", "team:search")


def v1_groups(api: Api, who: str) -> list[dict[str, str]]:
    """/v1/costs' groups over the window, as ``who`` sees them (a team: its own rows)."""
    r = api.get(
        "/v1/costs",
        who=who,
        window=WINDOW,
        group_by="team,cluster,node,namespace,controller_kind,controller,pod,container",
    )
    assert r.status_code == 200, r.text
    return [row["group"] for row in r.json()["rows"] if row["group"]["team"] != IDLE]


def ui_suggest(api: Api, who: str, field: str, search: str = "", rule: str = "") -> Any:
    """The UI's request: params in fetchReportFilterAutocomplete's order, axios' encoding."""
    params: dict[str, object] = {"window": WINDOW, "field": field, "limit": 25}
    if search:
        params["search"] = search
    if rule:
        params["filter"] = rule
    r = api.http.get(f"/allocation/autocomplete?{axios_query(params)}", headers=api.auth(who))
    return r


def suggested(api: Api, who: str, field: str, search: str = "", rule: str = "") -> list[str]:
    r = ui_suggest(api, who, field, search, rule)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert list(body) == ["code", "data"] and body["code"] == 200  # WriteData's envelope
    assert list(body["data"]) == ["data"]  # AllocationAutocompleteResponse
    values: list[str] = body["data"]["data"]
    return values


def kind(g: dict[str, str]) -> str:
    return opencost_kind(g["controller_kind"]) if g["controller"] else ""


@pytest.mark.parametrize("who", WHO)
def test_the_report_builder_s_suggestions(api: Api, who: str) -> None:
    """Each field the UI offers (ALLOWED, ALIASES): the distinct values of the caller's own
    allocations, sorted, empty ones left out; a team token's only from its team's rows."""
    groups = v1_groups(api, who)
    assert groups
    for field, of in (
        ("cluster", lambda g: g["cluster"]),
        ("namespace", lambda g: g["namespace"]),
        ("node", lambda g: g["node"]),
        ("controllerKind", kind),
        ("controllerName", lambda g: g["controller"]),
        ("pod", lambda g: g["pod"]),
        ("container", lambda g: g["container"]),
    ):
        want = sorted({v for g in groups if (v := of(g))})[:25]
        assert suggested(api, who, field) == want, field
    if who == "team:nlp":
        assert suggested(api, who, "namespace") == ["ml"]
        assert "search" in suggested(api, "finance", "namespace")


def test_search_filter_and_limit(api: Api) -> None:
    """``search`` (case-insensitive, contains), ``filter`` from the other rules (parseFilters),
    ``limit``; a pod label by ``label:<key>`` (the UI's ``label:`` properties)."""
    assert suggested(api, "finance", "namespace", search="EARC") == ["search"]
    rule = 'namespace:"ml"'
    assert suggested(api, "finance", "controllerKind", rule=rule) == ["deployment"]
    assert suggested(api, "finance", "controllerName", rule=rule) == ["gen-server", "trainer"]
    assert suggested(api, "team:search", "pod", rule=rule) == []  # not its team's
    # ml/p was relabelled app=trainer -> trainer2: one set, its latest (as /allocation's)
    assert suggested(api, "finance", "label:app", rule=rule) == ["gen", "trainer2"]
    r = api.http.get(
        f"/allocation/autocomplete?{axios_query({'window': WINDOW, 'field': 'pod', 'limit': 1})}",
        headers=api.auth("finance"),
    )
    assert len(r.json()["data"]["data"]) == 1


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"window": WINDOW, "limit": 25}, "field is required"),
        ({"window": WINDOW, "field": "colour"}, "unrecognized field: colour"),
        ({"window": WINDOW, "field": "pod", "limit": 1001}, "maximum autocomplete result limit"),
        ({"window": WINDOW, "field": "label"}, "keeps no label set"),
        ({"window": "soon", "field": "pod"}, ""),
        ({"window": WINDOW, "field": "pod", "filter": 'pod:"x'}, "Invalid filter"),
    ],
)
def test_refusals_are_plain_text_400s(api: Api, params: dict[str, object], says: str) -> None:
    """OpenCost answers every refusal with ``http.Error``: text, status 400."""
    r = api.http.get(f"/allocation/autocomplete?{axios_query(params)}", headers=api.auth("finance"))
    assert r.status_code == 400 and r.headers["content-type"].startswith("text/plain"), r.text
    assert says in r.text


def test_unauthenticated_is_refused(api: Api) -> None:
    assert ui_suggest(api, "finance", "pod").status_code == 200
    r = api.http.get(f"/allocation/autocomplete?window={WINDOW}&field=pod")
    assert r.status_code == 401


@pytest.mark.parametrize("who", WHO)
def test_a_filter_on_unallocated(api: Api, who: str) -> None:
    """The UI's ``/allocation/compute`` with ``controllerKind:"__unallocated__"`` keeps the pods
    without a controller, ``!:`` the others: together every pod, the money /v1/costs'."""
    groups = v1_groups(api, who)
    without = {g["pod"] for g in groups if not g["controller"]}
    with_one = {g["pod"] for g in groups if g["controller"]}
    if who == "finance":
        assert without and with_one  # both kinds in the history: the test can fail
    for op, want, rule in (
        (":", without, [("controllerKind", "")]),
        ("!:", with_one, None),
    ):
        params = ui_params(WINDOW, "pod", True)
        params["filter"] = f'controllerKind{op}"__unallocated__"'
        r = api.http.get(f"/allocation/compute?{axios_query(params)}", headers=api.auth(who))
        assert r.status_code == 200, r.text
        (one,) = r.json()["data"]
        assert {n for n in one if n != IDLE} == want, op
        if rule and who == "finance":
            answer = ui_get(api, {**params})
            assert_money_as_v1(api, answer, rule, True)
