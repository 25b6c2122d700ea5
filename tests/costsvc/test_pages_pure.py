"""The pages' pure parts: money for people, chart geometry, a GPU's hours (hand-computed)."""

from __future__ import annotations

import pytest

from costsvc.fleet.usage import GpuUse, hours, idlest, totals_by
from costsvc.kit.money import money_rounded
from costsvc.pages.charts import OTHER, SERIES, nice_step, stacked_bars, stacked_columns
from costsvc.pages.render import amount, percent, places, segment

HOUR = 3_600_000_000


@pytest.mark.parametrize(
    ("micro", "text"),
    [
        (0, "0.00"),
        (-3, "0.00"),  # never "-0.00"
        (2_505_000, "2.50"),  # half to even
        (2_515_000, "2.52"),
        (-2_505_001, "-2.51"),
        (1_234_567_891, "1,234.57"),
        (10**15, "1,000,000,000.00"),
    ],
)
def test_money_for_people(micro: int, text: str) -> None:
    assert money_rounded(micro) == text


def test_page_filters() -> None:
    assert amount("12.345678") == "12.35"
    assert amount(None) == "—"
    assert percent("0.345650") == "34.6 %"  # 34.565 -> 34.6 (half to even at the 2nd place)
    assert percent(None) == "—"
    assert places("1.949999999", 1) == "1.9"
    assert segment('a/b?c#d "e" é') == "a%2Fb%3Fc%23d%20%22e%22%20%C3%A9"


@pytest.mark.parametrize(
    ("top", "unit", "step"),
    [
        (19_800_000, 1_000_000, 5_000_000),  # 19.8 -> ticks of 5
        (4_000_000, 1_000_000, 1_000_000),
        (4_100_000, 1_000_000, 2_000_000),
        (300_000, 1_000_000, 100_000),  # 0.30 -> ticks of 0.1
        (18 * HOUR, HOUR, 5 * HOUR),
        (0, 1_000_000, 1_000_000),
        (3, 1_000_000, 1),  # never 0
    ],
)
def test_nice_steps(top: int, unit: int, step: int) -> None:
    assert nice_step(top, unit) == step


def test_stacked_columns_stack_each_category_to_its_total() -> None:
    c = stacked_columns(
        "t", ["01", "02"], [("a", [3_000_000, 1_000_000]), ("b", [1_000_000, -5])], str, 1_000_000
    )
    span = c.bottom - c.top
    # the axis ends at 4 (ticks of 1): the first column is 3 + 1 = the whole height
    assert [t.text for t in c.ticks] == ["0", "1000000", "2000000", "3000000", "4000000"]
    first = [r for r in c.rects if r.label.startswith("01")]
    assert sum(r.h for r in first) == pytest.approx(span)
    assert min(r.y for r in first) == pytest.approx(c.top)
    second = [r for r in c.rects if r.label.startswith("02")]
    assert [r.label for r in second] == ["02 a: 1000000"]  # a negative value is not drawn
    assert c.legend == [(0, "a"), (1, "b")]  # the biggest series first


def test_more_series_than_colours_make_one_other() -> None:
    series = [(f"t{i}", [i + 1]) for i in range(SERIES + 3)]
    c = stacked_columns("t", ["01"], series, str, 1)
    assert len(c.legend) == SERIES + 1
    assert c.legend[-1] == (OTHER, "other (3)")
    other = next(r for r in c.rects if r.series == OTHER)
    assert other.label == "01 other (3): 6"  # t0 + t1 + t2: 1 + 2 + 3


def test_stacked_bars_lay_parts_end_to_end() -> None:
    c = stacked_bars(
        "t", ["H100", "A100"], [("allocated", 0, [15, 5]), ("idle", 1, [3, 6])], str, 1
    )
    h100 = [r for r in c.rects if r.label.startswith("H100")]
    assert h100[0].x == c.left and h100[1].x == pytest.approx(h100[0].x + h100[0].w)
    assert h100[0].w / h100[1].w == pytest.approx(15 / 3)


