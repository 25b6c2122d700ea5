"""Money as integer micro-units of the billing currency: exact splits, and the one way it is
written as text.

Amounts are computed in :class:`~decimal.Decimal` and stored as ``int`` micro-units
(1 USD = 1_000_000). Splitting an integer amount by weights uses the largest-remainder method,
so the parts always add up to the whole, to the micro-unit. Text is a plain decimal with six
places (``2500000`` -> ``"2.500000"``), never through a float: :func:`money` in Python and
:func:`money_sql` in SQL (the PostgreSQL COPY path of the CSV export) write the same bytes;
kilograms of CO2e from milligrams are the same text (:func:`kg`). Every rounding to a whole
micro-unit is :func:`to_micro` (from currency units) or :func:`round_micro` (of an exact
micro-unit amount); no other module writes these (tests/test_rules_homes.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from sqlalchemy import Numeric, String, cast

MICRO = 1_000_000


def to_micro(amount: Decimal | str | int) -> int:
    """An amount in currency units as micro-units, rounded half to even."""
    return int((Decimal(amount) * MICRO).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def round_micro(value: Decimal) -> int:
    """An exact amount of a unit kept as an integer (micro-units, mJ, mg, mW, tokens) rounded
    half to even to a whole one: the one rounding of a :class:`~decimal.Decimal` to what is
    stored."""
    return int(value.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def money(micro: int) -> str:
    """Micro-units as a plain decimal string with 6 places: 2500000 -> '2.500000', -3 ->
    '-0.000003' (integer arithmetic: this runs for every cell of a month's CSV)."""
    units, frac = divmod(abs(micro), MICRO)
    return f"{'-' if micro < 0 else ''}{units}.{frac:06d}"


def kg(mg: int) -> str:
    """Milligrams as kilograms, exactly: a kilogram is a million milligrams, so it is
    :func:`money`'s text (six places; :func:`money_sql` in SQL)."""
    return money(mg)


def money_rounded(micro: int, places: int = 2) -> str:
    """Micro-units rounded half to even to ``places`` decimals, with thousands separators,
    for people to read (the pages): 1234567891 -> '1,234.57'. Exports use :func:`money`."""
    value = Decimal(micro).scaleb(-6).quantize(Decimal(1).scaleb(-places), ROUND_HALF_EVEN)
    return f"{value if value else abs(value):,}"  # never '-0.00'


def money_sql(column: Any) -> Any:
    """:func:`money` as a SQL expression over an integer micro-unit column (PostgreSQL)."""
    return cast(cast(column, Numeric(38, 0)) / MICRO, Numeric(38, 6)).cast(String)


def split(total: int, weights: Sequence[Decimal | int], signed: bool = False) -> list[int]:
    """``total`` split in proportion to ``weights``; the parts sum to ``total`` exactly.
    ``signed``: a weight may be below 0 where the weights sum above 0 (a correction moving
    money between lines; its part is then the floor of its exact share, plus its unit).

    Largest remainder: each part gets the floor of its exact share, and the units left over
    go to the largest fractional remainders (ties to the earlier weight). All-zero weights
    split evenly. Exact: the weights are brought to integers in the same proportions (a
    Decimal is a ratio of integers) and each share is an integer division, so no rounding of
    a quotient can move a unit (this runs for every holder's money, energy and carbon).
    """
    if not weights:
        if total:
            raise ValueError(f"cannot split {total} over nothing")
        return []
    if len(weights) == 1:  # the common case (a whole GPU's one holder): all of it
        if weights[0] < 0:
            raise ValueError("weights must not be negative")
        return [total]
    ws = _integers(weights)
    wsum = sum(ws)
    if min(ws) < 0 and not (signed and wsum > 0):
        raise ValueError("weights must not be negative")
    if wsum == 0:
        ws, wsum = [1] * len(ws), len(ws)
    # floor of each exact share toward zero (a negative total: a credit), and what is left of it
    whole = abs(total)
    shares = [divmod(whole * w, wsum) for w in ws]
    parts = [q for q, _ in shares]
    left = whole - sum(parts)
    if left:  # (a stable sort: ties keep the earlier weight first)
        rest = [r for _, r in shares]
        for i in sorted(range(len(ws)), key=rest.__getitem__, reverse=True)[:left]:
            parts[i] += 1
    return parts if total >= 0 else [-p for p in parts]


def _integers(weights: Sequence[Decimal | int]) -> list[int]:
    """The weights as integers in the same proportions (over their common denominator: a
    Decimal is a ratio of integers; an ``int`` its own). Any such integers split alike: each
    share's floor and remainder scale with them, so the parts and the order of the
    remainders do not change."""
    if all(type(w) is int for w in weights):
        return list(weights)  # type: ignore[arg-type]
    ratios = [w.as_integer_ratio() for w in weights]
    common = math.lcm(*(d for _, d in ratios))
    return [n * (common // d) for n, d in ratios]
