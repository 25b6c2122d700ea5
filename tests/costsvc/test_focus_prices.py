"""FOCUS unit prices are the cost model's prices, exactly (costsvc/reports/focus.py): every line of
an hour priced at 2.20 — a 30-minute holding, replicas, a holding with a 20-minute gap, idle
capacity — reads ListUnitPrice = ContractedUnitPrice = 2.200000, never 2.200001200001; the
quantity stays the exact GPU-hours and ListCost = ContractedCost their product; BilledCost is
what was charged. Ingested from the real Prometheus of history.py into SQLite and PostgreSQL,
and the export passes the FinOps Foundation's focus-validator."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from costsvc.reports.monthly import focus_csv
from tests.costsvc.conftest import fresh_database
from tests.costsvc.history import HOUR, HOUR3, ingest_with, model
from tests.costsvc.test_focus import OR_BRANCHES, VALIDATOR_TIMEOUT
from tests.costsvc.test_focus import _junit as junit_status
from tests.costsvc.test_focus import _run_validator as run_validator
from tests.prom import Prometheus

PRICE = "2.20"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def focus(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, prometheus: Prometheus
) -> Iterator[str]:
    with fresh_database(request.param, request, tmp_path_factory.mktemp("focus")) as url:
        ingest_with(prometheus.url, url, model(PRICE), [HOUR, HOUR3])
        engine = create_engine(url)
        try:
            yield "".join(focus_csv(engine, "2026-11"))
        finally:
            engine.dispose()


def test_unit_prices_are_the_models_price_exactly(focus: str) -> None:
    rows = list(csv.DictReader(io.StringIO(focus)))
    assert len(rows) > 5
    for r in rows:
        assert r["ListUnitPrice"] == r["ContractedUnitPrice"] == "2.200000", r
        quantity = Decimal(r["PricingQuantity"])
        assert Decimal(r["ListCost"]) == Decimal(PRICE) * quantity
        assert Decimal(r["ContractedCost"]) == Decimal(r["ListCost"])
        # what was charged: the same but for the rounding of the charge and of the quantity
        # to micro-units (idle policy "separate": nothing spread onto the line)
        slack = Decimal("0.0000005") * (1 + Decimal(PRICE))
        assert abs(Decimal(r["BilledCost"]) - Decimal(r["ListCost"])) <= slack
    parts = {r["ListCost"] for r in rows} - {r["BilledCost"] for r in rows}
    assert parts, "some line's exact list cost is not its rounded charge"


@pytest.mark.timeout(VALIDATOR_TIMEOUT + 60)
def test_the_export_still_passes_the_validator(focus: str, tmp_path: Path) -> None:
    path = tmp_path / "focus.csv"
    path.write_text(focus)
    junit = tmp_path / "focus.xml"
    proc = run_validator(path, junit)
    root, status = junit_status(junit)
    report = f"{proc.stdout}\n{proc.stderr}"
    failed = {rule for rule, s in status.items() if s in ("failure", "error")}
    assert failed <= set(OR_BRANCHES), report
    assert all(status[OR_BRANCHES[rule]] == "passed" for rule in failed), report
    assert root.get("errors") == "0" and int(root.get("tests", "0")) > 50, report
