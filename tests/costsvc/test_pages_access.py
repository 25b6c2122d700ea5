"""Who may see what on the pages and their downloads (costsvc/pages/): the same roles as the API
(tests/costsvc/test_api_access.py), a session instead of a bearer token; in a real browser:
test_pages_browser.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import httpx
import pytest

from tests.costsvc.access_api import TEAMS, access_api
from tests.costsvc.apiserver import Api
from tests.prom import Prometheus


@pytest.fixture(scope="module")
def api(prometheus: Prometheus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with access_api(prometheus, tmp_path_factory) as running:
        yield running


FLEET_PAGES = (
    "/ui/overview",
    "/ui/overview?month=2026-10",
    "/ui/finance",
    "/ui/finance/close?month=2026-10",
    "/ui/fleet",
)
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@contextmanager
def signed_in(api: Api, who: str) -> Iterator[httpx.Client]:
    """A client holding a pages session of ``who``'s token (a cookie; no bearer header)."""
    with httpx.Client(base_url=api.base, timeout=30) as client:
        r = client.post("/ui/signin", data={"token": api.tokens[who]}, headers={"Origin": api.base})
        assert r.status_code == 303, r.text
        yield client


def form_token(client: httpx.Client, page: str) -> str:
    found = CSRF.search(client.get(page).text)
    assert found, page
    return found[1]


@pytest.mark.parametrize("who", ["admin", "finance", *(f"team:{t}" for t in TEAMS)])
def test_pages_and_downloads_answer_each_role_as_the_api(api: Api, who: str) -> None:
    me = who.removeprefix("team:") if who.startswith("team:") else None
    with signed_in(api, who) as client:
        for page in FLEET_PAGES:
            assert client.get(page).status_code == (200 if me is None else 403), page
        for team in (*TEAMS, "__idle__", "__unallocated__"):
            expected = 200 if me in (None, team) else 404
            assert client.get(f"/ui/teams/{team}").status_code == expected, team
        # no chargeback line, budget or token names it: no such page, for every role
        unknown = client.get("/ui/teams/doesnotexist")
        assert unknown.status_code == 404, who
        assert "text/html" in unknown.headers["content-type"]
        for kind in ("chargeback", "focus"):
            for month in ("2026-11", "2026-10"):
                page = client.get(f"/ui/reports/{kind}.csv", params={"month": month})
                direct = api.get(f"/v1/reports/{kind}.csv", who, month=month)
                assert page.status_code == direct.status_code == 200
                assert page.content == direct.content, (kind, month)
                assert page.headers["content-disposition"] == direct.headers["content-disposition"]
        page13 = client.get("/ui/reports/focus.csv", params={"month": "2026-11", "version": "1.3"})
        direct13 = api.get("/v1/reports/focus.csv", who, month="2026-11", version="1.3")
        assert page13.status_code == direct13.status_code == 200
        assert page13.content == direct13.content
        bad = client.get("/ui/reports/focus.csv", params={"month": "2026-11", "version": "9"})
        assert bad.status_code == 400
        if me is None:  # pod labels are text on a page, never markup (history.py HOSTILE)
            page = client.get("/ui/overview", params={"month": "2026-11"}).text
            assert "=HYPERLINK(&#34;x&#34;)" in page and 'HYPERLINK("x")' not in page
            assert "back\\slash" in page and "チーム é" in page
            # a past month (before the history): its own month picked, no present-day advice
            past = client.get("/ui/overview", params={"month": "2026-10"}).text
            assert '<option value="2026-10" selected>' in past
            assert 'id="savings"' not in past
            assert 'id="savings"' in client.get("/ui/overview").text
        home = "/ui/overview" if me is None else f"/ui/teams/{me}"
        assert client.get("/ui/").headers["location"] == home
        csrf = form_token(client, home)
        close = client.post(
            "/ui/finance/close",
            data={"month": "2026-12", "csrf": csrf},
            headers={"Origin": api.base},
        )  # December has not ended (now is 2026-11-20): refused, as the API refuses it
        assert close.status_code == (409 if me is None else 403), close.text
        assert api.http.post("/v1/months/2026-12/close", headers=api.auth(who)).status_code == (
            409 if me is None else 403
        )


