"""A ratio as text, the one way every answer writes it: six places, rounded *down*
(:func:`ratio_text`, :func:`ratio`). Pure."""

from __future__ import annotations

from decimal import ROUND_FLOOR, Decimal

SIX_PLACES = Decimal("0.000001")  # a ratio as shown: six places, 0.0001 %


def ratio_text(value: Decimal) -> str:
    """A ratio as every answer shows it: rounded *down* to six places, so a ratio below an
    alert threshold never reads as the threshold (0.59999979 is "0.599999", not "0.600000",
    while the "< 60 %" alert fires); the alert rules and dashboards floor the same way
    (alerts/README.md)."""
    return str(value.quantize(SIX_PLACES, rounding=ROUND_FLOOR))


def ratio(part: int, whole: int) -> str:
    """``part / whole`` as a decimal string with six places, :func:`ratio_text` ("0.000000" when
    whole is 0)."""
    return ratio_text(Decimal(part) / Decimal(whole)) if whole else "0.000000"
