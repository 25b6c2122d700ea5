"""The FOCUS 1.3 split rule, pure (costsvc/reports/split.py, costsvc/reports/focus13.py):
ratios exact by the largest-remainder rule, a correction split the same way with negative
amounts, an idle line's free and lost parts, and the spec-derived checks
(tests/costsvc/focus13_checks.py) catching a ratio sum of 0.999999."""

from __future__ import annotations

import csv
import io
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from costsvc.reports.focus import ChargeRow
from costsvc.reports.focus13 import focus13_lines
from costsvc.reports.split import (
    DRA_CLAIM,
    IDLE_SEPARATE,
    UNAVAILABLE,
    Held,
    parts,
    ratios,
)
from costsvc.rules.chargeback import IDLE
from costsvc.rules.cost_model import Policies
from tests.costsvc.focus13_checks import sums, violations

H = datetime(2026, 11, 3, 5, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        # 3:2:1:1 of 7: 428571.43, 285714.29, 142857.14 x 2 (floors 999999): the unit to 3's .43
        ([3, 2, 1, 1], [428572, 285714, 142857, 142857]),
        # three equal: 333333.33 each, the unit to the first (ties to the earlier)
        ([1, 1, 1], [333334, 333333, 333333]),
        ([5, 0], [1_000_000, 0]),
        # a correction moving 1.00 from one line to another, net +0.50 (negative weights):
        # -1000000 / 500000 = -2, 1500000 / 500000 = 3
        ([-1_000_000, 1_500_000], [-2_000_000, 3_000_000]),
        # a correction of -0.30 over -0.10 and -0.20: 333333.33 and 666666.67 (floors
        # 999999): the unit to the larger remainder, .67
        ([-100_000, -200_000], [333333, 666667]),
        ([], []),
    ],
)
def test_ratios_add_up_to_exactly_one(weights: list[int], expected: list[int]) -> None:
    got = ratios(weights, [])
    assert got == expected
    assert sum(got) == (1_000_000 if weights else 0)


def test_a_zero_origin_splits_by_gpu_hours_then_equally() -> None:
    assert ratios([0, 0], [1, 3]) == [250_000, 750_000]
    assert ratios([0, 0], [0, 0]) == [500_000, 500_000]