def test_a_gpus_hours() -> None:
    # held 50 min, 10 of the hour lost: allocated 50, unavailable 10, idle 0
    g = GpuUse("c", "n", "GPU-1", "H100", HOUR, HOUR * 5 // 6, HOUR // 6)
    assert (g.allocated_us, g.unavailable_us, g.idle_us) == (HOUR * 5 // 6, HOUR // 6, 0)
    # more held than present (bad data) is capped at what was there
    over = GpuUse("c", "n", "GPU-2", "H100", HOUR, 2 * HOUR, 0)
    assert (over.allocated_us, over.idle_us) == (HOUR, 0)
    idle = GpuUse("c", "m", "GPU-3", "A100", 2 * HOUR, HOUR // 2, 0)
    assert idle.idle_us == 3 * HOUR // 2 and str(idle.idle_ratio) == "0.75"
    by_model = dict(totals_by([g, over, idle], lambda x: x.model))
    assert (by_model["H100"].gpus, by_model["H100"].allocated_us) == (2, HOUR * 11 // 6)
    assert [x.gpu_uuid for x in idlest([g, over, idle], 2)] == ["GPU-3", "GPU-1"]
    assert hours(5_400_000_000) == "1.5" and hours(HOUR // 6) == "0.2"


def test_a_past_month_keeps_its_month_and_its_currency() -> None:
    from datetime import UTC, datetime

    from costsvc.pages.figures import day_columns, overview_sums, picker_months

    # a month before the history began is still the one the picker names
    assert picker_months(["2026-12", "2026-11"], "2026-09") == ["2026-12", "2026-11", "2026-09"]
    assert picker_months(["2026-12", "2026-11"], "2026-11") == ["2026-12", "2026-11"]
    zero = {k: "0" for k in ("allocated_cost", "used_cost", "allocated_idle_cost")}
    row = {"group": {"team": "a"}, "currency": "EUR", "total_cost": "2.500000", **zero}
    row |= {"unmeasured_cost": "0", "idle_cost": "0", "unavailable_cost": "0"}
    sums = overview_sums([row])
    assert sums["all"].text("total_cost") == ["EUR 2.50"]
    assert sums["idle"].text("total_cost") == ["EUR 0.00"]  # no idle line: 0, in EUR
    assert overview_sums([])["idle"].text("total_cost") == []
    start, end = datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC)
    day = {"start": "2026-10-02T00:00:00Z", "group": {"team": "a"}, "currency": "EUR"}
    chart = day_columns("t", [day | {"total_cost": "3.000000"}], start, end, end, "team")
    assert chart.axis == "EUR" and len(chart.labels) == 31 // 3 + 1


def test_a_daily_charts_table_is_its_numbers() -> None:
    """A row per day up to today, a column per team (sorted), the day's total; a team's rows
    of a day summed, a correction kept negative, a day without rows 0."""
    from datetime import UTC, datetime

    from costsvc.pages.figures import day_table

    start, end = datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)
    now = datetime(2026, 12, 3, 12, 30, tzinfo=UTC)

    def row(day: int, team: str, cost: str) -> dict[str, object]:
        at = f"2026-12-{day:02d}T00:00:00Z"
        return {"start": at, "group": {"team": team}, "currency": "USD", "total_cost": cost}

    rows = [row(1, "b", "1.250000"), row(1, "a", "2.000000"), row(1, "a", "0.500001")]
    rows += [row(3, "b", "-0.750000"), row(4, "a", "9.000000")]  # the 4th: after today
    t = day_table(rows, start, end, now, "team")
    assert (t.names, t.currency) == (["a", "b"], "USD")
    assert t.days == [
        ("2026-12-01", ["2.500001", "1.250000"], "3.750001"),
        ("2026-12-02", ["0.000000", "0.000000"], "0.000000"),
        ("2026-12-03", ["0.000000", "-0.750000"], "-0.750000"),
    ]
    assert day_table([], start, end, now, "team").days[0] == ("2026-12-01", [], "0.000000")
