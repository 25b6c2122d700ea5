"""Month over month on the pages, over pages_history.py (SQLite): October (its last two hours),
November (12:00 of every other day: 15 hours) and December to date (6 hours at NOW, 2026-12-03
12:30), with October closed and its 23:00 repriced (H100 2.50 -> 3.50: a correction billed in
November). Every expected figure is worked out here from the history's prices and hours, or
summed from ``/v1/costs``'s rows — never read back from the page."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import ROUND_FLOOR, Decimal

import pytest
from sqlalchemy import create_engine

from costsvc.kit.times import same_span_before
from costsvc.months.close import close_month
from tests.costsvc.apiserver import Api, Clock, serve
from tests.costsvc.pages_history import NOW, TEAMS, reprice, seed
from tests.costsvc.test_pages_access import signed_in

M = 1_000_000
HOUR = 3 * 2_500_000 + 2 * 1_200_000  # three H100s at 2.50 and two A100s at 1.20: 9.90
OCT, NOV, DEC = 2 * HOUR, 15 * HOUR, 6 * HOUR
CORRECTION = 3 * M  # Oct 31 23:00 again with the three H100s at 3.50: +1.00 each
# December at NOW runs [12-01, 12-03 12:00); November's same span [11-01, 11-03 12:00)
# holds one hour of it (11-01 12:00; 11-03 12:00 is the cut)
DEC_SPAN = {"start": "2026-12-01T00:00:00Z", "end": "2026-12-03T12:00:00Z"}
NOV_SPAN = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-03T12:00:00Z"}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    url = f"sqlite:///{tmp_path_factory.mktemp('trends') / 'costsvc.db'}"
    seed(url)
    engine = create_engine(url)
    close_month(engine, "2026-10", "test", NOW)
    engine.dispose()
    reprice(url, datetime(2026, 10, 31, 23, tzinfo=UTC), "3.50")
    with serve(url, Clock(NOW), TEAMS) as running:
        yield running


def ratio(part: int, whole: int) -> str:
    return str((Decimal(part) / Decimal(whole)).quantize(Decimal("0.000001"), ROUND_FLOOR))


def micro(text: str) -> int:
    return int(Decimal(text) * M)


def changes(html: str, where: str) -> list[tuple[str, int, str]]:
    """(currency, change in micro-units, ratio) of each change note after ``where``."""
    part = html[html.index(where) :]
    part = part[: part.index("</div>")] if "</div>" in part else part
    found = re.findall(r'data-currency="(\w+)" data-change="(-?\d+)" data-ratio="([^"]*)"', part)
    return [(c, int(v), r) for c, v, r in found]


def test_the_finance_page_gives_each_months_bill_change_and_corrections(api: Api) -> None:
    with signed_in(api, "finance") as client:
        html = client.get("/ui/finance").text
    rows = dict(
        re.findall(r'<tr data-month="(\d{4}-\d\d)" data-state="\w+">(.*?)</tr>', html, re.S)
    )
    assert set(rows) == {"2026-10", "2026-11", "2026-12"}

    def cell(month: str, field: str) -> str:
        found = re.search(rf'data-field="{field}">(.*?)</td>', rows[month], re.S)
        assert found, (month, field)
        return found[1]

    def money(micro_units: int) -> str:
        return f"USD {Decimal(micro_units) / M:,.2f}"

    assert money(OCT) in cell("2026-10", "total")  # 19.80: the correction is November's
    assert money(NOV + CORRECTION) in cell("2026-11", "total")  # 151.50
    assert money(DEC) in cell("2026-12", "total")  # 59.40
    assert money(CORRECTION) in cell("2026-11", "corrections")
    assert "—" in cell("2026-10", "corrections") and "—" in cell("2026-12", "corrections")
    # October: nothing before it; November against all of October: +131.70, 665.1515 %
    assert 'data-change="19800000" data-ratio=""' in cell("2026-10", "change")
    grew = NOV + CORRECTION - OCT
    assert f'data-change="{grew}" data-ratio="{ratio(grew, OCT)}"' in cell("2026-11", "change")
    assert "+665.2 %" in cell("2026-11", "change")
    # December to date against November's same span: its hour 11-01 12:00 and the
    # correction (billed in November, for an hour before the cut): 59.40 - 12.90 = +46.50
    was = HOUR + CORRECTION
    expected = f'data-change="{DEC - was}" data-ratio="{ratio(DEC - was, was)}"'
    assert expected in cell("2026-12", "change")
    assert "+360.5 %" in cell("2026-12", "change")  # 46.50 / 12.90 = 3.604651
    for month, state in (("2026-10", "closed"), ("2026-11", "incomplete"), ("2026-12", "open")):
        assert f'data-month="{month}" data-state="{state}"' in html


def summed(api: Api, span: dict[str, str], field: str, **filters: str) -> int:
    r = api.get("/v1/costs", **span, group_by="team", **filters)
    assert r.status_code == 200, r.text
    return sum(micro(row[field]) for row in r.json()["rows"])


def test_the_headline_cards_change_from_the_previous_months_same_span(api: Api) -> None:
    with signed_in(api, "finance") as client:
        html = client.get("/ui/overview").text
    assert summed(api, DEC_SPAN, "total_cost") == DEC
    assert summed(api, NOV_SPAN, "total_cost") == HOUR  # by hour: no correction rows
    assert changes(html, "<h2>Total</h2>") == [("USD", DEC - HOUR, ratio(DEC - HOUR, HOUR))]
    assert "+500.0 %" in html  # 59.40 against 9.90
    idle_now = summed(api, DEC_SPAN, "total_cost", team="__idle__")
    idle_was = summed(api, NOV_SPAN, "total_cost", team="__idle__")
    assert changes(html, "<h2>Idle capacity</h2>") == [
        ("USD", idle_now - idle_was, ratio(idle_now - idle_was, idle_was))
    ]
    waste_now = summed(api, DEC_SPAN, "allocated_idle_cost")
    waste_was = summed(api, NOV_SPAN, "allocated_idle_cost")
    assert changes(html, "<h2>Idle waste</h2>") == [
        ("USD", waste_now - waste_was, ratio(waste_now - waste_was, waste_was))
    ]


def test_a_team_pages_cards_change_too(api: Api) -> None:
    with signed_in(api, "team:a") as client:
        html = client.get("/ui/teams/a").text
    now, was = (summed(api, s, "total_cost", team="a") for s in (DEC_SPAN, NOV_SPAN))
    assert now and was
    assert changes(html, "<h2>Cost</h2>") == [("USD", now - was, ratio(now - was, was))]
    waste_now, waste_was = (
        summed(api, s, "allocated_idle_cost", team="a") for s in (DEC_SPAN, NOV_SPAN)
    )
    assert changes(html, "<h2>Idle waste</h2>") == [
        ("USD", waste_now - waste_was, ratio(waste_now - waste_was, waste_was))
    ]


def test_the_same_span_of_the_month_before() -> None:
    def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
        return datetime(year, month, day, hour, minute, tzinfo=UTC)

    # to date: up to now's hour; the month before for as long
    assert same_span_before("2026-12", NOW) == (
        (at(2026, 11, 1), at(2026, 11, 3, 12)),
        at(2026, 12, 3, 12),
    )
    # 30 days 15 hours of March: longer than February, all of it
    assert same_span_before("2026-03", at(2026, 3, 31, 15, 10)) == (
        (at(2026, 2, 1), at(2026, 3, 1)),
        at(2026, 3, 31, 15),
    )
    # ended (30 days): all of October's 31; January against December
    assert same_span_before("2026-11", NOW) == ((at(2026, 10, 1), at(2026, 11, 1)), at(2026, 12, 1))
    assert same_span_before("2026-01", NOW)[0] == (at(2025, 12, 1), at(2026, 1, 1))


def test_a_past_month_shows_no_advice_of_today(api: Api) -> None:
    """Quotas and recommendations are today's (pages_history.py saves one of each for team
    a): on this month's page, not on a past month's."""
    with signed_in(api, "finance") as client:
        now = client.get("/ui/teams/a").text
        past = client.get("/ui/teams/a?month=2026-11").text
    assert 'id="quota-table"' in now and 'id="savings"' in now and "today-only" not in now
    assert 'id="quota-table"' not in past and 'id="savings"' not in past
    assert 'id="today-only"' in past and 'href="/ui/teams/a"' in past
