"""Cost per 1M inference tokens on the pages (costsvc/pages/: the overview by served model and
by model and team, a team's page by its models): the same figures as ``/v1/inference`` for
the page's month and grouping, over the hand-computed hours of inference_history.py (SQLite
and PostgreSQL); a team session sees its own models only; a month without inference rows
has no such section."""

from __future__ import annotations

import re
from typing import Any

from costsvc.pages.render import rate_cells
from tests.costsvc import test_inference
from tests.costsvc.apiserver import Api
from tests.costsvc.inference_history import LLAMA, MISTRAL
from tests.costsvc.test_pages_access import signed_in

# test_inference.py's fixtures: its Prometheus, its ingested databases, the API over them
inference_prom = test_inference.inference_prom
ingested = test_inference.ingested
api = test_inference.api

MONTH = {"start": "2026-11-01T00:00:00Z", "end": "2026-12-01T00:00:00Z"}
SHOWN = (
    "input_tokens",
    "output_tokens",
    "requests",
    "cost_per_1m_input_tokens",
    "cost_per_1m_output_tokens",
    "usage_cost_per_1m_input_tokens",
    "usage_cost_per_1m_output_tokens",
)
ROW = re.compile(r'<tr data-group="([^"]*)">(.*?)</tr>', re.S)
CELL = re.compile(r'data-field="(\w+)" data-exact="([^"]*)"')


def table(html: str, table_id: str) -> dict[str, dict[str, str]]:
    """The inference table ``table_id`` of a page: group -> field -> the exact figure shown."""
    found = re.search(rf'<table id="{table_id}">(.*?)</table>', html, re.S)
    assert found, table_id
    return {g: dict(CELL.findall(cells)) for g, cells in ROW.findall(found[1])}


def api_table(api: Api, who: str, **params: Any) -> dict[str, dict[str, str]]:
    """``/v1/inference``'s rows as a page shows them (a null as "")."""
    r = api.get("/v1/inference", who, **MONTH, **params)
    assert r.status_code == 200, r.text
    return {
        "/".join(row["group"].values()): {f: "" if row[f] is None else str(row[f]) for f in SHOWN}
        for row in r.json()["rows"]
    }


def test_the_overview_shows_v1_inference_for_its_month(api: Api) -> None:
    with signed_in(api, "finance") as client:
        html = client.get("/ui/overview", params={"month": "2026-11"}).text
        by_model = table(html, "inference-table")
        assert by_model == api_table(api, "finance", group_by="model")
        assert LLAMA in by_model and MISTRAL in by_model
        # both hours of L, by hand (test_inference.py): 1 750 000e6 / 971 500 = 1.801338
        assert by_model[LLAMA]["cost_per_1m_input_tokens"] == "1.801338"
        by_team = table(html, "inference-teams-table")
        assert by_team == api_table(api, "finance", group_by="model,team")
        assert f"{MISTRAL}/search" in by_team and f"{LLAMA}/chat" in by_team
        # October has no inference rows: no section
        october = client.get("/ui/overview", params={"month": "2026-10"}).text
        assert 'id="inference"' not in october


def test_a_team_page_shows_its_own_models_only(api: Api) -> None:
    with signed_in(api, "team:search") as client:
        page = client.get("/ui/teams/search", params={"month": "2026-11"})
        assert page.status_code == 200
        mine = table(page.text, "inference-table")
        assert mine == api_table(api, "team:search", group_by="model")
        assert set(mine) == {MISTRAL}
        assert LLAMA not in page.text
        assert client.get("/ui/teams/chat", params={"month": "2026-11"}).status_code == 404
    with signed_in(api, "finance") as client:
        chat = table(
            client.get("/ui/teams/chat", params={"month": "2026-11"}).text, "inference-table"
        )
        assert chat == api_table(api, "finance", group_by="model", team="chat")
        assert MISTRAL not in chat and LLAMA in chat


def test_a_null_rate_says_why() -> None:
    row = {
        "input_tokens": 10,
        "output_tokens": 0,
        "usage_cost": None,
        "unmeasured_cost": "2.500000",
        "cost_per_1m_input_tokens": "1.000000",
        "cost_per_1m_output_tokens": None,
        "usage_cost_per_1m_input_tokens": None,
        "usage_cost_per_1m_output_tokens": None,
    }
    assert rate_cells(row) == [
        ("cost_per_1m_input_tokens", "1.000000", ""),
        ("cost_per_1m_output_tokens", None, "no output tokens"),
        ("usage_cost_per_1m_input_tokens", None, "usage unknown: 2.50 of the cost unmeasured"),
        ("usage_cost_per_1m_output_tokens", None, "usage unknown: 2.50 of the cost unmeasured"),
    ]
