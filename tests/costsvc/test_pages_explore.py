"""The explorer (/ui/explore) in a real headless Chromium, on SQLite and PostgreSQL over
pages_history.py: its rows are /v1/costs' — asked of the API here with parameters this test
builds itself — for 6 windows x 5 groupings x 2 idle choices; its download is the API's bytes;
a drill-down narrows to the row; a team session sees nothing of another team through any
parameter, and that check fails when the explorer's scope rule is switched off."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import pytest

from costsvc.kit.lists import comma_list
from costsvc.pages.explore import TOTALS
from tests.costsvc import test_pages_browser as pages
from tests.costsvc.browser import Browser, assert_clean
from tests.costsvc.test_pages_browser import Site, enter, looked_at

chrome, site = pages.chrome, pages.site  # the same fixtures: a browser, a site per database

# (the page's window parameters, the API's for the same hours, the step)
WINDOWS = [
    ({"window": "today"}, {"window": "today"}, "hour"),
    ({"window": "month"}, {"window": "month"}, "day"),
    ({"window": "lastmonth"}, {"window": "lastmonth"}, "week"),
    ({"window": "7d"}, {"window": "7d"}, ""),
    (
        {"from": "2026-10-31", "to": "2026-11-02"},
        {"start": "2026-10-31T00:00:00Z", "end": "2026-11-03T00:00:00Z"},
        "day",
    ),
    (
        {"from": "2026-10-01", "to": "2026-12-31"},
        {"start": "2026-10-01T00:00:00Z", "end": "2027-01-01T00:00:00Z"},
        "month",
    ),
]
GROUPINGS = ["team", "project,stage", "node", "namespace,pod", "gpu_model"]
FIELDS = TOTALS  # the money columns, each shown with its exact value
READ_ROWS = """
return [...document.querySelectorAll('#explore-rows tbody tr')].map(tr => ({
  start: tr.dataset.start, group: JSON.parse(tr.dataset.group), currency: tr.dataset.currency,
  cells: Object.fromEntries([...tr.querySelectorAll('td[data-field]')].map(td =>
    [td.dataset.field, (td.querySelector('.num') || td).dataset.exact]))}));
"""


def shown_rows(chrome: Browser) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = chrome.driver.execute_script(READ_ROWS)
    return rows


def as_shown(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The API's rows as the table writes them (exact values in data-exact)."""
    out = []
    for r in rows:
        cells = {f: r[f] for f in FIELDS}
        cells |= {"efficiency": r["efficiency"] or "", "energy_kwh": r["energy_kwh"]}
        cells["co2e_kg"] = r["co2e_kg"]
        out.append(
            {"start": r.get("start") or "", "group": r["group"], "currency": r["currency"]}
            | {"cells": cells}
        )
    return out


def test_the_explorer_is_v1_costs(site: Site, chrome: Browser) -> None:
    enter(chrome, site, "finance")
    cookie = {"Cookie": f"gfo_session={site.session('finance')}"}
    seen = 0
    for page_window, api_window, step in WINDOWS:
        for group_by in GROUPINGS:
            for idle in ("separate", "weighted"):
                params = {**page_window, "step": step, "group_by": group_by, "idle": idle}
                visit = chrome.visit(f"{site.base}/ui/explore?{urlencode(params)}")
                assert visit.status == 200, params
                api_params = {**api_window, "group_by": group_by, "idle": idle}
                if step:
                    api_params["step"] = step
                answer = site.api.get("/v1/costs", "finance", **api_params)
                assert answer.status_code == 200, answer.text
                rows = answer.json()["rows"]
                assert shown_rows(chrome) == as_shown(rows), params
                seen += len(rows)
                href = chrome.driver.find_element("id", "download").get_attribute("href")
                got = site.api.http.get(href, headers=cookie)
                assert got.content == answer.content, params
    assert seen > 300  # the windows and groupings hold rows, not only empty tables


