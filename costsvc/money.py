"""Money as integer micro-units of the billing currency; exact splits.

Amounts are computed in :class:`~decimal.Decimal` and stored as ``int`` micro-units
(1 USD = 1_000_000). Splitting an integer amount by weights uses the largest-remainder method,
so the parts always add up to the whole, to the micro-unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_HALF_EVEN, Decimal

MICRO = 1_000_000


def to_micro(amount: Decimal | str | int) -> int:
    """An amount in currency units as micro-units, rounded half to even."""
    return int((Decimal(amount) * MICRO).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def from_micro(micro: int) -> Decimal:
    return (Decimal(micro) / MICRO).quantize(Decimal("0.000001"))


def format_micro(micro: int) -> str:
    """A plain decimal string with six places: ``2500000`` -> ``"2.500000"``."""
    return f"{from_micro(micro):f}"


def round_micro(value: Decimal) -> int:
    return int(value.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def split(total: int, weights: Sequence[Decimal | int]) -> list[int]:
    """``total`` split in proportion to ``weights``; the parts sum to ``total`` exactly.

    Largest remainder: each part gets the floor of its exact share, and the units left over
    go to the largest fractional remainders (ties to the earlier weight). All-zero weights
    split evenly.
    """
    if not weights:
        if total:
            raise ValueError(f"cannot split {total} over nothing")
        return []
    ws = [Decimal(w) for w in weights]
    if any(w < 0 for w in ws):
        raise ValueError("weights must not be negative")
    wsum = sum(ws)
    if wsum == 0:
        ws, wsum = [Decimal(1)] * len(ws), Decimal(len(ws))
    exact = [Decimal(total) * w / wsum for w in ws]
    parts = [int(e // 1) for e in exact]
    left = total - sum(parts)
    order = sorted(range(len(ws)), key=lambda i: (-(exact[i] - parts[i]), i))
    for i in order[:left]:
        parts[i] += 1
    return parts