def _row(**kw: object) -> ChargeRow:
    base = ChargeRow(
        hour=H,
        billing_month="2026-11",
        cluster="prod",
        team="ml",
        project="llm",
        stage="prod",
        namespace="train",
        pod="p0",
        node="node-a",
        gpu_model=H100,
        mig_profile="",
        container="main",
        correction=False,
        currency="USD",
        allocated=833_334,
        gpu_hours=333_334,
        unit_price=2_500_000,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


# GPU node-a, 2.50: a claim shared by p0, p1 for the hour (833334, 833333), the rest idle
# 833333 of which 20 minutes lost (the GPU was lost 10:20-10:40: 0.333333 GPU-hours)
CLAIM = Held(claim="train/shared", shared=True, share_us=1_200_000_000)
HOUR_ROWS = [
    (_row(), CLAIM),
    (_row(pod="p1", allocated=833_333, gpu_hours=333_333), CLAIM),
    (
        _row(
            team=IDLE,
            project=IDLE,
            stage=IDLE,
            namespace="",
            pod="",
            container="",
            allocated=0,
            idle=833_333,
            gpu_hours=333_333,
            unavailable=833_333,
            unavailable_gpu_hours=333_333,
        ),
        None,
    ),
]


def _csv(hour: list[tuple[ChargeRow, Held | None]]) -> list[dict[str, str]]:
    text = "".join(focus13_lines([hour], lambda c, h: Policies()))
    return list(csv.DictReader(io.StringIO(text)))


def test_an_hour_split_by_hand_passes_the_spec_checks() -> None:
    rows = _csv(HOUR_ROWS)
    assert [(r["AllocatedMethodId"], r["BilledCost"]) for r in rows] == [
        (DRA_CLAIM, "0.833334"),
        (DRA_CLAIM, "0.833333"),
        (UNAVAILABLE, "0.833333"),  # all of the idle line's idle was lost time
    ]
    assert violations(rows) == []
    [total] = sums(rows).values()
    assert total["BilledCost"] == Decimal("2.5") and total["PricingQuantity"] == 1
    assert '"x_Claim":"train/shared"' in rows[0]["AllocatedMethodDetails"]
    assert rows[2]["AllocatedResourceId"] == rows[2]["AllocatedTags"] == ""


def test_a_ratio_sum_of_0_999999_is_caught() -> None:
    rows = _csv(HOUR_ROWS)
    # 0.333334 + 0.333333 + 0.333333 = 1; one micro-unit less on the first: 0.999999
    rows[0]["AllocatedMethodDetails"] = rows[0]["AllocatedMethodDetails"].replace(
        '"AllocatedRatio":0.333334', '"AllocatedRatio":0.333333'
    )
    found = violations(rows)
    assert len(found) == 1 and "ratios sum to 0.999999" in found[0], found


@pytest.mark.parametrize(
    ("column", "value", "rule"),
    [
        ("ResourceId", "prod/nodes/node-b", "differ in ResourceId"),
        ("ListUnitPrice", "2.600000", "differ in ListUnitPrice"),
        ("AllocatedMethodId", "", "allocatedmethodid.md: null"),
        ("AllocatedMethodDetails", '{"Elements":[{"UsageQuantity":1}]}', "AllocatedRatio"),
        ("AllocatedTags", '{"gpu-finops/cluster":"prod"}', "repeats Tags keys"),
        ("ServiceProviderName", "", "serviceprovidername.md: null"),
    ],
)
def test_the_checks_catch_each_broken_rule(column: str, value: str, rule: str) -> None:
    rows = _csv(HOUR_ROWS)
    rows[1][column] = value
    assert any(rule in v for v in violations(rows)), violations(rows)


def test_a_correction_is_split_the_same_way_with_negative_amounts() -> None:
    """A closed month's hour corrected in the next: the claim's two holders lose 0.30 and
    0.60 (a re-ingest found less), idle gains 0.90 back: the correction's origin nets 0, so
    its ratios are by GPU-hours (-0.1, -0.2 and +0.3 GPU-hours: net 0, then equal thirds);
    a correction with a net: by its money."""
    month = {"billing_month": "2026-12", "correction": True, "unit_price": None}
    rows = [
        (_row(allocated=-300_000, gpu_hours=-100_000, **month), CLAIM),
        (_row(pod="p1", allocated=-600_000, gpu_hours=-200_000, **month), CLAIM),
        (
            _row(
                pod="",
                team=IDLE,
                namespace="",
                container="",
                allocated=0,
                idle=900_000,
                gpu_hours=300_000,
                **month,
            ),
            None,
        ),
    ]
    got = _csv(rows)
    assert [(r["BilledCost"], r["ChargeClass"], r["ListUnitPrice"]) for r in got] == [
        ("-0.300000", "Correction", ""),
        ("-0.600000", "Correction", ""),
        ("0.900000", "Correction", ""),
    ]
    assert violations(got) == []
    # without idle: -0.30 and -0.60 of -0.90: 333333.33 and 666666.67, the unit to .67
    got = _csv(rows[:2])
    assert [r["AllocatedMethodDetails"].split(",")[0] for r in got] == [
        '{"Elements":[{"AllocatedRatio":0.333333',
        '{"Elements":[{"AllocatedRatio":0.666667',
    ]
    assert violations(got) == []


def test_an_idle_line_is_its_free_and_its_lost_part() -> None:
    """1.25 idle of which 0.833333 lost: free 0.416667 (1/6 GPU-hour), lost 0.833333."""
    row = _row(
        team=IDLE,
        pod="",
        namespace="",
        allocated=0,
        idle=1_250_000,
        gpu_hours=500_000,
        unavailable=833_333,
        unavailable_gpu_hours=333_333,
        idle_energy_mj=7,
    )
    got = parts(row, None, Policies())
    assert [(p.method.id, p.row.idle, p.row.gpu_hours) for p in got] == [
        (IDLE_SEPARATE, 416_667, 166_667),
        (UNAVAILABLE, 833_333, 333_333),
    ]
    assert sum(p.row.idle_energy_mj for p in got) == 7
