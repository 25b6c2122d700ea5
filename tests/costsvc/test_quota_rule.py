"""The quota table's "held, not measured in use" against the cost table's rule (docs/cost-model.md,
"Unknown efficiency"; docs/rightsizing.md, "Quotas"): units held with no activity measured are
*unmeasured* in the costs, never idle waste; the quota figure is held - in use, so it is the
idle waste and the unmeasured together, and the team page says so rather than "idle".

Hand-computed: namespace ns holds two H100s (2.50 an hour) all week. p1 is measured, idle 25 %
of its time; p2 has no activity series. Per hour the costs say: p1 allocated 2.50, used 1.875,
idle waste 0.625; p2 allocated 2.50, unmeasured 2.50. The quota: held 2, in use 0.75, held
not in use 1.25, a month 1.25 x 2.50 x 730 = 2281.25 = (0.625 + 2.50) x 730 — and not the
idle waste's 0.625 x 730 = 456.25."""

from __future__ import annotations

from decimal import Decimal
from importlib.resources import files
from types import SimpleNamespace

from costsvc.advice.evidence import EvidenceReader, PodEvidence
from costsvc.advice.quotas import figures

WEEK, STEP = 7 * 86_400, 1_800
POINTS = Decimal(WEEK // STEP)  # 336 half-hour points
GPU = "nvidia.com/gpu"
PRICE = 2_500_000  # micro-units per unit-hour


def test_held_not_in_use_is_idle_waste_and_unmeasured_together() -> None:
    pods = {
        ("ns", "p1", "H100"): PodEvidence(
            idle_ratio=Decimal("0.25"), held_by_resource={GPU: POINTS}
        ),
        ("ns", "p2", "H100"): PodEvidence(idle_ratio=None, held_by_resource={GPU: POINTS}),
    }
    reader = SimpleNamespace(_window=WEEK, _step=STEP)
    held, active = EvidenceReader.quota_use(reader, pods)  # type: ignore[arg-type]
    (row,) = figures([], held, active, {GPU: PRICE})
    assert (row.held, row.active, row.idle) == (Decimal(2), Decimal("0.75"), Decimal("1.25"))
    hours = 730
    idle_waste = 625_000 * hours  # p1's 0.625 an hour
    unmeasured = 2_500_000 * hours  # p2's 2.50 an hour
    assert row.idle_monthly == idle_waste + unmeasured == 2_281_250_000
    assert row.idle_monthly != idle_waste


def test_the_team_page_never_calls_it_idle() -> None:
    page = (files("costsvc.pages") / "templates" / "team.html").read_text()
    assert "Held idle" not in page
    assert "Held, not measured in use, a month" in page
    assert "unmeasured in the costs above" in page
