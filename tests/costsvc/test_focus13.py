"""FOCUS 1.3 split cost allocation (costsvc/reports/focus13.py) through a real Prometheus into
SQLite and PostgreSQL, every allocated charge's ratio and money by hand, on the fleets of
history.py (06:00 on 2026-11-10: GPU-M as MIG 3g.40gb + 2g.20gb + 1g.10gb + an unheld
1g.10gb; GPU-R, GPU-S whole), history_fractional.py (2026-11-16 10:00: a DRA claim alone and one
shared by three pods, HAMi 30 % + 50 %, HAMi over-subscribed) and history14.py (2026-11-13
10:00: whole GPUs half held, a MIG 3g.40gb held in turn, a time-sliced GPU, a GPU lost for 20
minutes). 2.50 per GPU-hour everywhere; the money of each line is the chargeback's (by hand in
those modules' docstrings); the ratio is the line's BilledCost over its origin's, in
micro-units by the largest-remainder rule."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from collections import defaultdict
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from sqlalchemy import create_engine

from costsvc.months.close import close_month
from costsvc.reports.focus import ChargeRow
from costsvc.reports.focus13 import owner_tags
from costsvc.reports.focus13_reads import focus13_csv
from costsvc.reports.monthly import focus_csv
from costsvc.reports.split import METHODS
from tests.costsvc.focus13_checks import sums, violations
from tests.costsvc.history import HOUR2, ingest_with, model
from tests.costsvc.history14 import SAMPLE_HOUR
from tests.costsvc.history_fractional import SIXTEENTH
from tests.prom import Prometheus

Row = dict[str, str]
# (node, pod or "" for idle / lost, method id) -> (AllocatedRatio, BilledCost)
Expected = dict[tuple[str, str, str], tuple[str, str]]

DEFAULT: Expected = {
    # GPU-M, compute basis: held 6 of 7 slices, round(2.5 x 6/7) = 2142857 split 3:2:1 by
    # largest remainder -> x 1071428, y 714286, x2 357143; idle 2500000 - 2142857 = 357143.
    # ratios of 2500000: x 428571.2, y 285714.4, x2 142857.2, idle 142857.2 (floors 999999):
    # the unit left goes to the largest remainder, y's .4
    ("node-M", "x", "mig-compute-slices"): ("0.428571", "1.071428"),
    ("node-M", "y", "mig-compute-slices"): ("0.285715", "0.714286"),
    ("node-M", "x2", "mig-compute-slices"): ("0.142857", "0.357143"),
    ("node-M", "", "idle-separate"): ("0.142857", "0.357143"),
    ("node-R", "r", "gpu-whole"): ("1.000000", "2.500000"),
    ("node-S", "z", "gpu-whole"): ("1.000000", "2.500000"),
    # GPU-DRA3: claim dra/trio over s0, s1, s2: 2500000 / 3 -> 833334, 833333, 833333;
    # ratios 333333.6 / .2 / .2 -> the unit left to s0
    ("node-DRA3", "s0", "dra-claim-share"): ("0.333334", "0.833334"),
    ("node-DRA3", "s1", "dra-claim-share"): ("0.333333", "0.833333"),
    ("node-DRA3", "s2", "dra-claim-share"): ("0.333333", "0.833333"),
    ("node-DRA1", "solo", "dra-claim-share"): ("1.000000", "2.500000"),
    # GPU-HAMI: 30 % -> 0.75 (0.3), 50 % -> 1.25 (0.5), idle 0.5 (0.2)
    ("node-HAMI", "h30", "hami-compute"): ("0.300000", "0.750000"),
    ("node-HAMI", "h50", "hami-compute"): ("0.500000", "1.250000"),
    ("node-HAMI", "", "idle-separate"): ("0.200000", "0.500000"),
    ("node-OVER", "o1", "hami-compute"): ("0.500000", "1.250000"),
    ("node-OVER", "o2", "hami-compute"): ("0.500000", "1.250000"),
    ("node-PART", "o3", "hami-compute"): ("0.550000", "1.375000"),  # 1.375 / 2.5
    ("node-PART", "o4", "hami-compute"): ("0.250000", "0.625000"),
    ("node-PART", "", "idle-separate"): ("0.200000", "0.500000"),
    # GPU-S1: leaver 10:00-10:30 -> 1.25 (0.5); the rest idle 1.25 (0.5)
    ("node-1", "leaver", "gpu-whole"): ("0.500000", "1.250000"),
    ("node-1", "", "idle-separate"): ("0.500000", "1.250000"),
    ("node-2", "first", "gpu-whole"): ("0.500000", "1.250000"),
    ("node-2", "second", "gpu-whole"): ("0.500000", "1.250000"),
    # GPU-S3 3g.40gb: early 535715, late 535714, idle 1428571; ratios 214286 / 214285.6 /
    # 571428.4 (floors 999999): the unit to late's .6
    ("node-3", "early", "mig-compute-slices"): ("0.214286", "0.535715"),
    ("node-3", "late", "mig-compute-slices"): ("0.214286", "0.535714"),
    ("node-3", "", "idle-separate"): ("0.571428", "1.428571"),
    # GPU-S4 time-sliced x 4: a, b a replica for half an hour -> 0.3125 each (0.125), idle
    # 1.875 (0.75)
    ("node-4", "a", "time-slice-equal"): ("0.125000", "0.312500"),
    ("node-4", "b", "time-slice-equal"): ("0.125000", "0.312500"),
    ("node-4", "", "idle-separate"): ("0.750000", "1.875000"),
    # GPU-S5 lost 10:20-10:40: p 1666667 (666666.8), lost 833333 (333333.2): the unit to p
    ("node-5", "p", "gpu-whole"): ("0.666667", "1.666667"),
    ("node-5", "", "gpu-unavailable"): ("0.333333", "0.833333"),
}
MEMORY: Expected = {
    # GPU-M, memory basis: 4, 2, 1 of 8 memory slices held, one unheld
    ("node-M", "x", "mig-memory-slices"): ("0.500000", "1.250000"),
    ("node-M", "y", "mig-memory-slices"): ("0.250000", "0.625000"),
    ("node-M", "x2", "mig-memory-slices"): ("0.125000", "0.312500"),
    ("node-M", "", "idle-separate"): ("0.125000", "0.312500"),
    # GPU-HAMI, memory basis: 4000 and 8000 of 20000 MiB -> 0.5 (0.2), 1.0 (0.4), idle 1.0
    ("node-HAMI", "h30", "hami-memory"): ("0.200000", "0.500000"),
    ("node-HAMI", "h50", "hami-memory"): ("0.400000", "1.000000"),
    ("node-HAMI", "", "idle-separate"): ("0.400000", "1.000000"),
}
USAGE_EVEN: Expected = {
    # 2026-11-13 10:00, shared_gpu_policy usage: GPU-S4's held replicas (0.625) by SM time,
    # a 360 SM-s, b 0 -> a 625000, b 0. idle_policy even: the free capacity of node-1, -3,
    # -4 (1250000 + 1428571 + 1875000 = 4553571) over the 7 teams with allocated cost (a,
    # early, first, late, leaver, p, second; b has none): 650510.14 each, the unit left to
    # the first team, a -> a 650511, the others 650510. GPU-S5's lost time stays idle.
    # node-4's origin: 625000 + 650511 + 0 = 1275511: a 489999.8 -> 490000 (the unit left),
    # a's idle 510000.2 -> 510000, b 0
    ("node-4", "a", "time-slice-usage"): ("0.490000", "0.625000"),
    ("node-4", "a", "idle-even"): ("0.510000", "0.650511"),
    ("node-4", "b", "time-slice-usage"): ("0.000000", "0.000000"),
    # node-1: 1250000 + 650510 = 1900510: 657717.7 -> 657718, 342282.3 -> 342282
    ("node-1", "leaver", "gpu-whole"): ("0.657718", "1.250000"),
    ("node-1", "leaver", "idle-even"): ("0.342282", "0.650510"),
    # node-5: 1666667 + 650510 + lost 833333 = 3150510: 529014.9 -> 529015, 206478.2,
    # 264507.0 (floors 999999: the unit to p's .9)
    ("node-5", "p", "gpu-whole"): ("0.529015", "1.666667"),
    ("node-5", "p", "idle-even"): ("0.206478", "0.650510"),
    ("node-5", "", "gpu-unavailable"): ("0.264507", "0.833333"),
}
MAX_WEIGHTED: Expected = {
    # 2026-11-16 10:00, max basis (= compute for these holdings), idle_policy weighted: the
    # free 1000000 (node-HAMI 0.5 + node-PART 0.5) over the allocated 11.5 (solo 2.5, s0..s2
    # 2.5, h30 0.75, h50 1.25, o1 1.25, o2 1.25, o3 1.375, o4 0.625): o1, o2, h50 each
    # 108695.65; floors add up to 999994, 6 units to the largest remainders: s0 and o4 (.83),
    # s1 and s2 (.74), then two of the three .65 ties, the earlier lines h50 and o1 ->
    # o1 108696, o2 108695.
    # node-OVER's origin: 1250000 + 108696 + 1250000 + 108695 = 2717391: 460000.04, 40000.03,
    # 460000.04, 39999.66 -> the unit left to o2's idle
    ("node-OVER", "o1", "hami-max"): ("0.460000", "1.250000"),
    ("node-OVER", "o1", "idle-weighted"): ("0.040000", "0.108696"),
    ("node-OVER", "o2", "hami-max"): ("0.460000", "1.250000"),
    ("node-OVER", "o2", "idle-weighted"): ("0.040000", "0.108695"),
}
POLICIES: dict[str, tuple[dict[str, str], Expected, list[datetime], list[datetime]]] = {
    # (policies, expected, hours of history.py's Prometheus, of history14.py's)
    "default": ({}, DEFAULT, [HOUR2, SIXTEENTH], [SAMPLE_HOUR]),
    "memory": (
        {"mig_share_basis": "memory", "fractional_share_basis": "memory"},
        MEMORY,
        [HOUR2, SIXTEENTH],
        [],
    ),
    "usage-even": (
        {"shared_gpu_policy": "usage", "idle_policy": "even"},
        USAGE_EVEN,
        [],
        [SAMPLE_HOUR],
    ),
    "max-weighted": (
        {"fractional_share_basis": "max", "idle_policy": "weighted"},
        MAX_WEIGHTED,
        [SIXTEENTH],
        [],
    ),
}


def _csv(pieces: object) -> list[Row]:
    return list(csv.DictReader(io.StringIO("".join(pieces))))  # type: ignore[arg-type]


def export(db_url: str, team: str | None = None) -> list[Row]:
    engine = create_engine(db_url)
    try:
        return _csv(focus13_csv(engine, "2026-11", team))
    finally:
        engine.dispose()


def _node(row: Row) -> str:
    return row["ResourceName"].split(" ", 1)[0]


def _ratio(row: Row) -> str:
    return row["AllocatedMethodDetails"].split('"AllocatedRatio":', 1)[1].split(",", 1)[0]


def _ingest(prometheus: Prometheus, prometheus14: Prometheus, db_url: str, name: str) -> None:
    policies, _, hours, hours14 = POLICIES[name]
    if hours:
        ingest_with(prometheus.url, db_url, model(**policies), hours)
    if hours14:
        ingest_with(prometheus14.url, db_url, model(**policies), hours14)


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_method_by_hand(
    prometheus: Prometheus, prometheus14: Prometheus, db_url: str, name: str
) -> None:
    _ingest(prometheus, prometheus14, db_url, name)
    rows = export(db_url)
    got = {
        (_node(r), r["x_Pod"], r["AllocatedMethodId"]): (_ratio(r), r["BilledCost"]) for r in rows
    }
    expected = POLICIES[name][1]
    assert {k: got.get(k) for k in expected} == expected
    if name == "default":  # every allocated charge of the fleet is in the table, once
        assert got == expected and len(rows) == len(expected)
    assert violations(rows) == []
    # each origin: its node's GPU-hours at 2.50 (with the idle spread onto its holders under
    # weighted / even); its allocated charges add up to it exactly, on every summable column
    for origin, total in sums(rows).items():
        members = [r for r in rows if r["x_OriginChargeId"] == origin]
        assert total["BilledCost"] == total["EffectiveCost"]
        assert total["ListCost"] == total["PricingQuantity"] * Decimal("2.5"), origin
        if POLICIES[name][0].get("idle_policy", "separate") == "separate":
            # whole GPU-hours: every GPU of these nodes is present all hour
            gpus = total["PricingQuantity"]
            assert gpus == int(gpus) > 0, origin
            assert total["BilledCost"] == gpus * Decimal("2.5"), origin
        assert {r["ListUnitPrice"] for r in members} == {"2.500000"}


def test_every_method_id_is_exercised() -> None:
    """The four policy sets above, between them, write every documented method id."""
    seen = {method for _, expected, _, _ in POLICIES.values() for _, _, method in expected}
    assert seen == set(METHODS)


def _lines(rows: list[Row], money: tuple[str, ...]) -> dict[tuple[str, ...], list[Decimal]]:
    key = ("ChargePeriodStart", "x_Cluster", "x_Namespace", "x_Pod", "x_Node", "x_MigProfile")
    key += ("x_Team",)
    out: dict[tuple[str, ...], list[Decimal]] = defaultdict(lambda: [Decimal(0)] * len(money))
    for r in rows:
        k = tuple(r[c] for c in key)
        out[k] = [a + Decimal(r[c]) for a, c in zip(out[k], money, strict=True)]
    return dict(out)


@pytest.mark.parametrize("name", ["default", "usage-even"])
def test_the_money_is_the_12_exports_line_by_line(
    prometheus: Prometheus, prometheus14: Prometheus, db_url: str, name: str
) -> None:
    _ingest(prometheus, prometheus14, db_url, name)
    rows13 = export(db_url)
    engine = create_engine(db_url)
    rows12 = _csv(focus_csv(engine, "2026-11"))
    engine.dispose()
    money = ("BilledCost", "EffectiveCost", "ConsumedQuantity", "x_AllocatedCost", "x_IdleCost")
    assert _lines(rows13, money) == _lines(rows12, money)
    # a line with idle spread onto it is two allocated charges (usage-even: all of them)
    assert len(rows13) == len(rows12) + (7 if name == "usage-even" else 0)


def test_a_team_sees_its_own_allocated_charges(
    prometheus: Prometheus, prometheus14: Prometheus, db_url: str
) -> None:
    """A team's file: its own allocated charges, their ratios still of the whole origin; no
    other holder's, no idle or lost charge."""
    _ingest(prometheus, prometheus14, db_url, "default")
    rows = export(db_url, team="h30")
    assert [(r["x_Pod"], _ratio(r), r["BilledCost"]) for r in rows] == [
        ("h30", "0.300000", "0.750000")
    ]
    assert export(db_url, team="nobody") == []


