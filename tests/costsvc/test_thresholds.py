"""Alert thresholds and the percentages shown agree (costsvc/kit/ratios.py ``shown``): a ratio
under a threshold is never shown as the threshold. The API rounds ratios down to six places,
the alert rules and the dashboards compare and show them rounded down to 0.01 % (promtool
cases in alerts/tests/efficiency.test.yml and cost.test.yml: 0.59999979 fires "< 60 %" and
reads 59.99 %); here the API's side, and that the three use the same floor."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest

from costsvc.budgets.state import budget_state
from costsvc.costs.queries import efficiency
from costsvc.kit.ratios import ratio
from costsvc.kit.ratios import ratio_text as shown

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("used", "waste", "text"),
    [(59_999_979, 40_000_021, "0.599999"), (60, 40, "0.600000"), (29, 71, "0.290000")],
)
def test_efficiency_is_shown_rounded_down(used: int, waste: int, text: str) -> None:
    eff = efficiency(used, waste)
    assert eff is not None and shown(eff) == text
    assert (Decimal(text) < Decimal("0.6")) == (eff < Decimal("0.6"))  # as the alert decides


def test_a_budget_just_under_its_amount_is_not_shown_as_used_up() -> None:
    state = budget_state(9_999_996, 9_999_996, 10_000_000, [0.8, 1.0])
    assert state.used_ratio == "0.999999" and state.crossed == [0.8]
    assert ratio(10_000_000, 10_000_000) == "1.000000"


def test_alerts_and_dashboards_floor_the_ratios_they_compare_and_show() -> None:
    rules = (ROOT / "alerts" / "gpu-finops.rules.yml").read_text()
    floor = (
        r"floor\((?:avg_over_time\()?costsvc_\w+_ratio(?:\[6h\]\))? \* 10000 \+ 0\.000001\) / 10000"
    )
    for name in (
        "costsvc_hourly_efficiency_ratio",
        "costsvc_budget_used_ratio",
        "costsvc_budget_energy_used_ratio",
        "costsvc_budget_forecast_ratio",
    ):
        exprs = re.findall(rf"expr: (.*{name}.*)", rules)
        assert exprs and all(re.search(floor, e) for e in exprs), (name, exprs)
    finops = (ROOT / "dashboards" / "gpu-finops.json").read_text()
    assert "floor((costsvc_hourly_efficiency_ratio" in finops
