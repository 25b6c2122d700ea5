"""FOCUS 1.2 rows (costsvc/reports/focus.py), checked by the FinOps Foundation's focus-validator.

The validator runs through scripts/focus-validator.sh, which sets up its own virtualenv
(.venv-focus, Python >= 3.12) on first use — a few minutes once — and reuses it after."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from costsvc.kit.csv_cells import csv_line, safe_cell
from costsvc.reports.focus import (
    COLUMNS,
    CUSTOM_COLUMNS,
    DATETIME_COLUMNS,
    FOCUS_COLUMNS,
    NUMERIC_COLUMNS,
    ChargeRow,
    focus_lines,
    focus_row,
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "focus-validator.sh"
VALIDATOR_TIMEOUT = 900  # the first run creates .venv-focus and installs the validator

H = datetime(2026, 11, 3, 5, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
DANGEROUS = ("=", "+", "-", "@", "\t", "\r")
HOSTILE_TEAM = '=HYPERLINK("x")'

# focus-validator reports each branch of an OR composite as a test of its own: a dataset with
# an InvoiceId fails "InvoiceId MUST be null when there is no invoice" while the composite
# (null without an invoice OR not null with one) passes. Such a failure does not count.
OR_BRANCHES = {"InvoiceId-C-004-C": "InvoiceId-C-003-C", "InvoiceId-C-005-C": "InvoiceId-C-003-C"}


def _row(**kw: Any) -> ChargeRow:
    base = ChargeRow(
        hour=H,
        billing_month="2026-11",
        cluster="prod",
        team="ml",
        project="llm",
        stage="prod",
        namespace="train",
        pod="trainer-0",
        node="node-a",
        gpu_model=H100,
        mig_profile="",
        correction=False,
        currency="USD",
        allocated=3_000_000,
        used=2_000_000,
        waste=1_000_000,
        idle=0,
        gpu_hours=1_000_000,
    )
    return replace(base, **kw)


ROWS = [
    _row(),  # a whole GPU for an hour
    # a MIG slice for a third of an hour: unit prices of 1/3
    _row(
        team="ml",
        stage="dev",
        namespace="nb",
        pod="nb-1",
        node="node-b",
        gpu_model=A100,
        mig_profile="1g.5gb",
        allocated=142_857,
        used=100_000,
        waste=42_857,
        gpu_hours=333_333,
    ),
    # the __idle__ line of a node and GPU model (idle_policy: separate): no pod, no GPU-hours
    _row(
        team="__idle__",
        project="__idle__",
        stage="__idle__",
        namespace="",
        pod="",
        allocated=0,
        used=0,
        waste=0,
        idle=21_000_000,
        gpu_hours=0,
    ),
    # an __idle__ line of a whole cluster (nothing allocated there): no node, no model
    _row(
        team="__idle__",
        project="__idle__",
        stage="__idle__",
        namespace="",
        pod="",
        node="",
        gpu_model="",
        allocated=0,
        used=0,
        waste=0,
        idle=7_500_000,
        gpu_hours=0,
    ),
    # a pod nobody owns
    _row(
        team="__unallocated__",
        project="__unallocated__",
        stage="__unallocated__",
        namespace="default",
        pod="stray",
        allocated=1_500_000,
        used=0,
        waste=1_500_000,
        gpu_hours=500_000,
    ),
    # a correction of an hour of the closed October, reported in November, negative
    _row(
        hour=datetime(2026, 10, 31, 23, tzinfo=UTC),
        correction=True,
        team=HOSTILE_TEAM,
        project="@SUM(1)",
        stage="+1",
        allocated=-1_234_567,
        used=-1_000_000,
        waste=-234_567,
        idle=-5,
        gpu_hours=-250_000,
    ),
    # hostile label values: quotes, commas, newlines, CR, tab, unicode, formulas
    _row(
        team='ops, "core"\nteam',
        project="équipe ünïcødé ✓ 数据",
        stage="-1",
        namespace="-ns",
        pod='=cmd|" /C calc"!A0',
        allocated=10,
        used=5,
        waste=5,
        gpu_hours=3,
    ),
    _row(
        team="\tteam",
        project="\rproj",
        stage="a\rb",
        pod="p,1",
        mig_profile="3g.20gb",
        allocated=428_571,
        used=0,
        waste=428_571,
        idle=1,
        gpu_hours=1_000_000,
    ),
    # December: the billing period ends in the next year; a weighted idle share on a pod line
    _row(
        hour=datetime(2026, 12, 31, 23, tzinfo=UTC),
        billing_month="2026-12",
        allocated=999_999_999_999,
        used=0,
        waste=999_999_999_999,
        idle=123_456_789,
        gpu_hours=7_000_001,
    ),
]


def _run_validator(csv_path: Path, junit: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(SCRIPT), str(csv_path), str(junit)],
        capture_output=True,
        text=True,
        timeout=VALIDATOR_TIMEOUT,
        check=False,
    )
    if proc.returncode == 1:
        why = f"scripts/focus-validator.sh failed:\n{proc.stdout}\n{proc.stderr}"
        if "needs Python >= 3.12" in proc.stderr and os.environ.get("CI", "").lower() != "true":
            pytest.skip(why)  # the one thing the script cannot install; under CI it fails
        pytest.fail(why)
    return proc


def _junit(path: Path) -> tuple[ET.Element, dict[str, str]]:
    """The JUnit root, and each rule's status: passed, failure, error or skipped."""
    root = ET.parse(path).getroot()
    status = {}
    for case in root.iter("testcase"):
        rule = case.get("name", "").split(" :: ")[0]
        kinds = [k for k in ("failure", "error", "skipped") if case.find(k) is not None]
        status[rule] = kinds[0] if kinds else "passed"
    return root, status


