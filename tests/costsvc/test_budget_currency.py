"""A budget is in the cost model's currency (costsvc/budgets/state.py ``currency_mismatch``): one
in another currency is refused naming both, and one kept from before is never compared 1:1
with the costs (no ratio, so no alert). Costs ingested from the real Prometheus of history.py;
SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine

from costsvc.budgets.repository import BudgetValues, create_budget
from tests.costsvc.apiserver import NOV20, Api, Clock, serve
from tests.costsvc.conftest import fresh_database
from tests.costsvc.history import H100, HOUR, MODEL, ingest_with
from tests.prom import Prometheus


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, prometheus: Prometheus
) -> Iterator[Api]:
    work = tmp_path_factory.mktemp("budgets")
    model = work / "cost.yaml"
    model.write_text(
        'currency: USD\nversions: [{effective_from: "2026-11-01T00:00:00Z", '
        f'prices: [{{model: "{H100}", hourly: "2.50"}}]}}]\n'
    )
    with fresh_database(request.param, request, work) as url:
        ingest_with(prometheus.url, url, MODEL, [HOUR])  # USD costs in November
        with serve(url, Clock(NOV20), cost_model=Path(model)) as running:
            yield running


def _ratios(api: Api, name: str = "costsvc_budget_used_ratio") -> dict[str, float]:
    r = api.get("/metrics", who="metrics")
    assert r.status_code == 200, r.text
    return {
        s.labels["team"]: s.value
        for family in text_string_to_metric_families(r.text)
        if family.name == name
        for s in family.samples
    }


def test_a_budget_in_another_currency_is_refused_naming_both(api: Api) -> None:
    body = {"team": "eur", "amount": "100", "currency": "EUR"}
    r = api.http.post("/v1/budgets", json=body, headers=api.auth("finance"))
    assert r.status_code == 409, r.text
    assert "EUR" in r.json()["detail"] and "USD" in r.json()["detail"]
    same = api.http.post(
        "/v1/budgets", json={"team": "nlp", "amount": "100"}, headers=api.auth("finance")
    )
    assert same.status_code == 201, same.text
    assert same.json()["currency"] == "USD"  # the cost model's, when not given
    put = api.http.put(
        f"/v1/budgets/{same.json()['id']}",
        json={**body, "team": "nlp"},
        headers=api.auth("finance"),
    )
    assert put.status_code == 409, put.text
    assert "nlp" in _ratios(api)


def test_a_budget_kept_in_another_currency_is_never_compared(api: Api) -> None:
    engine = create_engine(api.db_url)  # as a release before the check could have stored it
    try:
        values = BudgetValues("search", "", 1_000_000, "EUR", [0.8, 1.0])
        budget_id = create_budget(engine, values, datetime.now(UTC), "test", {})
    finally:
        engine.dispose()
    r = api.get(f"/v1/budgets/{budget_id}/status")
    assert r.status_code == 409, r.text
    assert "EUR" in r.json()["detail"] and "USD" in r.json()["detail"]
    # /metrics shows the new budget at once (the data version moved), but no ratio of EUR
    # and USD: no budget alert
    assert "search" in _ratios(api, "costsvc_budget_amount")
    assert "search" not in _ratios(api)
