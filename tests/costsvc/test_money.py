from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from costsvc.money import money as format_micro
from costsvc.money import split, to_micro


@pytest.mark.parametrize(
    ("amount", "micro"),
    [
        ("2.50", 2_500_000),
        ("0.0000005", 0),
        ("0.0000015", 2),
        ("1.2345675", 1_234_568),
        (3, 3_000_000),
    ],
)
def test_to_micro_rounds_half_even(amount: str | int, micro: int) -> None:
    assert to_micro(amount) == micro


def test_format() -> None:
    assert format_micro(1_250_000) == "1.250000"
    assert format_micro(-3) == "-0.000003"


@pytest.mark.parametrize(
    ("total", "weights", "parts"),
    [
        (10, [1, 1, 1], [4, 3, 3]),
        (100, [3, 2, 1, 1], [43, 29, 14, 14]),
        (7, [0, 0], [4, 3]),
        (0, [1, 2], [0, 0]),
        (
            1_000_000,
            [Decimal("0.5"), Decimal("0.25"), Decimal("0.25")],
            [500_000, 250_000, 250_000],
        ),
    ],
)
def test_split_by_hand(total: int, weights: list[int], parts: list[int]) -> None:
    assert split(total, weights) == parts


@given(
    total=st.integers(0, 10**12), weights=st.lists(st.integers(0, 10**6), min_size=1, max_size=40)
)
def test_split_always_adds_up(total: int, weights: list[int]) -> None:
    parts = split(total, weights)
    assert sum(parts) == total
    assert all(p >= 0 for p in parts)
    wsum = sum(weights)
    if wsum:  # each part is within one micro-unit of its exact share
        assert all(
            abs(p - Decimal(total) * w / wsum) < 1 for p, w in zip(parts, weights, strict=True)
        )
