from __future__ import annotations

from decimal import Decimal as D

import pytest
from hypothesis import given
from hypothesis import strategies as st

from costsvc.ingest.gauges.holding_hour import measure
from costsvc.ingest.gauges.sampled import (
    covered,
    integral,
    max_gap_for,
    mean,
    overlap,
    pieces,
    summed,
    total,
    without,
)

GAP = D(60)  # a sample holds at most a minute


def every(step: int, start: int, stop: int, value: str = "1") -> list[tuple[D, D]]:
    return [(D(t), D(value)) for t in range(start, stop, step)]


def test_held_all_hour_at_15s_scrapes() -> None:
    assert integral(every(15, -15, 3600), D(0), D(3600), GAP) == D(3600)


def test_held_for_the_first_30_minutes() -> None:
    # the last sample at 1785 holds 15 s to 1800; after that the series is gone
    assert integral(every(15, 0, 1800), D(0), D(3600), D(30)) == D(1800)


def test_a_20_minute_scrape_gap_is_not_held() -> None:
    samples = every(15, -15, 1200) + every(15, 2400, 3600)
    # the sample at 1185 holds one scrape interval, to 1200; then from 2400 to 3600
    assert integral(samples, D(0), D(3600), GAP) == D(1200) + D(1200)


def test_lookback_sample_carries_into_the_window_only() -> None:
    assert integral([(D(-10), D(2))], D(0), D(3600), GAP) == D(2) * 50


def test_values_and_mean() -> None:
    samples = [(D(0), D("0.5")), (D(1800), D("1"))]
    assert integral(samples, D(0), D(3600), D(3600)) == D(2700)
    assert mean(samples, D(0), D(3600), D(3600)) == D("0.75")
    assert covered([], D(0), D(3600), GAP) == 0
    assert mean([], D(0), D(3600), GAP) == 0


@pytest.mark.parametrize("step", [1, 5, 15, 30, 60])
def test_step_does_not_change_a_constant(step: int) -> None:
    assert integral(every(step, 0, 3600, "0.25"), D(0), D(3600), D(step * 2)) == D(900)


@pytest.mark.parametrize(
    ("step", "expected"),
    # two scrape intervals, never under a minute nor over five
    [(15, 60), (30, 60), (60, 120), (120, 240), (600, 300)],
)
def test_the_gap_threshold_follows_the_scrape_interval(step: int, expected: int) -> None:
    assert max_gap_for(every(step, 0, 3600), D(60), D(300)) == D(expected)
    assert max_gap_for([(D(0), D(1))], D(60), D(300)) == D(60)  # one sample: the floor


def test_one_missed_scrape_at_60s_is_held_but_20_minutes_are_not() -> None:
    samples = [s for s in every(60, -60, 3600) if s[0] != 1800]  # the 30:00 scrape failed
    gap = max_gap_for(samples, D(60), D(300))
    assert integral(samples, D(0), D(3600), gap) == D(3600)
    gappy = every(60, -60, 1200) + every(60, 2400, 3600)
    assert integral(gappy, D(0), D(3600), max_gap_for(gappy, D(60), D(300))) == D(2400)


def test_summed_adds_where_any_is_defined() -> None:
    a = [(D(0), D(10), D(1)), (D(10), D(20), D(2))]
    b = [(D(5), D(15), D("0.5"))]
    assert summed([a, b]) == [
        (D(0), D(5), D(1)),
        (D(5), D(10), D("1.5")),
        (D(10), D(15), D("2.5")),
        (D(15), D(20), D(2)),
    ]
    assert summed([[(D(0), D(5), D(1))], [(D(10), D(15), D(1))]]) == [
        (D(0), D(5), D(1)),
        (D(10), D(15), D(1)),  # undefined in between: no piece
    ]


def test_overlap_and_without() -> None:
    share = [(D(0), D(1800), D(1))]
    util = [(D(0), D(900), D("0.8")), (D(900), D(3600), D(0))]
    assert overlap(share, util) == [
        (D(0), D(900), D(1), D("0.8")),
        (D(900), D(1800), D(1), D(0)),
    ]
    holes = [(D(100), D(200)), (D(1700), D(4000))]
    assert without(share, holes) == [(D(0), D(100), D(1)), (D(200), D(1700), D(1))]


def test_measure_is_the_utilisation_of_what_was_held() -> None:
    # held 0-1800 at share 1; utilisation 0.8 while held, 0 after; lost 600-900
    share = [(D(0), D(1800), D(1))]
    util = [(D(0), D(1800), D("0.8")), (D(1800), D(3600), D(0))]
    seconds, ratio, own = measure(share, [(D(600), D(900))], util, None)
    assert (seconds, ratio, own) == (D(1500), D("0.8"), None)
    # utilisation unknown for the whole held time: unknown, not 0
    assert measure(share, [], [(D(1800), D(3600), D(1))], None)[1] is None
    # own SM time counts only while held
    sm = [(D(0), D(3600), D("0.2"))]
    assert measure(share, [], None, sm)[2] == D(360)


@given(st.lists(st.integers(0, 3600), min_size=1, max_size=40, unique=True))
def test_integral_is_the_total_of_the_pieces(times: list[int]) -> None:
    samples = [(D(t), D(t % 7)) for t in sorted(times)]
    assert total(pieces(samples, D(0), D(3600), GAP)) == integral(samples, D(0), D(3600), GAP)