def test_the_cli_writes_the_same_file(
    prometheus: Prometheus, prometheus14: Prometheus, db_url: str
) -> None:
    """``gpu-costsvc report --format focus --focus-version 1.3``: the rows of the export."""
    _ingest(prometheus, prometheus14, db_url, "max-weighted")
    argv = ["report", "--month", "2026-11", "--format", "focus", "--focus-version", "1.3"]
    out = subprocess.run(
        [sys.executable, "-m", "costsvc.cli", *argv],
        env={**os.environ, "COSTSVC_DATABASE_URL": db_url},
        capture_output=True,
        check=True,
        text=True,
        timeout=60,
    )
    assert _csv([out.stdout]) == export(db_url)
    assert {r["AllocatedMethodId"] for r in export(db_url)} >= {"hami-max", "idle-weighted"}


def test_a_correction_in_a_later_month_is_split_the_same_way(
    prometheus: Prometheus, db_url: str
) -> None:
    """November closed, then 2026-11-16 10:00 repriced at 3.10 (was 2.50): the differences
    are December's corrections, split by the same origins and methods. Hand figures, 0.60 more
    per GPU-hour: HAMi 30 % +0.180000 (ratio 0.3), 50 % +0.300000 (0.5), idle +0.120000
    (0.2); the claim's three pods 3100000 / 3 -> 1033334, 1033333, 1033333, less 833334,
    833333, 833333: +0.200000 each, ratios 333333.33 -> the unit to the first."""
    ingest_with(prometheus.url, db_url, model(), [SIXTEENTH])
    engine = create_engine(db_url)
    close_month(engine, "2026-11", "test", datetime(2026, 12, 2, tzinfo=UTC), force=True)
    engine.dispose()
    ingest_with(prometheus.url, db_url, model("3.10"), [SIXTEENTH])
    engine = create_engine(db_url)
    rows = _csv(focus13_csv(engine, "2026-12"))
    engine.dispose()
    got = {
        (_node(r), r["x_Pod"], r["AllocatedMethodId"]): (_ratio(r), r["BilledCost"]) for r in rows
    }
    assert {k: v for k, v in got.items() if k[0] in ("node-HAMI", "node-DRA3")} == {
        ("node-HAMI", "h30", "hami-compute"): ("0.300000", "0.180000"),
        ("node-HAMI", "h50", "hami-compute"): ("0.500000", "0.300000"),
        ("node-HAMI", "", "idle-separate"): ("0.200000", "0.120000"),
        ("node-DRA3", "s0", "dra-claim-share"): ("0.333334", "0.200000"),
        ("node-DRA3", "s1", "dra-claim-share"): ("0.333333", "0.200000"),
        ("node-DRA3", "s2", "dra-claim-share"): ("0.333333", "0.200000"),
    }
    assert {r["ChargeClass"] for r in rows} == {"Correction"}
    assert {r["ListUnitPrice"] for r in rows} == {""}
    assert violations(rows) == []
    for total in sums(rows).values():  # 0.60 more for each GPU-hour of each node
        assert total["BilledCost"] == Decimal("0.6") and total["PricingQuantity"] == 0


