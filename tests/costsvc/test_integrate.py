from __future__ import annotations

from decimal import Decimal as D

import pytest

from costsvc.ingest.integrate import covered, integral, max_gap_for, mean

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
