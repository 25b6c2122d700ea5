from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from costsvc.kit.money import money as format_micro
from costsvc.kit.money import split, to_micro


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


def _exact_split(total: int, weights: list[Decimal]) -> list[int]:
    """Largest remainder in rational arithmetic (fractions): the reference for ``split``."""
    wsum = sum(Fraction(w) for w in weights)
    exact = [total * Fraction(w) / wsum for w in weights]
    parts = [math.floor(e) for e in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - parts[i]), i))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


@given(
    total=st.integers(0, 10**13),
    weights=st.lists(
        st.one_of(  # micro-units (whole ones: the fast way) and finer (a ratio's product)
            st.decimals(0, 10**7, places=6, allow_nan=False, allow_infinity=False),
            st.decimals(0, 10**7, places=11, allow_nan=False, allow_infinity=False),
        ),
        min_size=2,
        max_size=12,
    ).filter(lambda ws: sum(ws) > 0),
)
def test_split_of_decimal_weights_is_exact(total: int, weights: list[Decimal]) -> None:
    """Microsecond weights (share-seconds) of a large total (an hour's energy in mJ): the
    parts are the exact rational largest-remainder split, to the unit, however many digits
    the shares need (a quotient rounded to 28 digits could move a unit)."""
    assert split(total, weights) == _exact_split(total, weights)


def test_split_of_a_credit_mirrors_the_charge() -> None:
    """A negative total (a credit) is split as its charge is, with every sign turned."""
    weights = [Decimal("1"), Decimal("1"), Decimal("1.5")]
    assert split(10, weights) == [3, 3, 4]
    assert split(-10, weights) == [-3, -3, -4]
    assert sum(split(-7, [1, 1, 1])) == -7