def test_the_download_button_saves_the_apis_bytes(site: Site, chrome: Browser) -> None:
    enter(chrome, site, "finance")
    view = {"window": "lastmonth", "step": "week", "group_by": "team", "idle": "weighted"}
    looked_at(chrome, site, f"/ui/explore?{urlencode(view)}", "explore")
    with chrome.acting() as visit:
        got = chrome.download("#download", "costs.json")
    assert_clean(visit, site.base)
    api = site.api.get(
        "/v1/costs", "finance", window="lastmonth", step="week", group_by="team", idle="weighted"
    )
    assert got == api.content and b'"idle":"weighted"' in got


def test_a_drill_down_narrows_to_the_row(site: Site, chrome: Browser) -> None:
    enter(chrome, site, "finance")
    chrome.visit(f"{site.base}/ui/explore?window=lastmonth&step=&group_by=team")
    visit = chrome.click('#explore-rows tr[data-group=\'{"team": "a"}\'] a')
    assert_clean(visit, site.base)
    assert "team=a" in visit.url and "group_by=project" in visit.url
    api = site.api.get("/v1/costs", "finance", window="lastmonth", group_by="project", team="a")
    assert shown_rows(chrome) == as_shown(api.json()["rows"])
    assert {r["group"]["project"] for r in shown_rows(chrome)} == {"train", "eval"}
    # the filter shown can be removed: back to every team, grouped by project
    chrome.click('ul.filters li[data-filter="team"] a')
    everyone = site.api.get("/v1/costs", "finance", window="lastmonth", group_by="project")
    assert shown_rows(chrome) == as_shown(everyone.json()["rows"])


# a team session's attempts to see more: each is refused (403) or answers its own rows only
WIDER = [
    {"group_by": "team"},
    {"group_by": "team", "idle": "weighted"},
    {"group_by": "team,namespace,pod", "window": "90d", "step": ""},
    {"group_by": "namespace", "namespace": "b,nlp,scratch"},
    {"group_by": "pod", "pod": "serve-0", "window": "lastmonth"},
    {"group_by": "node", "node": "node-b", "idle": "even", "step": "hour", "window": "today"},
    {"group_by": "gpu_model", "cluster": "c1", "from": "2026-10-01", "to": "2026-12-31"},
]
REFUSED = [{"team": "b"}, {"team": "a,b"}, {"team": ["a", "nlp"]}, {"team": "__idle__"}]


def assert_team_only(site: Site, chrome: Browser, team: str) -> None:
    cookie = {"Cookie": f"gfo_session={site.session(f'team:{team}')}"}
    for params in WIDER:
        visit = chrome.visit(f"{site.base}/ui/explore?{urlencode(params, doseq=True)}")
        assert visit.status == 200, params
        shown = shown_rows(chrome)
        api = {k: v for k, v in params.items() if k not in ("from", "to", "step")}
        if step := params.get("step", "day"):  # the page's default step: a day
            api["step"] = step
        if "from" in params:
            api |= {"start": "2026-10-01T00:00:00Z", "end": "2027-01-01T00:00:00Z"}
        mine = site.api.get("/v1/costs", f"team:{team}", **api).json()["rows"]
        assert shown == as_shown(mine), params
        for r in shown:  # never another team's name, pod or namespace
            assert r["group"].get("team", team) == team, params
        href = chrome.driver.find_element("id", "download").get_attribute("href")
        body = json.loads(site.api.http.get(href, headers=cookie).content)
        assert [r["group"] for r in body["rows"]] == [r["group"] for r in shown], params
    for params in REFUSED:
        visit = chrome.visit(f"{site.base}/ui/explore?{urlencode(params, doseq=True)}")
        assert visit.status == 403, params
        got = site.api.http.get(
            f"/ui/explore/costs.json?{urlencode(params, doseq=True)}", headers=cookie
        )
        assert got.status_code == 403, params


