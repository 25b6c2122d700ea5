"""Idle shared at read time (``/v1/costs?idle=weighted|even``, costsvc/rules/idle_share.py) and
the week step, on SQLite and PostgreSQL over pages_history.py. The expected shares are worked out
here by hand from the history's prices (docs/api.md's worked example), never read back."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest

from costsvc.rules.idle_share import Held, share
from tests.costsvc.apiserver import Api, Clock, serve
from tests.costsvc.conftest import fresh_database
from tests.costsvc.pages_history import NOW, TEAMS, seed

M = 1_000_000
# a November hour (pages_history.py): a holds 2.50 + 1.25, b 1.25, nlp 1.25, the orphan pod
# 1.20 (__unallocated__); nobody holds GPU-A1's other half (1.25) or GPU-C0 (1.20): idle 2.45
ALLOCATED = {"a": 3_750_000, "b": 1_250_000, "nlp": 1_250_000, "__unallocated__": 1_200_000}
IDLE = 2_450_000
ONE_HOUR = {"start": "2026-11-01T12:00:00Z", "end": "2026-11-01T13:00:00Z"}


def test_weighted_is_by_allocated_cost_to_the_micro_unit() -> None:
    rows = [Held("c1", False, [w, 0]) for w in ALLOCATED.values()] + [Held("c1", True, [0, IDLE])]
    kept = share(rows, "weighted")
    # 2.45 x 3.75 / 7.45 = 1.233221476..., 2.45 x 1.25 / 7.45 = 0.411073825...,
    # 2.45 x 1.20 / 7.45 = 0.394630872...: floors 2,449,997, the three units left to the
    # largest remainders (.872 the orphan's, then .826 b's and nlp's)
    assert [r.amounts[1] for r in kept] == [1_233_221, 411_074, 411_074, 394_631]
    assert sum(r.amounts[1] for r in kept) == IDLE


def test_even_is_equal_and_a_scope_without_takers_keeps_its_idle() -> None:
    rows = [Held("c1", False, [5, 0]), Held("c1", False, [0, 0]), Held("c1", True, [0, 7])]
    rows += [Held("c2", True, [0, 9])]  # nobody held anything in c2
    kept = share(rows, "even")
    assert [(r.scope, r.idle, r.amounts) for r in kept] == [
        ("c1", False, [5, 4]),  # 7 / 2: 3 each, the unit left to the earlier row
        ("c1", False, [0, 3]),
        ("c2", True, [0, 9]),
    ]
    assert share(rows, "separate") == rows
    with pytest.raises(ValueError, match="idle 'shared'"):
        share(rows, "shared")


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    work = tmp_path_factory.mktemp(f"idle-share-{request.param}")
    with fresh_database(request.param, request, work) as url:
        seed(url)
        with serve(url, Clock(NOW), TEAMS) as running:
            yield running


def micro(text: str) -> int:
    return int(Decimal(text) * M)


def by_team(api: Api, who: str = "finance", **params: str) -> dict[str, dict[str, int]]:
    r = api.get("/v1/costs", who, group_by="team", **params)
    assert r.status_code == 200, r.text
    return {
        row["group"]["team"]: {k: micro(v) for k, v in row.items() if k.endswith("_cost")}
        for row in r.json()["rows"]
    }


def test_an_hour_shared_by_weight_and_evenly(api: Api) -> None:
    separate = by_team(api, **ONE_HOUR)
    assert separate["__idle__"]["total_cost"] == IDLE
    assert {t: separate[t]["allocated_cost"] for t in ALLOCATED} == ALLOCATED
    weighted = by_team(api, idle="weighted", **ONE_HOUR)
    assert "__idle__" not in weighted
    expect = dict(zip(ALLOCATED, (1_233_221, 411_074, 411_074, 394_631), strict=True))
    assert {t: weighted[t]["idle_cost"] for t in ALLOCATED} == expect
    even = by_team(api, idle="even", **ONE_HOUR)
    assert {t: even[t]["idle_cost"] for t in ALLOCATED} == dict.fromkeys(ALLOCATED, 612_500)
    for answer in (weighted, even):  # allocated, used, waste are not moved; the total is kept
        assert {t: answer[t]["allocated_cost"] for t in ALLOCATED} == ALLOCATED
        assert sum(r["total_cost"] for r in answer.values()) == 9_900_000


def test_a_month_keeps_its_total_for_every_grouping(api: Api) -> None:
    for group_by in ("team", "node", "project,namespace", "pod", "gpu_model"):
        totals = {}
        for idle in ("separate", "weighted", "even"):
            r = api.get("/v1/costs", group_by=group_by, window="lastmonth", idle=idle, step="day")
            assert r.status_code == 200, r.text
            rows = r.json()["rows"]
            totals[idle] = (
                sum(micro(x["total_cost"]) for x in rows),
                sum(micro(x["gpu_hours"]) for x in rows),
            )
        assert totals["weighted"] == totals["even"] == totals["separate"], group_by


def test_a_team_sees_its_share_of_the_fleets_idle(api: Api) -> None:
    weighted = by_team(api, idle="weighted", **ONE_HOUR)
    mine = by_team(api, "team:a", idle="weighted", **ONE_HOUR)
    assert mine == {"a": weighted["a"]}  # the share over every team's rows, its row alone
    assert by_team(api, "team:a", **ONE_HOUR) == {"a": by_team(api, **ONE_HOUR)["a"]}
    r = api.get("/v1/costs", "team:a", group_by="team", team="b", idle="even", **ONE_HOUR)
    assert r.status_code == 403


def test_weeks_start_on_monday_and_sum_their_days(api: Api) -> None:
    params = {"start": "2026-11-01T00:00:00Z", "end": "2026-12-01T00:00:00Z"}
    weeks = api.get("/v1/costs", step="week", **params).json()["rows"]
    days = api.get("/v1/costs", step="day", **params).json()["rows"]
    # 2026-11-01 is a Sunday: its week began on Monday 2026-10-26
    assert [w["start"] for w in weeks] == [
        "2026-10-26T00:00:00Z",
        "2026-11-02T00:00:00Z",
        "2026-11-09T00:00:00Z",
        "2026-11-16T00:00:00Z",
        "2026-11-23T00:00:00Z",  # 12:00 of every other day: the last is the 29th, a Sunday
    ]
    summed: dict[str, int] = {}
    for d in days:
        day = int(d["start"][8:10])
        week = weeks[0]["start"] if day == 1 else weeks[(day - 2) // 7 + 1]["start"]
        summed[week] = summed.get(week, 0) + micro(d["total_cost"])
    assert {w["start"]: micro(w["total_cost"]) for w in weeks} == summed
