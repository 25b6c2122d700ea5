"""The fleet page's health, over pages_history.py on SQLite and PostgreSQL: its money by GPU
model and by node is ``/v1/costs?group_by=gpu_model`` and ``group_by=node`` for the month, every
figure with its unit."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.costsvc.apiserver import Api, Clock, serve
from tests.costsvc.conftest import fresh_database
from tests.costsvc.pages_history import NOW, TEAMS, seed
from tests.costsvc.test_pages_access import signed_in

DEC = {"start": "2026-12-01T00:00:00Z", "end": "2027-01-01T00:00:00Z"}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with fresh_database(request.param, request, tmp_path_factory.mktemp("fleet")) as url:
        seed(url)
        with serve(url, Clock(NOW), TEAMS) as running:
            yield running


def table(html: str, table_id: str) -> list[list[str]]:
    """The body rows of a table: each cell's exact figure (``data-exact``) or its text."""
    part = html[html.index(f'id="{table_id}"') :]
    body = part[part.index("<tbody>") : part.index("</tbody>")]
    rows = []
    for row in re.findall(r"<tr>(.*?)</tr>", body, re.S):
        cells = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)
        out = []
        for c in cells:
            exact = re.search(r'data-exact="([^"]*)"', c)
            out.append(exact[1] if exact else re.sub(r"<[^>]+>", "", c).strip())
        rows.append(out)
    return rows


@pytest.mark.parametrize(
    ("dim", "table_id"), [("gpu_model", "money-by-model"), ("node", "money-by-node")]
)
def test_money_is_the_apis_rows(api: Api, dim: str, table_id: str) -> None:
    with signed_in(api, "finance") as client:
        html = client.get("/ui/fleet", params={"month": "2026-12"}).text
    rows = api.get("/v1/costs", "finance", group_by=dim, **DEC).json()["rows"]
    assert rows
    want = [
        [
            r["group"][dim],
            r["currency"],
            r["allocated_cost"],
            r["idle_cost"],
            r["unavailable_cost"],
            r["total_cost"],
            f"{float(r['gpu_hours']):.1f}",
        ]
        for r in rows
    ]
    assert table(html, table_id) == want
    # a lost GPU's time is money: node-b's A100 was lost 10 minutes of each December hour
    if dim == "node":
        assert {r[0]: r[4] for r in want}["node-b"] != "0.000000"


def test_every_card_and_column_names_its_unit(api: Api) -> None:
    with signed_in(api, "finance") as client:
        html = client.get("/ui/fleet", params={"month": "2026-12"}).text
    cards = re.findall(r'<div class="card">(.*?)</div>', html, re.S)
    assert len(cards) == 5
    for card in cards[1:]:
        assert "GPU-hours" in card, card
    for header in ("Hours (GPU-h)", "Allocated (GPU-h)", "Idle (GPU-h)", "Currency"):
        assert header in html


def test_a_lost_gpu_is_listed_with_its_node_model_and_since_when(api: Api) -> None:
    """GPU-B1 (node-b, A100) was lost 10 minutes in each of December's six hours, the last
    of them the last hour ingested (2026-12-03 06:00)."""
    with signed_in(api, "finance") as client:
        html = client.get("/ui/fleet", params={"month": "2026-12"}).text
        october = client.get("/ui/fleet", params={"month": "2026-10"}).text
    assert table(html, "lost") == [
        [
            "GPU-B1",
            "c1",
            "node-b",
            "NVIDIA A100-SXM4-80GB",
            "2026-12-01 00:00",
            "2026-12-03 06:00",
            "1.0",
            "—",  # no query API configured here: no XID known (tests/costsvc/test_pages_xids.py)
        ]
    ]
    assert "No GPU reported lost in 2026-10." in october or table(october, "lost")