def _owner_labels(row: Row) -> dict[str, str]:
    tags = json.loads(row["AllocatedTags"]) if row["AllocatedTags"] else {}
    return {k: v for k, v in tags.items() if k.startswith("gpu-finops/owner-label/")}


def test_allocated_tags_name_the_labels_that_decided_the_owner(
    prometheus: Prometheus, prometheus14: Prometheus, db_url: str
) -> None:
    """06:00 (history.py): x, x2, y, z carry their own ``team`` label, r its last one
    (``after``); no pod or namespace has ``project`` or ``stage`` (``__unallocated__``, no label
    decided: no tag); idle and lost charges have no AllocatedTags."""
    _ingest(prometheus, prometheus14, db_url, "default")
    rows = [r for r in export(db_url) if r["ChargePeriodStart"].startswith("2026-11-10T06")]
    found = {r["x_Pod"]: _owner_labels(r) for r in rows if r["x_Pod"]}
    assert found == {
        pod: {"gpu-finops/owner-label/pod:team": team}
        for pod, team in (("x", "x"), ("x2", "x"), ("y", "y"), ("z", "z"), ("r", "after"))
    }
    assert all(r["AllocatedTags"] == "" for r in rows if not r["x_Pod"])


def test_owner_label_tags_are_cut_and_escaped() -> None:
    """Label values are untrusted: a formula, a quote and a newline stay text in the JSON
    (the cell starts with ``{``), cut to 317 characters."""
    row = ChargeRow(
        cluster="c1",
        team='=HYPERLINK("x")\n' + "t" * 400,
        project="llm",
        stage="__unallocated__",
        namespace="ns",
        pod="p",
        owner_from="team=namespace:app.kubernetes.io/team;project=pod:project;stage=-;junk",
        hour=datetime(2026, 11, 10, 6, tzinfo=UTC),
        billing_month="2026-11",
        correction=False,
        currency="USD",
    )
    tags = owner_tags(row)
    assert tags == {
        "gpu-finops/owner-label/namespace:app.kubernetes.io/team": row.team[:317],
        "gpu-finops/owner-label/pod:project": "llm",
    }
    assert json.loads(json.dumps(tags)) == tags and len(tags[next(iter(tags))]) == 317