def test_a_pages_session_is_a_cookie_for_the_pages_only(api: Api) -> None:
    http = api.http
    origin = {"Origin": api.base}
    # no session: the pages lead to the sign-in page, the downloads too
    for path in ("/ui/", "/ui/overview", "/ui/teams/a", "/ui/reports/chargeback.csv?month=2026-11"):
        r = http.get(path)
        assert (r.status_code, r.headers.get("location")) == (303, "/ui/signin"), path
    assert http.get("/").headers["location"] == "/ui/"
    # a token never goes in a URL: one there is ignored
    r = http.get("/ui/signin", params={"token": api.tokens["finance"]})
    assert r.status_code == 200 and "set-cookie" not in r.headers
    # refused sign-ins: unknown token, a metrics token, a form from another site (or none)
    assert http.post("/ui/signin", data={"token": "gfo_nope"}, headers=origin).status_code == 401
    metrics = http.post("/ui/signin", data={"token": api.tokens["metrics"]}, headers=origin)
    assert metrics.status_code == 403 and "set-cookie" not in metrics.headers
    for headers in ({}, {"Origin": "http://evil.example"}, {"Origin": "null"}):
        r = http.post("/ui/signin", data={"token": api.tokens["admin"]}, headers=headers)
        assert r.status_code == 403 and "set-cookie" not in r.headers, headers
    # the cookie: HttpOnly, SameSite=Strict, the pages' path, the session's lifetime
    r = http.post("/ui/signin", data={"token": api.tokens["finance"]}, headers=origin)
    cookie = r.headers["set-cookie"]
    assert api.tokens["finance"] not in cookie
    for part in ("HttpOnly", "SameSite=strict", "Path=/ui", "Max-Age=28800"):
        assert part in cookie, cookie
    session = {"gfo_session": r.cookies["gfo_session"]}

    def with_cookie(path: str) -> int:
        with httpx.Client(base_url=api.base, cookies=session) as fresh:
            return fresh.get(path).status_code

    assert with_cookie("/ui/finance") == 200
    assert with_cookie("/v1/costs") == 401  # the API takes bearer tokens only
    # the close form: our origin and the session's CSRF token, or 403 (and nothing closed)
    with httpx.Client(base_url=api.base, cookies=session) as client:
        csrf = form_token(client, "/ui/finance")
        for data, headers in (
            ({"month": "2026-10"}, origin),
            ({"month": "2026-10", "csrf": "x" * len(csrf)}, origin),
            ({"month": "2026-10", "csrf": csrf}, {"Origin": "http://evil.example"}),
            ({"month": "2026-10", "csrf": csrf}, {"Referer": "http://evil.example/x"}),
            ({"month": "2026-10", "csrf": csrf}, {}),
        ):
            r = client.post("/ui/finance/close", data=data, headers=headers)
            assert r.status_code == 403, (data, headers)
        assert not api.get("/v1/months/2026-10", "finance").json()["closed"]
        assert client.post("/ui/signout", data={"csrf": ""}, headers=origin).status_code == 403
        r = client.post("/ui/signout", data={"csrf": csrf}, headers=origin)
        assert (r.status_code, r.headers["location"]) == (303, "/ui/signin")
    assert with_cookie("/ui/finance") == 303  # signed out: the same cookie is worth nothing
    # a session ends when it expires, and when its token is revoked
    with signed_in(api, "team:a") as client:
        assert client.get("/ui/teams/a").status_code == 200
        api.clock.now += timedelta(hours=8)
        try:
            assert client.get("/ui/teams/a").status_code == 303
        finally:
            api.clock.now -= timedelta(hours=8)
    made = http.post(
        "/v1/tokens",
        json={"name": "lead-b", "role": "team", "team": "b"},
        headers=api.auth("admin"),
    )
    api.tokens["lead-b"] = made.json()["token"]
    with signed_in(api, "lead-b") as client:
        assert client.get("/ui/teams/b").status_code == 200
        assert http.delete("/v1/tokens/lead-b", headers=api.auth("admin")).status_code == 204
        assert client.get("/ui/teams/b").status_code == 303
