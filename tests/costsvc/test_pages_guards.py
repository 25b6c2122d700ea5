"""The pages' sign-in and the headers of every answer, over real HTTP on SQLite and PostgreSQL:
sign-ins limited per client and per token (429 with Retry-After, the limiter's memory bounded),
sessions per token capped, a new sign-in ending the browser's previous session, and the
security headers on every answer under /ui and /v1 — errors of the request limits and
Starlette's redirects included — with a ``Location`` never built from ``Host``."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import create_engine, func, select

from costsvc.api.headers import CSP, relative
from costsvc.api.rates import MAX_KEYS, SlidingWindow, attempt
from costsvc.auth.tokens import digest
from costsvc.db.migrate import upgrade
from costsvc.db.models import ApiToken, WebSession
from tests.costsvc.apiserver import NOV20, Api, Clock, serve
from tests.costsvc.conftest import fresh_database

LIMITS = {
    "signin_per_client_per_minute": 4,
    "signin_per_token_per_minute": 3,
    "sessions_per_token": 2,
    "max_body_bytes": 1024,
}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with fresh_database(request.param, request, tmp_path_factory.mktemp("guards")) as url:
        upgrade(url)
        with serve(url, Clock(NOV20), ["a"], **LIMITS) as running:
            yield running


def sign_in(api: Api, who: str, client: str, browser: httpx.Client | None = None) -> httpx.Response:
    """A sign-in of ``who``'s token (or the text ``who``) from the address ``client`` (as a
    proxy on loopback names it), in ``browser`` (its cookies) or a fresh one."""
    headers = {"Origin": api.base, "X-Forwarded-For": client}
    token = api.tokens.get(who, who)
    if browser is not None:
        return browser.post("/ui/signin", data={"token": token}, headers=headers)
    with httpx.Client(base_url=api.base, timeout=30) as fresh:
        return fresh.post("/ui/signin", data={"token": token}, headers=headers)


def alive(api: Api, session_id: str) -> bool:
    with httpx.Client(base_url=api.base, cookies={"gfo_session": session_id}) as fresh:
        answer = fresh.get("/ui/")
    assert answer.status_code in (303, 307), answer.status_code
    return answer.headers["location"] != "/ui/signin"


def sessions_of(api: Api, who: str) -> int:
    engine = create_engine(api.db_url)
    with engine.connect() as conn:
        count = conn.execute(
            select(func.count())
            .select_from(WebSession)
            .join(ApiToken, ApiToken.id == WebSession.token_id)
            .where(ApiToken.token_sha256 == digest(api.tokens[who]))
        ).scalar_one()
    engine.dispose()
    return int(count)


def test_sign_in_is_limited_per_client_and_per_token_and_sessions_per_token_are_capped(
    api: Api,
) -> None:
    # sessions per token: a third sign-in ends the token's oldest session
    opened = [sign_in(api, "finance", "10.0.1.1") for _ in range(3)]
    assert [r.status_code for r in opened] == [303, 303, 303]
    cookies = [r.cookies["gfo_session"] for r in opened]
    assert [alive(api, c) for c in cookies] == [False, True, True]
    assert sessions_of(api, "finance") == 2
    # per token: a fourth attempt within the minute is refused, from any client, and opens
    # nothing
    refused = sign_in(api, "finance", "10.0.1.2")
    assert refused.status_code == 429 and "set-cookie" not in refused.headers
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert sessions_of(api, "finance") == 2
    # per client: its fifth attempt within the minute is refused, whatever the token
    for n in range(4):
        assert sign_in(api, f"gfo_wrong{n}", "10.0.1.3").status_code == 401
    flooded = sign_in(api, "admin", "10.0.1.3")
    assert flooded.status_code == 429 and "set-cookie" not in flooded.headers
    assert 1 <= int(flooded.headers["retry-after"]) <= 60
    assert sign_in(api, "admin", "10.0.1.4").status_code == 303  # another client may
    # the limiter's memory is bounded under a flood of distinct clients and tokens
    assert api.app.state.signins.per_client.max_keys == MAX_KEYS
    assert api.app.state.signins.per_token.max_keys == MAX_KEYS
    window = SlidingWindow(2, max_keys=100)
    for n in range(5000):
        assert attempt([(window, f"client-{n}")]) == 0
    assert len(window) == 100


def test_a_new_sign_in_ends_the_browsers_previous_session(api: Api) -> None:
    with httpx.Client(base_url=api.base, timeout=30) as browser:
        first = sign_in(api, "team:a", "10.0.2.1", browser)
        assert first.status_code == 303
        second = sign_in(api, "team:a", "10.0.2.1", browser)
        assert second.status_code == 303
        third = sign_in(api, "admin", "10.0.2.1", browser)  # another token, the same browser
        assert third.status_code == 303
    ids = [r.cookies["gfo_session"] for r in (first, second, third)]
    assert [alive(api, i) for i in ids] == [False, False, True]


PAGE = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
    "x-frame-options": "DENY",
}
API = {"x-content-type-options": "nosniff", "cache-control": "no-store"}


def carries(answer: httpx.Response, expected: dict[str, str]) -> None:
    got = {name: answer.headers.get(name) for name in expected}
    assert got == expected, (answer.request.url, answer.status_code, got)


def test_every_answer_under_ui_and_v1_carries_the_security_headers(api: Api) -> None:
    http = api.http
    long_path = "/ui/" + "x" * 3000
    pages = {
        400: http.get("/ui/overview", params={"month": "\x00"}),
        414: http.get(long_path),
        413: http.post("/ui/signin", content=b"token=" + b"x" * 2000, headers={"Origin": api.base}),
        200: http.get("/ui/signin"),
        303: http.get("/ui/overview"),
        404: http.get("/ui/nothing-here"),
    }
    for status, answer in pages.items():
        assert answer.status_code == status, (status, answer.text[:200])
        carries(answer, PAGE)
    # Starlette's trailing-slash redirect: the headers, and a Location of our own path only
    for host in ("evil.example", "127.0.0.1"):
        moved = http.get("/ui/signin/", headers={"Host": host})
        assert moved.status_code == 307
        assert moved.headers["location"] == "/ui/signin"
        carries(moved, PAGE)
    assert relative("http://evil.example//other.example/x?a=1") == "/other.example/x?a=1"
    static = http.get("/ui/static/pages.css")
    assert static.status_code == 200 and static.headers["x-content-type-options"] == "nosniff"
    # the API: money and refusals alike, its own errors and the limits' ones
    v1 = {
        200: api.get("/v1/costs", "finance", month="2026-11"),
        401: http.get("/v1/costs"),
        400: api.get("/v1/costs", "finance", team="\x00"),
        414: api.get("/v1/costs", "finance", team="x" * 9000),
    }
    for status, answer in v1.items():
        assert answer.status_code == status, (status, answer.text[:200])
        carries(answer, API)
        assert "content-security-policy" not in answer.headers
    download = api.get("/v1/reports/chargeback.csv", "finance", month="2026-10")
    assert download.status_code == 200
    carries(download, API)
