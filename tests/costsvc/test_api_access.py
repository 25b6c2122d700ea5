"""Who may see what: every endpoint x every team token x other teams' data is denied, and
budgets, tokens, the cost model and month close are for the roles that own them (audit log)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from costsvc.metrics.series import FLEET, OWNER_LABELS
from tests.costsvc.access_api import TEAMS, access_api
from tests.costsvc.apiserver import NOV20, Api, Clock, serve
from tests.costsvc.history import MODEL
from tests.prom import Prometheus


@pytest.fixture(scope="module")
def api(prometheus: Prometheus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with access_api(prometheus, tmp_path_factory) as running:
        yield running


def budget_ids(api: Api) -> dict[str, int]:
    return {b["team"]: b["id"] for b in api.get("/v1/budgets", "admin").json()}


@pytest.mark.parametrize("me", TEAMS)
def test_a_team_token_sees_only_its_team(api: Api, me: str) -> None:
    who = f"team:{me}"
    others = [t for t in TEAMS if t != me] + ["__idle__", "__unallocated__"]
    window = {"start": "2026-11-01T00:00:00Z", "end": "2026-12-01T00:00:00Z"}
    # costs: grouped by team, by pod, unfiltered -> only my rows
    for group in ("team", "pod", "namespace,team", "node"):
        r = api.get("/v1/costs", who, group_by=group, **window)
        assert r.status_code == 200, r.text
        assert all(x["group"].get("team", me) == me for x in r.json()["rows"]), (group, r.json())
    mine = api.get("/v1/costs", who, group_by="team", **window).json()["rows"]
    assert [x["group"]["team"] for x in mine] == [me]
    for other in others:
        r = api.get("/v1/costs", who, team=other, **window)
        assert r.status_code == 403, (other, r.text)
        r = api.get("/v1/costs", who, team=[me, other], **window)
        assert r.status_code == 403, (other, r.text)
        assert api.get(f"/v1/teams/{other}/summary", who).status_code == 404
    assert api.get(f"/v1/teams/{me}/summary", who).status_code == 200
    # reports: every row is mine
    for path, params in (
        ("/v1/reports/chargeback.csv", {}),
        ("/v1/reports/chargeback.csv", {"group_by": "team"}),
        ("/v1/reports/chargeback.csv", {"group_by": "pod"}),
    ):
        r = api.get(path, who, month="2026-11", **params)
        assert r.status_code == 200
        rows = list(csv.DictReader(io.StringIO(r.text)))
        assert all(x.get("team", me) == me for x in rows), (params, rows[:3])
        if "group_by" not in params or params["group_by"] == "team":
            assert {x["team"] for x in rows} <= {me}
    focus = api.get("/v1/reports/focus.csv", who, month="2026-11")
    assert focus.status_code == 200
    for x in csv.DictReader(io.StringIO(focus.text)):
        assert json.loads(x["Tags"])["team"] == me
    # FOCUS 1.3: my allocated charges only (never another holder's, nor idle or lost)
    focus13 = api.get("/v1/reports/focus.csv", who, month="2026-11", version="1.3")
    assert focus13.status_code == 200
    rows13 = list(csv.DictReader(io.StringIO(focus13.text)))
    assert rows13 and {x["x_Team"] for x in rows13} == {me}
    assert all(json.loads(x["AllocatedTags"])["team"] == me for x in rows13)
    assert api.get("/v1/reports/focus.csv", who, month="2026-11", version="1.4").status_code == 422
    # budgets: mine only
    ids = budget_ids(api)
    assert [b["team"] for b in api.get("/v1/budgets", who).json()] == [me]
    assert api.get(f"/v1/budgets/{ids[me]}/status", who).status_code == 200
    for other in TEAMS:
        if other != me:
            assert api.get(f"/v1/budgets/{ids[other]}", who).status_code == 404
            assert api.get(f"/v1/budgets/{ids[other]}/status", who).status_code == 404
    # management: none of it
    h = api.auth(who)
    assert (
        api.http.post(
            "/v1/budgets", json={"team": me, "project": "x", "amount": "1"}, headers=h
        ).status_code
        == 403
    )
    assert (
        api.http.put(
            f"/v1/budgets/{ids[me]}", json={"team": me, "amount": "1e6"}, headers=h
        ).status_code
        == 403
    )
    assert api.http.delete(f"/v1/budgets/{ids[me]}", headers=h).status_code == 403
    assert api.get("/v1/tokens", who).status_code == 403
    assert (
        api.http.post("/v1/tokens", json={"name": "x", "role": "admin"}, headers=h).status_code
        == 403
    )
    assert api.http.delete("/v1/tokens/admin", headers=h).status_code == 403
    assert api.get("/v1/audit", who).status_code == 403
    assert api.get("/v1/cost-model", who).status_code == 403
    assert api.http.put("/v1/cost-model", json={}, headers=h).status_code == 403
    assert api.http.post("/v1/months/2026-10/close", headers=h).status_code == 403


def test_finance_sees_all_and_manages_budgets_but_not_tokens_or_the_model(api: Api) -> None:
    rows = api.get("/v1/costs", "finance", window="month", group_by="team").json()["rows"]
    assert {"a", "b", "nlp", "__idle__"} <= {x["group"]["team"] for x in rows}
    assert api.get("/v1/cost-model", "finance").json()["sha256"] == MODEL.sha256()
    fin = api.auth("finance")
    made = api.http.post("/v1/budgets", json={"team": "z", "amount": "1"}, headers=fin)
    assert made.status_code == 201
    assert api.http.delete(f"/v1/budgets/{made.json()['id']}", headers=fin).status_code == 204
    assert api.get("/v1/tokens", "finance").status_code == 403
    assert (
        api.http.post("/v1/tokens", json={"name": "f", "role": "admin"}, headers=fin).status_code
        == 403
    )
    assert api.http.put("/v1/cost-model", json=MODEL.document(), headers=fin).status_code == 403
    assert api.get("/v1/audit", "finance").status_code == 403
    actions = [(e["actor"], e["action"]) for e in api.get("/v1/audit", "admin").json()[:2]]
    assert actions == [("finance", "budget.delete"), ("finance", "budget.create")]


def test_budgets_tokens_cost_model_changes_are_audited(api: Api, tmp_path: Path) -> None:
    h = api.auth("admin")
    r = api.http.post(
        "/v1/budgets",
        json={"team": "a", "project": "p", "amount": "12.5", "thresholds": [1.0, 0.5]},
        headers=h,
    )
    assert r.status_code == 201, r.text
    made = r.json()
    assert (made["amount"], made["thresholds"]) == ("12.500000", [0.5, 1.0])
    assert (
        api.http.post(
            "/v1/budgets", json={"team": "a", "project": "p", "amount": "1"}, headers=h
        ).status_code
        == 409
    )
    bad = api.http.post("/v1/budgets", json={"team": "a", "amount": "-1"}, headers=h)
    assert bad.status_code == 422 and "amount" in bad.text
    put = api.http.put(
        f"/v1/budgets/{made['id']}", json={"team": "a", "project": "p", "amount": "20"}, headers=h
    )
    assert put.json()["amount"] == "20.000000"
    assert api.http.delete(f"/v1/budgets/{made['id']}", headers=h).status_code == 204
    assert api.http.get(f"/v1/budgets/{made['id']}", headers=h).status_code == 404
    # a token made over the API works once, is never listed with its secret, and revokes
    t = api.http.post("/v1/tokens", json={"name": "ci", "role": "team", "team": "b"}, headers=h)
    assert t.status_code == 201
    secret = t.json()["token"]
    assert secret not in api.http.get("/v1/tokens", headers=h).text
    assert (
        api.http.get(
            "/v1/teams/b/summary", headers={"Authorization": f"Bearer {secret}"}
        ).status_code
        == 200
    )
    assert (
        api.http.post("/v1/tokens", json={"name": "bad", "role": "team"}, headers=h).status_code
        == 400
    )
    assert api.http.delete("/v1/tokens/ci", headers=h).status_code == 204
    assert (
        api.http.get(
            "/v1/teams/b/summary", headers={"Authorization": f"Bearer {secret}"}
        ).status_code
        == 401
    )
    # the cost model is the operator's file here: never rewritten, a clear 409
    r = api.http.put("/v1/cost-model", json=MODEL.document(), headers=h)
    assert r.status_code == 409 and "managed by the file" in r.text
    actions = [(e["actor"], e["action"]) for e in api.http.get("/v1/audit", headers=h).json()]
    assert actions[:5] == [
        ("admin", "token.revoke"),
        ("admin", "token.create"),
        ("admin", "budget.delete"),
        ("admin", "budget.update"),
        ("admin", "budget.create"),
    ]


# ---- /metrics: who sees which series (costsvc/metrics/series.py, docs/security.md) ---------------

SEES_ALL = ("admin", "finance", "metrics")


def _exposition(api: Api, who: str | None) -> list[Metric]:
    r = api.http.get("/metrics", headers=api.auth(who))
    assert r.status_code == 200, (who, r.text)
    return list(text_string_to_metric_families(r.text))


def _samples(families: list[Metric]) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    return {(s.name, tuple(sorted(s.labels.items())), s.value) for f in families for s in f.samples}


def test_metrics_without_a_token_is_401_and_per_team_series_need_the_right_token(
    api: Api,
) -> None:
    assert api.http.get("/metrics").status_code == 401
    assert api.http.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    full = _exposition(api, "metrics")
    per_team = {f.name for f in full if any("team" in s.labels for s in f.samples)}
    assert {"costsvc_cost_month_to_date", "costsvc_pod_cost_month_to_date"} <= per_team
    assert {s.labels["team"] for f in full for s in f.samples if "team" in s.labels} >= {
        "a",
        "b",
        "nlp",
        "__idle__",
    }
    for who in SEES_ALL:  # everything, the same
        assert _samples(_exposition(api, who)) == _samples(full), who
    for me in TEAMS:
        mine = _exposition(api, f"team:{me}")
        expected = {
            s
            for s in _samples(full)
            if dict(s[1]).get("team") == me or s[0].removesuffix("_total") in FLEET or s[0] in FLEET
        }
        assert _samples(mine) == expected, me
        for family in mine:
            for s in family.samples:
                assert family.name in FLEET or s.labels["team"] == me, (me, s)


def test_fleet_families_carry_no_owner(api: Api) -> None:
    for family in _exposition(api, "admin"):
        if family.name in FLEET:
            for s in family.samples:
                assert not OWNER_LABELS & set(s.labels), s


def test_public_metrics_are_fleet_level_only(api: Api) -> None:
    """COSTSVC_METRICS_PUBLIC=true: a scrape without a token gets the FLEET families, and
    not one sample naming a team, a project or a pod."""
    with serve(api.db_url, Clock(NOV20), prefix="public-", metrics_public=True) as public:
        open_ = _exposition(public, None)
        assert {f.name for f in open_} == set(FLEET)
        assert any(f.samples for f in open_)
        for family in open_:
            for s in family.samples:
                assert not OWNER_LABELS & set(s.labels), s
                assert not {"a", "b", "nlp"} & set(s.labels.values()), s
        # a token still counts: a team sees its own series, a metrics token everything
        assert len(_samples(_exposition(public, "metrics"))) > len(_samples(open_))
        spec = public.http.get("/openapi.json").json()
        assert spec["paths"]["/metrics"]["get"]["security"] == [{}, {"bearer": []}]
    spec = api.http.get("/openapi.json").json()
    assert spec["paths"]["/metrics"]["get"]["security"] == [{"bearer": []}]


def test_a_metrics_token_reads_metrics_only(api: Api) -> None:
    spec = api.http.get("/openapi.json").json()
    h = api.auth("metrics")
    seen = 0
    for path, ops in spec["paths"].items():
        if not path.startswith("/v1"):
            continue
        concrete = (
            path.replace("{team}", "a")
            .replace("{budget_id}", "1")
            .replace("{month}", "2026-11")
            .replace("{name}", "admin")
        )
        for method in ops:
            r = api.http.request(method.upper(), concrete, headers=h, params={"month": "2026-11"})
            assert r.status_code == 403, (method, path, r.status_code, r.text)
            seen += 1
    assert seen >= 15


# --- OpenCost's /allocation, and the proxy for clients that cannot send a token -----------

ALLOCATION_VIEWS = [
    {"aggregate": "namespace", "includeIdle": "true", "shareIdle": "true"},
    {"aggregate": "controller", "includeIdle": "true", "accumulate": "day"},
    {"aggregate": "controllerKind,deployment,job,container", "includeIdle": "true"},
    {"filter": 'controllerKind:"job" | namespace!:"x"', "includeIdle": "true"},
    {},  # OpenCost's default: cluster/node/namespace/pod/container
]


@pytest.mark.parametrize("me", TEAMS)
def test_a_team_token_sees_only_its_allocations(api: Api, me: str) -> None:
    """Every new aggregate, accumulation and filter of /allocation keeps a team to its own
    lines: their namespaces only, and no idle of the fleet."""
    mine = {
        x["group"]["namespace"]
        for x in api.get("/v1/costs", f"team:{me}", group_by="namespace", window="30d").json()[
            "rows"
        ]
    }
    assert mine
    for view in ALLOCATION_VIEWS:
        r = api.get("/allocation", f"team:{me}", window="30d", **view)
        assert r.status_code == 200, (view, r.text)
        for one in r.json()["data"]:
            for name, a in one.items():
                assert a["properties"].get("namespace", next(iter(mine))) in mine, (view, name)
                assert name != "__idle__" or a["totalCost"] == 0, (view, a)


def test_no_money_without_a_token(api: Api) -> None:
    """OpenCost's paths answer no money to a request without a bearer token, whatever its
    query says (no token in a query parameter)."""
    finance = api.tokens["finance"]
    for path in ("/allocation", "/allocation/compute"):
        for params in ({}, {"token": finance}, {"access_token": finance}, {"key": finance}):
            r = api.http.get(path, params={"window": "30d", **params})
            assert r.status_code == 401, (path, params, r.text)


@pytest.fixture(scope="module")
def proxy(api: Api, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """gpu-costsvc opencost-proxy in front of the API, holding team a's token."""
    import threading
    import time

    import uvicorn

    from costsvc.opencost.proxy import TokenFile, build_app, own_hosts
    from tests.prom import free_port

    token_file = tmp_path_factory.mktemp("proxy") / "token"
    token_file.write_text(api.tokens["team:a"] + "\n")
    port = free_port()
    hosts = own_hosts("127.0.0.1", port, ["opencost.example.com"])
    app = build_app(api.base, TokenFile(token_file), hosts)
    server = uvicorn.Server(uvicorn.Config(app, "127.0.0.1", port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:  # uvicorn sets it once listening
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}", token_file
    server.should_exit = True
    thread.join(10)


def test_the_opencost_proxy_lends_its_token_for_allocations_only(
    api: Api, proxy: tuple[str, Path]
) -> None:
    base, token_file = proxy
    query = {"window": "30d", "aggregate": "namespace", "includeIdle": "true"}
    direct = api.get("/allocation/compute", "team:a", **query)
    with httpx.Client(base_url=base, timeout=30) as client:
        for path in ("/allocation/compute", "/model/allocation/compute", "/model/allocation"):
            r = client.get(path, params=query)
            assert r.status_code == 200, (path, r.text)
            assert r.json() == direct.json()  # team a's view, exactly
        # a caller's own header changes nothing: the proxy's token is the one sent
        r = client.get("/allocation", params=query, headers=api.auth("finance"))
        assert r.json() == direct.json()
        assert client.get("/model/v1/costs").status_code == 404
        assert client.get("/v1/teams/a/summary").status_code == 404
        assert client.get("/metrics").status_code == 404
        assert client.post("/allocation", params=query).status_code == 405
        # a page of another site whose name resolves to 127.0.0.1 (DNS rebinding) sends its
        # own name as Host: refused, unless it is one the proxy was given
        port = base.rsplit(":", 1)[1]
        for host, status in (
            ("evil.example", 403),
            (f"evil.example:{port}", 403),
            (f"127.0.0.1.evil.example:{port}", 403),
            (f"localhost:{port}", 200),
            (f"LOCALHOST:{port}", 200),
            (f"[::1]:{port}", 200),
            (f"opencost.example.com:{port}", 200),
        ):
            r = client.get("/model/allocation", params=query, headers={"Host": host})
            assert r.status_code == status, (host, r.text)
            assert (status == 403) == ("--allowed-host" in r.text)
        assert client.get("/healthz", headers={"Host": "10.0.0.7:9003"}).status_code == 200
        # kubectl-cost's /model/getConfigs and the UI's report builder's autocomplete: the
        # API's answers with the proxy's token (team a's suggestions: its own team only)
        configs = client.get("/model/getConfigs")
        assert configs.json() == api.get("/getConfigs", "team:a").json()
        suggest = {"window": "30d", "field": "namespace", "limit": "10"}
        got = client.get("/model/allocation/autocomplete", params=suggest)
        assert got.status_code == 200, got.text
        assert got.json() == api.get("/allocation/autocomplete", "team:a", **suggest).json()
        assert got.json() != api.get("/allocation/autocomplete", "finance", **suggest).json()
        assert client.get("/healthz").text == "ok\n"
        # the UI's Infra Assets page: /assets, forwarded; a team token's 403 passed on, a
        # finance token's answer the API's
        assert client.get("/model/assets", params={"window": "30d"}).status_code == 403
        token_file.write_text(api.tokens["finance"])
        assets = client.get("/model/assets", params={"window": "30d", "aggregate": "assetType"})
        assert assets.status_code == 200, assets.text
        assert assets.json() == api.get("/assets", "finance", window="30d").json()
        # a rotated token is read again; a revoked one is the API's 401, passed on
        token_file.write_text(api.tokens["team:b"])
        r = client.get("/allocation", params=query)
        assert r.json() == api.get("/allocation", "team:b", **query).json()
        token_file.write_text("not a token")
        assert client.get("/allocation", params=query).status_code == 503
        token_file.write_text(api.tokens["team:a"])


def test_the_opencost_proxy_refuses_bad_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from costsvc.cli import main

    good, bad = tmp_path / "token", tmp_path / "bad"
    good.write_text("gfo_" + "x" * 43)
    bad.write_text("secret")
    for argv, says in (
        (["--token-file", str(tmp_path / "missing")], "--token-file"),
        (["--token-file", str(tmp_path)], "--token-file"),
        (["--token-file", str(bad)], "--token-file"),
        (["--token-file", str(good), "--upstream", "ftp://x"], "--upstream"),
        (["--token-file", str(good), "--listen-address", "9003"], "--listen-address"),
    ):
        assert main(["opencost-proxy", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert says in err and "secret" not in err, err


def test_a_bad_allowed_host_stops_the_proxy_naming_the_flag(tmp_path: Path) -> None:
    import argparse

    from costsvc.opencost.proxy import ProxyError, check

    token = tmp_path / "token"
    token.write_text("gfo_" + "a" * 40 + "\n")
    args = argparse.Namespace(
        listen_address="0.0.0.0:9003",
        upstream="http://127.0.0.1:8080",
        token_file=token,
        allowed_host=["ui.example:443", "bad host\r\nX: y"],
    )
    with pytest.raises(ProxyError, match="--allowed-host: 'bad host"):
        check(args)
    args.allowed_host = ["UI.example:443", "[fd00::1]"]
    *_, hosts = check(args)  # every address: the loopback names too
    assert hosts == {
        "ui.example:443",
        "[fd00::1]:9003",
        "127.0.0.1:9003",
        "localhost:9003",
        "[::1]:9003",
    }
