"""Budgets on the pages, on SQLite and PostgreSQL over pages_history.py: finance creates and edits
a team's budget through the form (the session's CSRF token, the pages' own origin), the audit
log has each change and ``/v1/budgets`` answers what the page set; a wrong field shows the
API's own message (4xx); a team session sees its budgets read-only and may not post the form;
a team without a budget sees its forecast (``/v1/teams/{team}/summary``'s) and a prompt."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from costsvc.pages.budgets import fields_of
from costsvc.pages.render import amount
from tests.costsvc.apiserver import Api, Clock, serve
from tests.costsvc.conftest import fresh_database
from tests.costsvc.pages_history import NOW, TEAMS, seed
from tests.costsvc.test_pages_access import form_token, signed_in

FORM = "/ui/teams/nlp/budget"


@pytest.fixture(params=["sqlite", "postgresql"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    work = tmp_path_factory.mktemp(f"budgets-{request.param}")
    with fresh_database(request.param, request, work) as url:
        seed(url)
        with serve(url, Clock(NOW), TEAMS) as running:
            yield running


def _post(client: httpx.Client, api: Api, **fields: str) -> httpx.Response:
    data = {"csrf": form_token(client, "/ui/teams/nlp"), **fields}
    return client.post(FORM, data=data, headers={"Origin": api.base})


def _nlp(api: Api) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = api.get("/v1/budgets", "finance").json()
    return [b for b in rows if b["team"] == "nlp"]


def _last_audit(api: Api) -> dict[str, Any]:
    entry: dict[str, Any] = api.get("/v1/audit", "admin").json()[0]
    return entry


def _api_message(api: Api, amount: str) -> str:
    body = {"team": "nlp", "amount": amount}
    r = api.http.post("/v1/budgets", json=body, headers=api.auth("finance"))
    assert r.status_code == 422, r.text
    msg: str = r.json()["detail"][0]["msg"]
    return msg


def test_finance_creates_and_edits_a_budget_through_the_form(api: Api) -> None:
    (old,) = _nlp(api)
    assert api.http.delete(f"/v1/budgets/{old['id']}", headers=api.auth("finance")).status_code
    with signed_in(api, "finance") as client:
        page = client.get("/ui/teams/nlp").text
        summary = api.get("/v1/teams/nlp/summary", "finance").json()
        assert "No budget for this team." in page and 'id="new-budget"' in page
        assert f"{amount(summary['forecast'])}</span> this month" in page

        r = _post(client, api, project="", amount="500", thresholds="0.5, 1", energy_kwh="12.5")
        assert (r.status_code, r.headers["location"]) == (303, "/ui/teams/nlp#budgets"), r.text
        (made,) = _nlp(api)
        assert (made["project"], made["currency"], made["thresholds"]) == ("", "USD", [0.5, 1.0])
        assert (Decimal(made["amount"]), Decimal(made["energy_kwh"])) == (500, Decimal("12.5"))
        entry = _last_audit(api)
        assert (entry["action"], entry["target"], entry["actor"]) == (
            "budget.create",
            "nlp/",
            "finance",
        )
        assert entry["detail"]["id"] == made["id"] and entry["detail"]["amount"] == "500"
        page = client.get("/ui/teams/nlp").text
        assert f'id="edit-budget-{made["id"]}"' in page and "12.5 kWh: " in page

        form = client.get(FORM, params={"id": made["id"]}).text
        assert 'value="500.000000"' in form and 'value="0.5, 1"' in form
        r = _post(client, api, id=str(made["id"]), amount="750.5", thresholds="0.9")
        assert r.status_code == 303, r.text
        (edited,) = _nlp(api)
        assert (edited["id"], Decimal(edited["amount"])) == (made["id"], Decimal("750.5"))
        assert (edited["thresholds"], edited["energy_kwh"]) == ([0.9], None)
        entry = _last_audit(api)
        assert (entry["action"], entry["target"]) == ("budget.update", "nlp/")
        assert entry["detail"]["before"] == made
        assert entry["detail"]["after"]["amount"] == "750.5"
        # a project's budget beside the team's
        assert _post(client, api, project="llm", amount="10").status_code == 303
        assert sorted(b["project"] for b in _nlp(api)) == ["", "llm"]


def test_a_wrong_field_shows_the_apis_message(api: Api) -> None:
    before = _nlp(api)
    with signed_in(api, "finance") as client:
        for bad in ("-5", "abc", "0"):
            r = _post(client, api, amount=bad)
            assert r.status_code == 422, (bad, r.text)
            assert f"amount: {_api_message(api, bad)}" in r.text, bad
            assert 'id="budget-error"' in r.text and 'name="amount"' in r.text
        r = _post(client, api, amount="5", thresholds="0.8, 11")
        assert r.status_code == 422 and "thresholds are ratios of the budget" in r.text
        r = _post(client, api, amount="5")  # nlp has its budget: the API's 409
        api_said = api.http.post(
            "/v1/budgets", json={"team": "nlp", "amount": "5"}, headers=api.auth("finance")
        )
        assert (r.status_code, api_said.status_code) == (409, 409)
        assert api_said.json()["detail"] in r.text
        r = _post(client, api, amount="5", currency="EUR")
        assert r.status_code == 409 and "cost model" in r.text
        a_budget = api.get("/v1/budgets", "finance").json()[0]["id"]  # team a's, not nlp's
        assert _post(client, api, id=str(a_budget), amount="5").status_code == 404
        assert _post(client, api, id="99999999999", amount="5").status_code == 404
    assert _nlp(api) == before


def test_a_team_session_sees_its_budgets_read_only(api: Api) -> None:
    before = api.get("/v1/budgets", "finance").json()
    with signed_in(api, "team:nlp") as client:
        page = client.get("/ui/teams/nlp").text
        assert 'data-budget="' in page and "1,000.00" in page
        assert 'name="amount"' not in page and "/budget" not in page and "Edit" not in page
        assert client.get(FORM).status_code == 403
        r = _post(client, api, amount="1")
        assert r.status_code == 403, r.text
    with signed_in(api, "finance") as client:
        # without the session's token, or from another origin: refused too
        r = client.post(FORM, data={"csrf": "x", "amount": "1"}, headers={"Origin": api.base})
        assert r.status_code == 403
        data = {"csrf": form_token(client, FORM), "amount": "1"}
        r = client.post(FORM, data=data, headers={"Origin": "http://evil.example"})
        assert r.status_code == 403
    assert api.get("/v1/budgets", "finance").json() == before


def test_the_forms_fields_are_the_apis_body() -> None:
    form = {"project": " llm ", "amount": " 5 ", "currency": "", "energy_kwh": ""}
    assert fields_of("nlp", {**form, "thresholds": "0.5,1  2"}) == {
        "team": "nlp",
        "project": "llm",
        "amount": "5",
        "thresholds": ["0.5", "1", "2"],
    }
    assert "thresholds" not in fields_of("nlp", {**form, "thresholds": " "})
