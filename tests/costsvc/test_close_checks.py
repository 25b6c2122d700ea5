"""What a close confirms and refuses, on the API and the finance pages alike: the confirmation
shows the month's total, its hours ingested of its hours, its failed and missing hours; a
month with not one hour ingested closes only forced with a reason, which the audit log keeps;
the finance page's "closed" notice is the database's state, never the query's word.

One hour (2026-11-10 05:00, cluster c1) ingested, now 2026-12-02 09:00: November is
incomplete (498 missing hours), September and October are before the cluster's first hour —
empty, not one hour ingested."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.costsvc.apiserver import Api, Clock, serve
from tests.costsvc.history import HOUR, MODEL, ingest_with
from tests.costsvc.test_months import DEC2
from tests.costsvc.test_pages_access import form_token, signed_in
from tests.prom import Prometheus


def _last_audit(api: Api) -> dict[str, object]:
    entry: dict[str, object] = api.get("/v1/audit", "admin").json()[0]
    return entry


def _post_close(client: httpx.Client, api: Api, **data: str) -> httpx.Response:
    csrf = form_token(client, "/ui/finance")
    return client.post(
        "/ui/finance/close", data={"csrf": csrf, **data}, headers={"Origin": api.base}
    )


def test_an_empty_month_closes_only_forced_with_a_reason(
    prometheus: Prometheus, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'close.db'}"
    ingest_with(prometheus.url, url, MODEL, [HOUR])
    with serve(url, Clock(DEC2)) as api:
        fin = api.auth("finance")

        def close(month: str, **params: str) -> httpx.Response:
            return api.http.post(f"/v1/months/{month}/close", params=params, headers=fin)

        # the API: refused plain, forced without a reason, forced with a blank one
        for params in ({}, {"force": "true"}, {"force": "true", "reason": "  "}):
            r = close("2026-10", **params)
            assert r.status_code == 409 and "2026-10 is empty" in r.text, (params, r.text)
        assert close("2026-10", force="true", reason="x" * 501).status_code == 422
        assert not api.get("/v1/months/2026-10", "finance").json()["closed"]
        r = close("2026-10", force="true", reason="cluster installed in November")
        assert r.status_code == 200 and r.json()["closed"], r.text
        entry = _last_audit(api)
        assert (entry["action"], entry["target"]) == ("month.close", "2026-10")
        detail = entry["detail"]
        assert isinstance(detail, dict)
        assert (detail["forced"], detail["reason"]) == (True, "cluster installed in November")

        with signed_in(api, "finance") as client:
            # the confirmation: the month's figures, the reason field where it is empty
            page = client.get("/ui/finance/close", params={"month": "2026-09"}).text
            assert '<dd id="close-hours">0 of 720</dd>' in page
            assert 'id="close-empty"' in page and 'name="reason"' in page
            r = _post_close(client, api, month="2026-09", force="yes")
            assert r.status_code == 409 and "2026-09 is empty" in r.text
            assert not api.get("/v1/months/2026-09", "finance").json()["closed"]
            r = _post_close(client, api, month="2026-09", force="yes", reason="no GPUs yet")
            assert r.status_code == 303, r.text
            detail = _last_audit(api)["detail"]
            assert isinstance(detail, dict) and detail["reason"] == "no GPUs yet"


def test_the_confirmation_shows_the_months_figures_and_the_notice_is_the_databases(
    prometheus: Prometheus, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'close.db'}"
    ingest_with(prometheus.url, url, MODEL, [HOUR])
    with serve(url, Clock(DEC2)) as api, signed_in(api, "finance") as client:
        billed = api.get("/v1/reports/chargeback.csv", "finance", month="2026-11").text
        assert billed.count("\n") > 1  # November bills the hour ingested
        page = client.get("/ui/finance/close", params={"month": "2026-11"}).text
        total = api.get("/v1/costs", "finance", start="2026-11-01T00:00:00Z",
                        end="2026-12-01T00:00:00Z").json()["rows"][0]  # fmt: skip
        assert f'<dd id="close-total">{total["currency"]} <span class="num"' in page
        assert '<dd id="close-hours">1 of 720</dd>' in page
        assert '<dd id="close-failed">0</dd>' in page
        assert '<dd id="close-missing">498</dd>' in page
        assert 'id="close-empty"' not in page
        # a notice from a query parameter is not believed: November is not closed
        for asked in ("2026-11", "2026-10", "2026-12", "nonsense"):
            page = client.get("/ui/finance", params={"closed": asked}).text
            assert "Closed 20" not in page, asked
        # an incomplete month closes forced, without a reason, as before
        r = _post_close(client, api, month="2026-11", force="yes")
        assert (r.status_code, r.headers["location"]) == (303, "/ui/finance?closed=2026-11")
        page = client.get(r.headers["location"]).text
        assert "Closed 2026-11 (by finance at 2026-12-02 09:00 UTC)" in page
