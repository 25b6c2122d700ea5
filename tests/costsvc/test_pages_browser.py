"""The cost service's pages in a real headless Chromium, on SQLite and PostgreSQL: signed in
with API tokens, a team session sees its own team only, the overview's figures are
/v1/costs', a download is the API's bytes, a month closes and an incomplete one is refused —
and on every page no console error, no request to another origin (the browser's own logs),
no axe-core violation, a laptop and a phone screenshot under test-artifacts/pages/. The
origin and tenancy checks are shown to fail when what they guard is broken.

One browser for the module; the history is pages_history.py (no Prometheus)."""

from __future__ import annotations

import csv
import hashlib
import io
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from tests.costsvc.apiserver import Api, Clock, serve
from tests.costsvc.browser import (
    ARTIFACTS,
    Browser,
    Visit,
    assert_clean,
    browser,
    copy_of_page,
    errors,
    foreign,
    origin,
)
from tests.costsvc.conftest import fresh_database
from tests.costsvc.pages_history import FAILED, NOW, TEAMS, reprice, seed

MONEY = ("total_cost", "allocated_cost", "used_cost", "allocated_idle_cost", "unmeasured_cost")


@dataclass
class Site:
    api: Api
    kind: str  # sqlite | postgresql
    sessions: dict[str, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return self.api.base

    def session(self, who: str) -> str:
        """A session of ``who``'s token, signed in once over HTTP (the form itself is
        tested by test_every_page_signed_in_as_finance and test_sign_out_ends_the_session)."""
        if who not in self.sessions:
            r = self.api.http.post(
                "/ui/signin", data={"token": self.api.tokens[who]}, headers={"Origin": self.base}
            )
            assert r.status_code == 303, r.text
            self.sessions[who] = r.cookies["gfo_session"]
            self.api.http.cookies.clear()  # a sign-in ends the session whose cookie it sends
        return self.sessions[who]


def enter(chrome: Browser, site: Site, who: str) -> None:
    chrome.enter(site.base, site.session(who))


@pytest.fixture(scope="module")
def chrome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    with browser(tmp_path_factory.mktemp("chromium")) as b:
        yield b


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    work = tmp_path_factory.mktemp(f"pages-{request.param}")
    with fresh_database(request.param, request, work) as url:
        seed(url)
        with serve(url, Clock(NOW), TEAMS) as api:
            yield Site(api, request.param)


def shoot(chrome: Browser, site: Site, name: str) -> None:
    """The page shown, as a laptop and a phone see it; on the phone nothing may be wider
    than the screen (wide tables scroll inside their own region)."""
    chrome.screenshot(ARTIFACTS / site.kind / f"{name}-laptop.png")
    widths = chrome.screenshot(ARTIFACTS / site.kind / f"{name}-phone.png", phone=True)
    assert widths["document"] <= widths["window"], (name, widths)


def looked_at(chrome: Browser, site: Site, url: str, name: str, status: int = 200) -> Visit:
    """Open a page: its status, a clean log, its screenshots, and (once: the pages are the
    same on either database) no axe-core violation."""
    visit = chrome.visit(site.base + url)
    assert visit.status == status, (url, visit.status)
    assert_clean(visit, site.base, refused=site.base + url if status >= 400 else "")
    if site.kind == "sqlite":
        assert chrome.axe() == [], url
    shoot(chrome, site, name)
    return visit


def test_every_page_signed_in_as_finance(site: Site, chrome: Browser) -> None:
    token = site.api.tokens["finance"]
    looked_at(chrome, site, "/ui/signin", "signin")
    signed = chrome.sign_in(site.base, token)
    assert_clean(signed, site.base)
    assert chrome.driver.current_url == f"{site.base}/ui/overview"
    for url, name in (
        ("/ui/overview", "overview"),
        ("/ui/overview?month=2026-11", "overview-2026-11"),
        ("/ui/teams/a", "team-a-as-finance"),
        ("/ui/finance", "finance"),
        ("/ui/finance/close?month=2026-11", "close-confirm"),
        ("/ui/fleet", "fleet"),
        ("/ui/teams/a/budget", "budget-new"),
        ("/ui/explore?window=lastmonth&step=&group_by=gpu_model&idle=even", "explore-models"),
    ):
        visit = looked_at(chrome, site, url, name)
        assert not [u for u in visit.requests if token in u]  # the token is never in a URL
    assert not [u for u in signed.requests if token in u]
    # the session cookie: HttpOnly (no script sees it), SameSite=Strict, the pages' path only
    cookies = {c["name"]: c for c in chrome.driver.get_cookies()}
    session = cookies["gfo_session"]
    assert (session["httpOnly"], session["sameSite"], session["path"]) == (True, "Strict", "/ui")
    assert token not in session["value"]
    assert chrome.driver.execute_script("return document.cookie") == ""


def rounded(text: str) -> str:
    return f"{Decimal(text).quantize(Decimal('0.01'), ROUND_HALF_EVEN):,}"


@pytest.mark.parametrize("month", ["2026-12", "2026-11"])
def test_the_overview_is_v1_costs(site: Site, chrome: Browser, month: str) -> None:
    enter(chrome, site, "finance")
    assert_clean(chrome.visit(f"{site.base}/ui/overview?month={month}"), site.base)
    shown: dict[str, dict[str, tuple[str, str]]] = {}
    for row in chrome.driver.find_elements(By.CSS_SELECTOR, "#by-team tbody tr[data-team]"):
        cells = row.find_elements(By.CSS_SELECTOR, "td[data-field] .num")
        shown[row.get_attribute("data-team") or ""] = {
            c.find_element(By.XPATH, "..").get_attribute("data-field") or "": (
                c.get_attribute("data-exact") or "",
                c.text,
            )
            for c in cells
        }
    start = f"{month}-01T00:00:00Z"
    end = "2027-01-01T00:00:00Z" if month == "2026-12" else "2026-12-01T00:00:00Z"
    answer = site.api.get("/v1/costs", "finance", group_by="team", start=start, end=end)
    rows = {r["group"]["team"]: r for r in answer.json()["rows"]}
    assert set(shown) == set(rows) >= {"a", "b", "nlp", "__idle__", "__unallocated__"}
    for team, r in rows.items():
        for name in (*MONEY, "idle_cost", "gpu_hours"):
            assert shown[team][name] == (r[name], rounded(r[name])), (team, name)
    if month == "2026-12":  # the window the API names "month" is the same question
        now = site.api.get("/v1/costs", "finance", group_by="team", window="month").json()
        assert {r["group"]["team"]: r["total_cost"] for r in now["rows"]} == {
            t: v["total_cost"][0] for t, v in shown.items()
        }


def test_the_fleet_counts_each_gpus_hours(site: Site, chrome: Browser) -> None:
    """December's six hours (pages_history.py): A0 held all of them, A1 half, B0 all (two
    pods), B1 50 of 60 minutes (10 lost), C0 none."""
    enter(chrome, site, "finance")
    assert_clean(chrome.visit(f"{site.base}/ui/fleet?month=2026-12"), site.base)

    def table(css: str) -> list[list[str]]:
        rows = chrome.driver.find_elements(By.CSS_SELECTOR, f"{css} tbody tr")
        return [[c.text for c in r.find_elements(By.CSS_SELECTOR, "th, td")] for r in rows]

    # model, GPUs, hours, allocated, idle, unavailable
    assert table("#by-model") == [
        ["NVIDIA A100-SXM4-80GB", "2", "12.0", "5.0", "6.0", "1.0"],
        ["NVIDIA H100 80GB HBM3", "3", "18.0", "15.0", "3.0", "0.0"],
    ]
    # cluster, node, GPUs, hours, allocated, idle, unavailable, from the integrals (none: the
    # history is gauges only)
    assert table("#by-node") == [
        ["c1", "node-a", "2", "12.0", "9.0", "3.0", "0.0", "0.0"],
        ["c1", "node-b", "2", "12.0", "11.0", "0.0", "1.0", "0.0"],
        ["c1", "node-c", "1", "6.0", "0.0", "6.0", "0.0", "0.0"],
    ]
    assert [r[0] for r in table("#idlest")] == ["GPU-C0", "GPU-A1"]


def test_downloads_are_the_api_bytes(site: Site, chrome: Browser) -> None:
    enter(chrome, site, "finance")
    assert_clean(chrome.visit(f"{site.base}/ui/finance"), site.base)
    for kind, name, version in (
        ("chargeback", "chargeback-2026-11.csv", ""),
        ("focus", "focus-2026-11.csv", ""),
        ("focus", "focus-1.3-2026-11.csv", "1.3"),
    ):
        more = f"&version={version}" if version else ""
        with chrome.acting() as visit:
            got = chrome.download(f'a[href="/ui/reports/{kind}.csv?month=2026-11{more}"]', name)
        assert_clean(visit, site.base)
        params = {"month": "2026-11"} | ({"version": version} if version else {})
        api = site.api.get(f"/v1/reports/{kind}.csv", "finance", **params)
        assert api.status_code == 200 and len(api.content) > 1000
        assert got == api.content, (kind, version)
    # a team session downloads its own team's rows: the API's bytes for that team's token
    enter(chrome, site, "team:a")
    chrome.visit(f"{site.base}/ui/teams/a")
    got = chrome.download(
        'a[href="/ui/reports/chargeback.csv?month=2026-12"]', "chargeback-2026-12-a.csv"
    )
    api = site.api.get("/v1/reports/chargeback.csv", "team:a", month="2026-12")
    assert got == api.content
    assert {r["team"] for r in csv.DictReader(io.StringIO(got.decode()))} == {"a"}


def assert_team_only(chrome: Browser, site: Site, me: str) -> None:
    """A team session: its own page shows its team and no other's name; every other team's
    page answers 404 and the fleet-wide pages 403, as the API answers that token."""
    own = chrome.visit(f"{site.base}/ui/teams/{me}")
    assert own.status == 200
    assert_clean(own, site.base)
    assert chrome.texts("h1 .team-name") == [me]
    cells = set(chrome.texts("main td, main th"))
    others = [t for t in TEAMS if t != me] + ["__idle__", "__unallocated__"]
    assert not cells & set(others), cells & set(others)
    assert chrome.texts("header nav a") == [f"Team {me}", "Explore"]
    for other in others:
        visit = chrome.visit(f"{site.base}/ui/teams/{other}")
        assert visit.status == 404, (other, visit.status)
        assert other not in chrome.texts("h1 .team-name")
    for page in ("overview", "finance", "fleet", "finance/close?month=2026-10"):
        assert chrome.visit(f"{site.base}/ui/{page}").status == 403, page


def test_a_team_session_sees_only_its_team(site: Site, chrome: Browser) -> None:
    """(Every team x every page and download, over HTTP: test_api_access.py.)"""
    enter(chrome, site, "team:a")
    assert_team_only(chrome, site, "a")
    looked_at(chrome, site, "/ui/teams/a", "team-a")
    looked_at(chrome, site, "/ui/teams/nlp", "team-nlp-as-a-404", status=404)


def test_the_tenancy_check_fails_when_the_pages_let_a_team_see_another(
    site: Site, chrome: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same check, with the team page's tenancy rule switched off (the server runs in
    this process): it must fail."""
    from costsvc.pages import team

    monkeypatch.setattr(team, "check_team", lambda who, name: None)
    enter(chrome, site, "team:b")
    with pytest.raises(AssertionError):
        assert_team_only(chrome, site, "b")


@pytest.fixture(scope="module")
def static_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A plain file server on loopback (another origin than the cost service's)."""
    root = tmp_path_factory.mktemp("copies")
    handler = partial(SimpleHTTPRequestHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def test_the_origin_check_fails_when_a_page_loads_from_another_origin(
    site: Site, chrome: Browser, static_server: tuple[str, Path]
) -> None:
    enter(chrome, site, "finance")
    chrome.visit(f"{site.base}/ui/overview")
    # "localhost" is another origin than "127.0.0.1", on this same loopback server
    outside = site.base.replace("127.0.0.1", "localhost") + "/ui/static/favicon.svg"
    assert origin(outside) != site.base
    # 1. a copy of the overview served without our headers, with an outside <img>: the
    #    browser fetches it, and the check names that request
    html = chrome.driver.page_source
    base, root = static_server
    (root / "overview.html").write_text(copy_of_page(html, f'<img alt="" src="{outside}">'))
    visit = chrome.visit(f"{base}/overview.html")
    assert outside in foreign(visit, base)
    with pytest.raises(AssertionError):
        assert_clean(visit, base)
    # 2. the same <img> put into the real page: its Content-Security-Policy blocks it, the
    #    console says so, and the check fails on that
    chrome.visit(f"{site.base}/ui/overview")
    with chrome.acting() as visit:
        chrome.driver.execute_script(
            "const i = document.createElement('img'); i.alt = ''; i.src = arguments[0];"
            "document.body.appendChild(i);",
            outside,
        )
    chrome.until_console(visit, "Content Security Policy")
    assert any("Content Security Policy" in e for e in errors(visit)), visit.console
    with pytest.raises(AssertionError):
        assert_clean(visit, site.base)


def test_close_a_month_and_refuse_one(site: Site, chrome: Browser) -> None:
    enter(chrome, site, "finance")
    assert_clean(chrome.visit(f"{site.base}/ui/finance"), site.base)
    states = {
        r.get_attribute("data-month"): r.get_attribute("data-state")
        for r in chrome.driver.find_elements(By.CSS_SELECTOR, "#month-states tr[data-month]")
    }
    assert states == {"2026-12": "open", "2026-11": "incomplete", "2026-10": "closable"}
    # November: refused, naming its failed and missing hours; nothing closed
    assert chrome.click('a[href="/ui/finance/close?month=2026-11"]').status == 200
    visit = chrome.click("#confirm-close")
    assert visit.status == 409
    assert_clean(visit, site.base, refused=f"{site.base}/ui/finance/close")
    refused = chrome.texts("#refused-hours li")
    assert f"failed: c1 {FAILED:%Y-%m-%dT%H:%M:%SZ}" in refused
    assert "missing: c1 2026-11-01T00:00:00Z..2026-11-01T11:00:00Z (12 hours)" in refused
    assert not site.api.get("/v1/months/2026-11", "finance").json()["closed"]
    shoot(chrome, site, "close-refused")
    # October: closed, its hash shown as the API gives it, the download those bytes
    chrome.visit(f"{site.base}/ui/finance/close?month=2026-10")
    visit = chrome.click("#confirm-close")
    assert_clean(visit, site.base)
    assert chrome.driver.current_url == f"{site.base}/ui/finance?closed=2026-10"
    state = site.api.get("/v1/months/2026-10", "finance").json()
    assert state["closed"] and state["closed_by"] == "finance"
    row = chrome.driver.find_element(By.CSS_SELECTOR, '#month-states tr[data-month="2026-10"]')
    assert row.get_attribute("data-state") == "closed"
    sha = row.find_element(By.CSS_SELECTOR, "[data-sha256]").get_attribute("data-sha256")
    assert sha == state["chargeback_csv_sha256"]
    got = chrome.download(
        'a[href="/ui/reports/chargeback.csv?month=2026-10"]', "chargeback-2026-10.csv"
    )
    assert hashlib.sha256(got).hexdigest() == sha
    # a back-dated price for an October hour: a correction, billed in November, listed
    assert chrome.texts("#corrections-table tbody tr") == []
    reprice(site.api.db_url, datetime(2026, 10, 31, 22, tzinfo=UTC), "3.00")
    chrome.visit(f"{site.base}/ui/finance")
    rows = chrome.driver.find_elements(By.CSS_SELECTOR, "#corrections-table tbody tr")
    fixed = {
        tuple(c.text for c in r.find_elements(By.CSS_SELECTOR, "th, td")[:3]): r.find_element(
            By.CSS_SELECTOR, ".num"
        ).get_attribute("data-exact")
        for r in rows
    }
    # team a held 1.5 H100-hours at 22:00 (GPU-A0 all hour, GPU-A1 half): 1.5 x 0.50 more
    assert fixed[("2026-11", "2026-10", "a")] == "0.750000"
    assert set(fixed) == {("2026-11", "2026-10", t) for t in ("a", "b", "nlp", "__idle__")}
    audit = site.api.get("/v1/audit", "admin").json()[0]
    assert (audit["actor"], audit["action"], audit["target"]) == (
        "finance",
        "month.close",
        "2026-10",
    )
    shoot(chrome, site, "finance-after-close")


def test_set_a_budget_through_the_form(site: Site, chrome: Browser) -> None:
    enter(chrome, site, "finance")
    looked_at(chrome, site, "/ui/teams/a/budget", "budget-new")
    chrome.driver.find_element(By.ID, "project").send_keys("eval")
    chrome.driver.find_element(By.ID, "amount").send_keys("-1")
    visit = chrome.click("#save-budget")
    assert visit.status == 422
    assert_clean(visit, site.base, refused=f"{site.base}/ui/teams/a/budget")
    assert "amount: Input should be greater than 0" in chrome.texts("#budget-error")[0]
    field = chrome.driver.find_element(By.ID, "amount")
    field.clear()
    field.send_keys("7.5")
    visit = chrome.click("#save-budget")
    assert_clean(visit, site.base)
    assert chrome.driver.current_url == f"{site.base}/ui/teams/a#budgets"
    made = [b for b in site.api.get("/v1/budgets", "finance").json() if b["project"] == "eval"]
    assert [(b["team"], b["amount"]) for b in made] == [("a", "7.500000")]
    assert chrome.driver.find_elements(By.CSS_SELECTOR, f'tr[data-budget="{made[0]["id"]}"]')


def test_sign_out_ends_the_session(site: Site, chrome: Browser) -> None:
    chrome.sign_in(site.base, site.api.tokens["admin"])
    chrome.visit(f"{site.base}/ui/fleet")
    old = chrome.driver.get_cookie("gfo_session")
    assert old is not None
    visit = chrome.click("header form.signout button")
    assert_clean(visit, site.base)
    assert chrome.driver.current_url == f"{site.base}/ui/signin"
    assert chrome.driver.get_cookie("gfo_session") is None
    # the old cookie is worth nothing now, even sent again
    chrome.driver.add_cookie({"name": "gfo_session", "value": old["value"], "path": "/ui"})
    chrome.visit(f"{site.base}/ui/fleet")
    assert chrome.driver.current_url == f"{site.base}/ui/signin"


def test_a_phone_reads_the_charts_and_the_key_columns(site: Site, chrome: Browser) -> None:
    """At 390 px every chart's axis text is drawn at 11 px or more (the chart scrolls in its
    own region), and every table's key column stays in view with the table scrolled to its
    end (the charts' tables opened)."""
    enter(chrome, site, "finance")
    wide = 0
    for url in ("/ui/overview", "/ui/overview?month=2026-11", "/ui/teams/a", "/ui/fleet"):
        chrome.visit(site.base + url)
        with chrome.phone():
            sizes = chrome.axis_text_px()
            hidden, more = chrome.key_columns()
        assert sizes and min(sizes) >= 11, (url, min(sizes, default=0))
        assert hidden == [], (url, hidden)
        wide += more
    chrome.visit(site.base + "/ui/finance")
    with chrome.phone():
        hidden, more = chrome.key_columns()
    assert hidden == [] and wide + more >= 3, (hidden, wide + more)


@pytest.mark.parametrize("month", ["2026-12", "2026-11"])
def test_the_daily_charts_table_is_v1_costs_by_day(site: Site, chrome: Browser, month: str) -> None:
    """The overview's daily chart has its numbers in a table: each day's cost per team as
    /v1/costs?group_by=team&step=day answers it, and each column the chart draws."""
    enter(chrome, site, "finance")
    assert_clean(chrome.visit(f"{site.base}/ui/overview?month={month}"), site.base)
    shown: dict[tuple[str, str], str] = {}
    for cell in chrome.driver.find_elements(By.CSS_SELECTOR, "#daily-numbers-table td[data-name]"):
        day = cell.find_element(By.XPATH, "..").get_attribute("data-day") or ""
        exact = cell.find_element(By.CSS_SELECTOR, ".num").get_attribute("data-exact") or ""
        shown[(day, cell.get_attribute("data-name") or "")] = exact
    start = f"{month}-01T00:00:00Z"
    end = "2027-01-01T00:00:00Z" if month == "2026-12" else "2026-12-01T00:00:00Z"
    answer = site.api.get(
        "/v1/costs", "finance", group_by="team", step="day", start=start, end=end
    ).json()["rows"]
    api = {(r["start"][:10], r["group"]["team"]): r["total_cost"] for r in answer}
    assert len(api) == len(answer) and api
    assert {k: v for k, v in shown.items() if Decimal(v)} == {
        k: v for k, v in api.items() if Decimal(v)
    }
    assert all(Decimal(v) == 0 for k, v in shown.items() if k not in api)
    drawn = chrome.driver.execute_script(
        "return [...document.querySelectorAll('#daily-chart-title ~ rect > title')]"
        ".map(t => t.textContent);"
    )
    assert drawn
    for tooltip in drawn:  # "DD team: 1.23"
        label, text = tooltip.split(": ")
        dd, team = label.split(" ", 1)
        assert rounded(shown[(f"{month}-{dd}", team)]) == text, tooltip