def _read(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


@pytest.fixture(scope="module")
def focus_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("focus") / "focus.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        f.writelines(focus_lines(ROWS))
    return path


@pytest.fixture(scope="module")
def cells(focus_csv: Path) -> list[dict[str, str]]:
    header, *rows = _read(focus_csv)
    assert tuple(header) == COLUMNS
    return [dict(zip(header, r, strict=True)) for r in rows]


# --- the validator ----------------------------------------------------------------------------


@pytest.mark.timeout(VALIDATOR_TIMEOUT + 60)
def test_focus_validator_passes(focus_csv: Path, tmp_path: Path) -> None:
    junit = tmp_path / "focus.xml"
    proc = _run_validator(focus_csv, junit)
    root, status = _junit(junit)
    report = f"{proc.stdout}\n{proc.stderr}"
    assert root.get("errors") == "0", report
    failed = {r for r, s in status.items() if s in ("failure", "error")}
    for rule in failed:
        assert rule in OR_BRANCHES, f"{rule} failed:\n{report}"
        assert status[OR_BRANCHES[rule]] == "passed", f"{OR_BRANCHES[rule]}:\n{report}"
    assert int(root.get("failures", "-1")) == len(failed), report
    assert int(root.get("tests", "0")) > 50, report
    passed = [r for r, s in status.items() if s == "passed"]
    assert len(passed) > 50, report
    # the rules that matter most ran, and passed
    for rule in (
        "BilledCost-C-003-M",
        "ChargePeriodStart-C-002-M",
        "ServiceSubcategory-C-004-M",
        "ListUnitPrice-C-010-C",
        "ContractedUnitPrice-C-011-C",
        "Tags-C-001-M",
        "SkuPriceDetails-C-001-M",
        "ChargeClass-C-005-C",
        "ConsumedUnit-C-003-O",
        "PricingUnit-C-003-O",
        "BillingCurrency-C-006-M",
    ):
        assert status.get(rule) == "passed", f"{rule}: {status.get(rule)}\n{report}"
    assert proc.returncode == 0, report


@pytest.mark.timeout(VALIDATOR_TIMEOUT + 60)
def test_focus_validator_sees_failures(focus_csv: Path, tmp_path: Path) -> None:
    """A deliberately broken file: the JUnit output shows the failure, the script exits 2."""
    header, *rows = _read(focus_csv)
    rows[1][header.index("BilledCost")] = ""  # BilledCost MUST NOT be null
    broken = tmp_path / "broken.csv"
    with broken.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows([header, *rows])
    junit = tmp_path / "broken.xml"
    proc = _run_validator(broken, junit)
    root, status = _junit(junit)
    report = f"{proc.stdout}\n{proc.stderr}"
    assert status["BilledCost-C-003-M"] == "failure", report
    assert status["BilledCost-C-000-M"] == "failure", report
    assert int(root.get("failures", "0")) >= 2, report
    assert proc.returncode == 2, report


# --- the file itself ----------------------------------------------------------------------------


def test_columns_focus_first_then_custom() -> None:
    assert COLUMNS == FOCUS_COLUMNS + CUSTOM_COLUMNS
    assert len(set(COLUMNS)) == len(COLUMNS)
    last_focus = max(COLUMNS.index(c) for c in FOCUS_COLUMNS)
    first_custom = min(COLUMNS.index(c) for c in COLUMNS if c.startswith("x_"))
    assert last_focus < first_custom
    assert all(c.startswith("x_") for c in CUSTOM_COLUMNS)
    assert not any(c.startswith("x_") for c in FOCUS_COLUMNS)
    wanted = "Cluster Namespace Pod Node GpuModel MigProfile Team Project Stage UsedCost WasteCost"
    assert {f"x_{w}" for w in [*wanted.split(), "IdleCost"]} <= set(CUSTOM_COLUMNS)


def test_dates(cells: list[dict[str, str]]) -> None:
    for row in cells:
        for c in DATETIME_COLUMNS:
            assert DATE.match(row[c]), (c, row[c])
    first = cells[0]
    assert (first["ChargePeriodStart"], first["ChargePeriodEnd"]) == (
        "2026-11-03T05:00:00Z",
        "2026-11-03T06:00:00Z",
    )
    assert (first["BillingPeriodStart"], first["BillingPeriodEnd"]) == (
        "2026-11-01T00:00:00Z",
        "2026-12-01T00:00:00Z",
    )
    december = cells[-1]
    assert december["ChargePeriodEnd"] == "2027-01-01T00:00:00Z"
    assert december["BillingPeriodEnd"] == "2027-01-01T00:00:00Z"
    correction = cells[5]  # an October hour, billed in November
    assert correction["ChargePeriodStart"] == "2026-10-31T23:00:00Z"
    assert correction["BillingPeriodStart"] == "2026-11-01T00:00:00Z"


def test_tags_are_the_labels(cells: list[dict[str, str]]) -> None:
    for source, row in zip(ROWS, cells, strict=True):
        tags = json.loads(row["Tags"])
        assert tags == {"team": source.team, "project": source.project, "stage": source.stage}
        if row["SkuPriceDetails"]:
            assert isinstance(json.loads(row["SkuPriceDetails"]), dict)


def test_python_csv_and_pandas_read_the_same_cells(focus_csv: Path) -> None:
    by_csv = _read(focus_csv)
    frame = pd.read_csv(focus_csv, dtype=str, keep_default_na=False, encoding="utf-8")
    assert list(frame.columns) == by_csv[0]
    assert frame.to_numpy().tolist() == by_csv[1:]
    assert len(by_csv) == len(ROWS) + 1


def test_hostile_values_are_neutralised(cells: list[dict[str, str]]) -> None:
    for row in cells:
        for c, v in row.items():
            if c not in NUMERIC_COLUMNS:
                assert not v.startswith(DANGEROUS), (c, v)
    correction, hostile, tabbed = cells[5], cells[6], cells[7]
    assert correction["x_Team"] == "'" + HOSTILE_TEAM
    assert correction["x_Project"] == "'@SUM(1)"
    assert correction["x_Stage"] == "'+1"
    assert hostile["x_Stage"] == "'-1"
    assert hostile["x_Namespace"] == "'-ns"
    assert hostile["x_Pod"] == hostile["ResourceName"] == '\'=cmd|" /C calc"!A0'
    assert hostile["x_Team"] == 'ops, "core"\nteam'  # kept as it is, quoted in the file
    assert hostile["x_Project"] == "équipe ünïcødé ✓ 数据"
    assert (tabbed["x_Team"], tabbed["x_Project"], tabbed["x_Stage"]) == (
        "'\tteam",
        "'\rproj",
        "a\rb",
    )
    # inside the JSON the labels are untouched: the cell starts with "{"
    assert json.loads(correction["Tags"])["team"] == HOSTILE_TEAM


def test_negative_correction_stays_numeric(cells: list[dict[str, str]]) -> None:
    c = cells[5]
    assert c["ChargeClass"] == "Correction"
    for col in ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost"):
        assert c[col] == "-1.234572"
    assert c["x_AllocatedCost"] == "-1.234567"
    assert c["x_UsedCost"] == "-1.000000"
    assert c["x_WasteCost"] == "-0.234567"
    assert c["x_IdleCost"] == "-0.000005"
    assert c["ConsumedQuantity"] == c["PricingQuantity"] == "-0.250000"
    assert c["ListUnitPrice"] == c["ContractedUnitPrice"] == ""  # null: allowed on corrections
    for col in NUMERIC_COLUMNS:
        if c[col]:
            Decimal(c[col])  # a plain number, no quote in front
    assert all(r["ChargeClass"] == "" for i, r in enumerate(cells) if i != 5)


def test_money_and_unit_prices_are_exact(cells: list[dict[str, str]]) -> None:
    for source, row in zip(ROWS, cells, strict=True):
        cost = Decimal(source.allocated + source.idle).scaleb(-6)
        assert Decimal(row["BilledCost"]) == cost
        assert row["BilledCost"] == row["EffectiveCost"] == row["ListCost"]
        assert row["ListCost"] == row["ContractedCost"] == row["PricingCurrencyEffectiveCost"]
        assert re.fullmatch(r"-?\d+\.\d{6}", row["BilledCost"])
        assert Decimal(row["ConsumedQuantity"]) == Decimal(source.gpu_hours).scaleb(-6)
        if source.correction:
            continue
        price, qty = Decimal(row["ListUnitPrice"]), Decimal(row["PricingQuantity"])
        assert price >= 0
        assert abs(price * qty - cost) <= Decimal("1e-12") * max(qty, Decimal(1))
        assert row["ListUnitPrice"] == row["ContractedUnitPrice"]
    big = cells[-1]
    assert big["BilledCost"] == "1000123.456788"  # 999 999.999 999 + 123.456 789, no float
    assert big["x_AllocatedCost"] == "999999.999999"


def test_pod_mig_and_idle_lines(cells: list[dict[str, str]]) -> None:
    whole, mig, idle, cluster_idle, unallocated = cells[:5]
    assert whole["ResourceId"] == "prod/train/trainer-0"
    assert (whole["ResourceName"], whole["ResourceType"]) == ("trainer-0", "Kubernetes Pod")
    assert (whole["PricingUnit"], whole["ConsumedUnit"]) == ("GPU-Hours", "GPU-Hours")
    assert whole["ListUnitPrice"] == "3.000000"
    assert whole["SkuId"] == whole["SkuPriceId"] == f"gpu/{H100}"
    assert (whole["ServiceCategory"], whole["ServiceSubcategory"]) == ("Compute", "Containers")
    assert (whole["SubAccountId"], whole["SubAccountName"]) == ("prod", "prod")
    assert whole["ChargeCategory"] == "Usage"
    assert whole["ChargeFrequency"] == "Usage-Based"

    assert mig["SkuId"] == f"gpu/{A100}/mig/1g.5gb"
    assert json.loads(mig["SkuPriceDetails"]) == {"x_GpuModel": A100, "x_MigProfile": "1g.5gb"}
    assert mig["ListUnitPrice"] == "0.428571428571"  # 0.142857 / 0.333333

    assert idle["ResourceId"] == f"prod/nodes/node-a/{H100}"
    assert idle["ResourceType"] == "GPU"
    assert idle["x_Pod"] == idle["x_Namespace"] == ""
    assert (idle["PricingQuantity"], idle["PricingUnit"]) == ("1.000000", "Hours")
    assert idle["ListUnitPrice"] == idle["BilledCost"] == "21.000000"
    assert idle["ConsumedQuantity"] == "0.000000"
    assert idle["SkuId"] == f"gpu-idle/{H100}"

    assert (cluster_idle["ResourceId"], cluster_idle["ResourceType"]) == (
        "prod",
        "Kubernetes Cluster",
    )
    assert cluster_idle["SkuId"] == "gpu-idle"
    assert json.loads(unallocated["Tags"])["team"] == "__unallocated__"
    assert unallocated["ResourceId"] == "prod/default/stray"


def test_safe_cell() -> None:
    for bad in ("=1+1", "+1", "-1", "@SUM(1)", "\tx", "\rx"):
        assert safe_cell(bad) == "'" + bad
    for ok in ("", "team", "'quoted", " =1", "1-1", "é"):
        assert safe_cell(ok) == ok


def test_focus_row_arguments_and_naive_hours() -> None:
    row = focus_row(_row(hour=H.replace(tzinfo=None)), provider="acme", account="acct-1")
    cells = dict(zip(COLUMNS, row, strict=True))
    assert cells["ChargePeriodStart"] == "2026-11-03T05:00:00Z"
    assert cells["ProviderName"] == cells["PublisherName"] == cells["InvoiceIssuerName"] == "acme"
    assert cells["BillingAccountId"] == cells["BillingAccountName"] == "acct-1"
    assert cells["InvoiceId"] == "acct-1/2026-11"
    # another zone is converted to UTC
    other = focus_row(_row(hour=H.astimezone(timezone(timedelta(hours=2)))))
    assert dict(zip(COLUMNS, other, strict=True))["ChargePeriodStart"] == "2026-11-03T05:00:00Z"
    with pytest.raises(ValueError, match="YYYY-MM"):
        focus_row(_row(billing_month="2026-13"))


def test_csv_line_quotes_cr_and_lf() -> None:
    line = csv_line(["a", "x\ry", "p\nq", 'say "hi"', "1,2", "-1.5"])
    assert line == 'a,"x\ry","p\nq","say ""hi""","1,2",-1.5\n'
    assert list(csv.reader(io.StringIO(line, newline=""))) == [
        ["a", "x\ry", "p\nq", 'say "hi"', "1,2", "-1.5"]
    ]


def test_idle_line_with_gpu_hours_is_priced_per_gpu_hour() -> None:
    # 0.5 idle GPU-hours of a 2.80/h GPU cost 1.40: unit price 2.80 per GPU-hour
    idle = _row(
        team="__idle__",
        project="__idle__",
        stage="__idle__",
        namespace="",
        pod="",
        allocated=0,
        used=0,
        waste=0,
        idle=1_400_000,
        gpu_hours=500_000,
    )
    cells = dict(zip(COLUMNS, focus_row(idle), strict=True))
    assert (cells["PricingQuantity"], cells["PricingUnit"]) == ("0.500000", "GPU-Hours")
    assert cells["ConsumedQuantity"] == "0.500000"
    assert cells["ListUnitPrice"] == "2.800000"
    assert cells["BilledCost"] == "1.400000"
