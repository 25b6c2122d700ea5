"""A hostile tenant and an unlucky operator against the API, on SQLite and PostgreSQL, over
real HTTP: every hostile input is a short 4xx (never a 5xx, a dropped connection
or an echo of a large input); time ranges are exact or refused; the last admin token stays;
bodies are limited before they are read; slow clients are cut off."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from sqlalchemy import create_engine, insert

from costsvc.auth.tokens import digest
from costsvc.db.models import ApiToken
from costsvc.kit.times import iso_z
from tests.costsvc.apiserver import NOV20, Api, Clock, serve
from tests.costsvc.conftest import fresh_database
from tests.costsvc.history import HOUR3, MODEL, ingest_with
from tests.prom import Prometheus

# teams that pod labels may carry but no token could be created for any more: tokens made
# before names were validated must still get a well-formed Content-Disposition
LEGACY_TEAMS = {
    "latin": "チーム é",
    "crlf": "a\r\nSet-Cookie: x=1",
    "quote": 'q"; filename="evil.exe',
}
SMALL = 4096  # bytes a refusal may take: it names the problem, it does not echo the input


def legacy_token(db_url: str, name: str, team: str) -> str:
    """A team token stored as an older release could have stored it (no name checks)."""
    secret = f"gfo_legacy_{name}"
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(
            insert(ApiToken).values(
                name=f"legacy-{name}",
                role="team",
                team=team,
                token_sha256=digest(secret),
                created_at=datetime.now(UTC),
            )
        )
    engine.dispose()
    return secret


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api(
    request: pytest.FixtureRequest, prometheus: Prometheus, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Api]:
    with fresh_database(request.param, request, tmp_path_factory.mktemp("hostile")) as url:
        ingest_with(prometheus.url, url, MODEL, [HOUR3])
        with serve(
            url, Clock(NOV20), ["a"], body_timeout_seconds=2, header_timeout_seconds=2
        ) as running:
            for key, team in LEGACY_TEAMS.items():
                running.tokens[f"legacy:{key}"] = legacy_token(url, key, team)
            yield running


def raw(api: Api, request: bytes, read: bool = True) -> bytes:
    """``request`` sent as is on a fresh connection; what the server answers until it closes."""
    host = urlsplit(api.base)
    with socket.create_connection((host.hostname, host.port), timeout=30) as s:
        s.sendall(request)
        if not read:
            return b""
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def check_short_4xx(r: Any, status: int | None = None) -> None:
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    if status is not None:
        assert r.status_code == status, (r.status_code, r.text[:300])
    assert len(r.content) < SMALL, len(r.content)


WINDOWS = ["today", "yesterday", "week", "month", "lastmonth", "24h", "7d"]


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("tail", ["\n", "\r\n", "\x00", " "])
def test_a_window_with_a_trailing_character_is_400(api: Api, window: str, tail: str) -> None:
    check_short_4xx(api.get("/v1/costs", "team:a", window=window + tail), 400)
    assert api.get("/v1/costs", "team:a", window=window).status_code == 200


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"start": "9999-12-31T23:00:00-14:00"}, "start"),
        ({"start": "0001-01-01T00:00:00+14:00"}, "start"),
        ({"start": "0001-01-01T00:00:00Z", "end": "0001-01-02T00:00:00Z"}, "year"),
        ({"start": "2026-11-01T00:00:00Z", "end": "9999-12-31T23:59:59+14:00"}, "end"),
        ({"end": "2026-11-10T00:00:00Z"}, "start"),  # end without start: not the month to date
        ({"start": "2026-11-10T07:00:00Z", "end": "2026-11-10T07:00:00.000001Z"}, "hour"),
        ({"start": "2026-11-10T07:30:00Z", "end": "2026-11-10T08:00:00Z"}, "hour"),
        ({"start": "2026-11-10T07:00:00+05:30"}, "hour"),  # 01:30 UTC
        ({"start": "2026-11-10T07:00:00Z", "end": "2026-11-10T07:59:59Z"}, "hour"),
    ],
)
def test_time_ranges_are_exact_or_refused(api: Api, params: dict[str, str], says: str) -> None:
    r = api.get("/v1/costs", "team:a", **params)
    check_short_4xx(r, 400)
    assert says in r.json()["detail"]


def test_whole_hours_in_any_zone_are_exact_and_written_with_four_digit_years(api: Api) -> None:
    r = api.get(
        "/v1/costs", "finance", start="2026-11-10T08:00:00+01:00", end="2026-11-10T08:00:00Z"
    )
    assert r.status_code == 200, r.text
    assert (r.json()["start"], r.json()["end"]) == ("2026-11-10T07:00:00Z", "2026-11-10T08:00:00Z")
    assert r.json()["rows"], "hour 07:00 was ingested"
    assert iso_z(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00Z"
    assert iso_z(datetime(999, 12, 31, 23, tzinfo=UTC)) == "0999-12-31T23:00:00Z"


@pytest.mark.parametrize(
    "path",
    [
        "/v1/costs?pod=%00",
        "/v1/costs?pod=a%0Ab",
        "/v1/costs?team=a%0D%0A",
        "/v1/costs?group_by=team%00",
        "/v1/costs?pod=%ED%A0%80",  # a UTF-16 surrogate as UTF-8 bytes: not UTF-8
        "/v1/costs?pod=%FF",
        "/v1/teams/a%00/summary",
        "/v1/teams/a%0D%0Ab/summary",
        "/v1/budgets/1%00",
        "/v1/reports/chargeback.csv?month=2026-11%00",
        "/metrics?x=%00",
    ],
)
def test_control_characters_in_the_url_are_400(api: Api, path: str) -> None:
    check_short_4xx(api.http.get(path, headers=api.auth("team:a")), 400)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/budgets", {"team": "a\u0000", "amount": "1"}),
        ("POST", "/v1/budgets", {"team": "a", "project": "\u0000", "amount": "1"}),
        ("POST", "/v1/budgets", {"team": "\ud800", "amount": "1"}),
        ("POST", "/v1/budgets", {"team": "a", "amount": "1", "\u0000": 1}),
        ("PUT", "/v1/budgets/1", {"team": "a\u0000", "amount": "1"}),
        ("POST", "/v1/tokens", {"name": "n\u0000", "role": "admin"}),
        ("POST", "/v1/tokens", {"name": "n", "role": "team", "team": "\u0000"}),
        ("PUT", "/v1/cost-model", {"currency": "\u0000"}),
    ],
)
def test_nul_and_surrogates_in_a_body_are_400(
    api: Api, method: str, path: str, body: dict[str, Any]
) -> None:
    r = api.http.request(
        method,
        path,
        content=json.dumps(body).encode(),  # ensure_ascii: "\\u0000", "\\ud800" on the wire
        headers={**api.auth("admin"), "Content-Type": "application/json"},
    )
    check_short_4xx(r, 400)


def test_a_deeply_nested_body_is_400_not_500(api: Api) -> None:
    body = b"[" * 100_000 + b"]" * 100_000
    r = api.http.post(
        "/v1/budgets",
        content=body,
        headers={**api.auth("admin"), "Content-Type": "application/json"},
    )
    check_short_4xx(r, 400)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"team": "x" * 1_000_000, "amount": "1"}, "team"),  # 1 MB: under the body limit
        ({"team": "a", "amount": "1" * 500_000}, "amount"),
        ({"team": "a", "amount": "1", "currency": "€" * 100_000}, "currency"),
    ],
)
def test_a_large_invalid_field_is_not_echoed(api: Api, body: dict[str, Any], field: str) -> None:
    r = api.http.post("/v1/budgets", json=body, headers=api.auth("admin"))
    check_short_4xx(r, 422)
    assert field in r.text


@pytest.mark.parametrize(
    "params",
    [
        {"group_by": "x" * 5000},
        {"window": "x" * 5000},
        {"pod": "p" * 5000},
        {"step": "s" * 5000},
        {"start": "2" * 5000},
    ],
)
def test_a_long_parameter_is_not_echoed(api: Api, params: dict[str, str]) -> None:
    r = api.get("/v1/costs", "team:a", **params)
    check_short_4xx(r)
    assert len(r.content) < 1024, r.text[:300]


def test_blanks_around_listed_values_are_dropped(api: Api) -> None:
    """``group_by=team, project`` and ``team=a, b`` read as ``team,project`` and ``a,b``: each
    value stripped (kit/lists.py), as OpenCost's ``aggregate`` reads them, never a 400 naming
    `` project`` nor a filter on `` b`` that matches nothing."""
    tight = api.get("/v1/costs", group_by="team,project", team="a,b")
    blank = api.get("/v1/costs", group_by=" team , project ", team="a, b")
    assert tight.status_code == blank.status_code == 200, blank.text[:300]
    assert tight.json()["rows"] and blank.json() == tight.json()


def test_a_refusal_quotes_at_most_64_characters_and_says_where_it_cut(api: Api) -> None:
    r = api.get("/v1/costs", group_by="y" * 65)
    check_short_4xx(r, 400)
    assert f"'{'y' * 64}'…" in r.text and "y" * 65 not in r.text


@pytest.mark.parametrize("team", ["a/b", "a b", "-a", "a-", "x" * 64, "é", "a\tb", ""])
def test_teams_and_projects_are_label_values_where_created(api: Api, team: str) -> None:
    h = api.auth("admin")
    check_short_4xx(api.http.post("/v1/budgets", json={"team": team, "amount": "1"}, headers=h))
    if team:
        check_short_4xx(
            api.http.post(
                "/v1/budgets", json={"team": "a", "project": team, "amount": "1"}, headers=h
            )
        )
    r = api.http.post("/v1/tokens", json={"name": "t-x", "role": "team", "team": team}, headers=h)
    check_short_4xx(r)


@pytest.mark.parametrize("key", sorted(LEGACY_TEAMS))
def test_content_disposition_is_well_formed_for_any_team(api: Api, key: str) -> None:
    team = LEGACY_TEAMS[key]
    r = api.get("/v1/reports/chargeback.csv", f"legacy:{key}", month="2026-11")
    assert r.status_code == 200, r.text
    value = r.headers["content-disposition"]
    assert value.isascii() and "\r" not in value and "\n" not in value
    assert value.count("filename=") == 1 and value.count("filename*=") == 1
    plain = value.split('filename="', 1)[1].split('"', 1)[0]
    assert all(c.isalnum() or c in "._-" for c in plain), plain
    encoded = value.split("filename*=UTF-8''", 1)[1]
    assert ";" not in encoded and '"' not in encoded and " " not in encoded
    assert unquote(encoded) == f"chargeback-2026-11-{team}.csv"
    # its rows are its own: none (no pod of the data carries that label)
    assert r.text.count("\n") == 1


def test_the_last_admin_token_cannot_be_revoked_and_every_name_can(api: Api) -> None:
    h = api.auth("admin")
    check_short_4xx(api.http.delete("/v1/tokens/admin", headers=h), 409)
    bad = api.http.post("/v1/tokens", json={"name": "ops/ci", "role": "finance"}, headers=h)
    check_short_4xx(bad, 422)
    made = api.http.post("/v1/tokens", json={"name": "ops.ci_2", "role": "admin"}, headers=h)
    assert made.status_code == 201, made.text
    second = {"Authorization": f"Bearer {made.json()['token']}"}
    assert api.http.delete("/v1/tokens/ops.ci_2", headers=second).status_code == 204
    check_short_4xx(api.http.delete("/v1/tokens/admin", headers=h), 409)
    assert api.http.get("/v1/tokens", headers=h).status_code == 200
    listed = {t["name"] for t in api.http.get("/v1/tokens", headers=h).json()}
    for name in listed:  # every name made through the API or the CLI fits in a URL
        assert name.startswith("legacy-") or "/" not in name


def test_a_large_body_is_refused_before_it_is_read(api: Api) -> None:
    """Content-Length 200 MB, no token, and not one byte of the body sent: 413 at once."""
    head = (
        b"POST /v1/budgets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 209715200\r\n\r\n"
    )
    answer = raw(api, head)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert len(answer) < SMALL


def test_a_chunked_body_is_cut_at_the_limit(api: Api) -> None:
    chunk = b"10000\r\n" + b"x" * 65536 + b"\r\n"
    head = (
        b"POST /v1/budgets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    # 64 KiB chunks until the server answers (it must before 17 x 64 KiB > the 1 MiB default);
    # sending stops at the answer, so no close with unread bytes resets the answer away
    host = urlsplit(api.base)
    with socket.create_connection((host.hostname, host.port), timeout=30) as s:
        s.sendall(head)
        try:
            for _ in range(17):
                if select.select([s], [], [], 0)[0]:
                    break
                s.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed while a chunk was on its way
        answer = b""
        try:
            while part := s.recv(65536):
                answer += part
                if b"\r\n\r\n" in answer:
                    break
        except ConnectionResetError:
            pass  # what came before the reset is the answer
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_a_slow_body_is_cut_off_with_408(api: Api) -> None:
    head = (
        b"POST /v1/budgets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n{"
    )
    started = time.monotonic()
    answer = raw(api, head)  # the rest never comes; the server answers and closes
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert time.monotonic() - started < 30  # the socket's own time-out did not end it


def test_slow_headers_are_cut_off(api: Api) -> None:
    host = urlsplit(api.base)
    with socket.create_connection((host.hostname, host.port), timeout=30) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # the headers never end
        assert s.recv(65536) == b""  # closed by the server, not by our 30 s time-out
    with socket.create_connection((host.hostname, host.port), timeout=30) as s:
        assert s.recv(65536) == b""  # connected and said nothing


def test_long_urls_are_414(api: Api) -> None:
    check_short_4xx(api.http.get("/v1/costs?pod=" + "a" * 10_000, headers=api.auth("admin")), 414)
    check_short_4xx(api.http.get("/v1/teams/" + "a" * 3000 + "/summary"), 414)


def test_filter_values_are_bounded_in_count_and_length(api: Api) -> None:
    many = ",".join(f"p{i}" for i in range(101))
    r = api.get("/v1/costs", "team:a", pod=many)
    check_short_4xx(r, 400)
    assert "100" in r.text
    check_short_4xx(api.get("/v1/costs", "team:a", pod="p" * 254))
    assert api.get("/v1/costs", "team:a", pod=",".join(f"p{i}" for i in range(100))).is_success


def test_huge_headers_are_refused(api: Api) -> None:
    """httptools sets no limit on the request line and headers; the server does (64 KiB)."""
    filler = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"y" * 1000) for i in range(100))
    answer = raw(api, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + filler + b"\r\n")
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    fine = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"y" * 1000) for i in range(30))
    answer = raw(api, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + fine + b"\r\n")
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