def test_a_team_session_explores_only_its_team(site: Site, chrome: Browser) -> None:
    enter(chrome, site, "team:a")
    assert_team_only(site, chrome, "a")
    looked_at(chrome, site, "/ui/explore", "explore-team-a")


def test_the_explorer_tenancy_check_fails_without_the_scope_rule(
    site: Site, chrome: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same check with the explorer's scope rule switched off (the filters as sent, no
    team narrowing; the server runs in this process): it must fail."""
    from costsvc.pages import explore

    def unscoped(who: Any, given: dict[str, Any]) -> dict[str, list[str]]:
        return {k: comma_list(v) for k, v in given.items() if comma_list(v)}

    monkeypatch.setattr(explore, "team_filters", unscoped)
    enter(chrome, site, "team:b")
    with pytest.raises(AssertionError):
        assert_team_only(site, chrome, "b")


def test_the_widest_view_answers(site: Site) -> None:
    """The longest span the API answers (800 days) by the hour: its rows, and no chart (too
    many steps to draw); a day more is the API's 400."""
    cookie = {"Cookie": f"gfo_session={site.session('finance')}"}
    view = {"from": "2025-10-01", "to": "2027-12-09", "step": "hour", "group_by": "team"}
    r = site.api.http.get("/ui/explore", params=view, headers=cookie)
    assert r.status_code == 200 and "Too many steps to draw" in r.text
    assert 'data-group="{&#34;team&#34;: &#34;a&#34;}"' in r.text
    r = site.api.http.get("/ui/explore", params={**view, "to": "2027-12-10"}, headers=cookie)
    assert r.status_code == 400 and "800" in r.text


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"from": "2026-11-01"}, "give both days"),
        ({"from": "20261101", "to": "2026-11-30"}, "from: expected a day"),
        ({"from": "2026-02-30", "to": "2026-03-01"}, "from: expected a day"),
        ({"from": "2026-11-01", "to": "9999-12-31"}, "to: expected a day"),
        ({"step": "fortnight"}, "step: use any of"),
        ({"idle": "shared"}, "idle: use any of"),
        ({"group_by": "team,team"}, "twice"),
        ({"group_by": "label:app"}, "group_by"),
        ({"add": "controller", "value": "x"}, "not a dimension"),
        ({"team": "a\x00b"}, ""),
    ],
)
def test_a_bad_view_is_a_short_400(site: Site, params: dict[str, str], says: str) -> None:
    cookie = {"Cookie": f"gfo_session={site.session('finance')}"}
    for path in ("/ui/explore", "/ui/explore/costs.json")[: 1 if "add" in params else 2]:
        r = site.api.http.get(path, params=params, headers=cookie)
        assert r.status_code == 400, (path, params, r.status_code)
        assert says in r.text and len(r.content) < 20_000


def test_the_explorer_offers_the_months_focus_files(site: Site) -> None:
    """Beside the JSON: the FOCUS 1.2 and 1.3 files of the billing month the view starts in,
    the API's bytes."""
    cookie = {"Cookie": f"gfo_session={site.session('finance')}"}
    r = site.api.http.get(
        "/ui/explore", params={"from": "2026-11-05", "to": "2026-12-02"}, headers=cookie
    )
    assert r.status_code == 200
    assert 'href="/ui/reports/focus.csv?month=2026-11" download>FOCUS 1.2' in r.text
    link = "/ui/reports/focus.csv?month=2026-11&amp;version=1.3"
    assert f'href="{link}" download>FOCUS 1.3' in r.text
    page = site.api.http.get(link.replace("&amp;", "&"), headers=cookie)
    direct = site.api.get("/v1/reports/focus.csv", "finance", month="2026-11", version="1.3")
    assert page.status_code == 200 and page.content == direct.content
    assert page.text.startswith("AllocatedMethodDetails,AllocatedMethodId,")
