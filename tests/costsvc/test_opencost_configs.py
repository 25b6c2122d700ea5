"""kubectl-cost's currency question against gpu-costsvc, over real HTTP, on SQLite and
PostgreSQL: ``GET /model/getConfigs`` (kubecost/kubectl-cost at 3f74536
``pkg/query/configapi.go`` ``QueryCurrencyCode``: no parameters, no headers of its own; it
reads ``data.currencyCode``, "" as USD), which reaches gpu-costsvc as ``/getConfigs`` through
``gpu-costsvc opencost-proxy`` (it strips ``/model``, as the OpenCost UI's nginx does)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from costsvc.db.migrate import upgrade
from tests.costsvc.apiserver import NOV20, Clock, serve
from tests.costsvc.conftest import fresh_database
from tests.costsvc.history import H100

EUR = (
    'currency: EUR\nversions: [{effective_from: "2026-11-01T00:00:00Z", '
    f'prices: [{{model: "{H100}", hourly: "2.30"}}]}}]\n'
)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def db_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with fresh_database(request.param, request, tmp_path_factory.mktemp("configs")) as url:
        upgrade(url)
        yield url


@pytest.mark.parametrize("who", ["finance", "team:nlp"])
def test_kubectl_cost_reads_the_cost_model_s_currency(
    db_url: str, tmp_path: Path, who: str
) -> None:
    model = tmp_path / "cost.yaml"
    model.write_text(EUR)
    with serve(db_url, Clock(NOV20), ["nlp"], cost_model=model, prefix=f"a{who[-3:]}") as api:
        r = api.http.get("/getConfigs", headers=api.auth(who))
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/json"
        # OpenCost's WrapData (pkg/costmodel/router.go Response) around CustomPricing
        assert r.json() == {"code": 200, "status": "success", "data": {"currencyCode": "EUR"}}
        assert api.http.get("/getConfigs").status_code == 401  # a token, as /allocation


def test_without_a_cost_model_no_currency_is_guessed(db_url: str) -> None:
    with serve(db_url, Clock(NOV20), prefix="b") as api:
        r = api.http.get("/getConfigs", headers=api.auth("finance"))
        assert r.status_code == 503, r.text
        body = r.json()
        assert (
            body["status"] == "error" and body["data"] is None and "cost model" in body["message"]
        )
