"""A price change from a date forward, and the same change back-dated into hours already
ingested: exactly the hours it covers are repriced, from the stored facts, to the same money a
fresh ingest gives (SQLite and PostgreSQL, real Prometheus)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from costsvc.db.models import Chargeback, CostModelVersion, IngestRun
from costsvc.ingest.reprice import reprice, stale_hours
from costsvc.rules.cost_model import CostModel, parse
from tests.costsvc.history import FIFTEENTH, H100, HOUR, HOUR2, HOUR3, MODEL, ingest_with, model
from tests.costsvc.history_checks import as_utc, assert_every_hour_adds_up, tables
from tests.procs import ROOT
from tests.prom import Prometheus

NOON = FIFTEENTH + timedelta(hours=1)  # 2026-11-15 12:00 UTC
OLD = {"effective_from": "2026-11-01T00:00:00Z", "prices": [{"model": H100, "hourly": "2.50"}]}
CHANGE = {"effective_from": "2026-11-15T12:00:00Z", "prices": [{"model": H100, "hourly": "2.20"}]}
CHANGED = parse({"versions": [OLD, CHANGE]})


def fin_by_hour(url: str) -> dict[Any, int]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            select(Chargeback.hour, Chargeback.allocated).where(Chargeback.team == "fin")
        ).all()
    engine.dispose()
    return {as_utc(h): a for h, a in rows}


def test_a_change_from_noon_on_the_15th_forward_and_back_dated(
    prometheus: Prometheus, db_url: str, tmp_path: Path
) -> None:
    reference = f"sqlite:///{tmp_path / 'forward.db'}"
    ingest_with(prometheus.url, reference, CHANGED, [FIFTEENTH, NOON])  # known in advance
    assert fin_by_hour(reference) == {FIFTEENTH: 2_500_000, NOON: 2_200_000}

    ingest_with(prometheus.url, db_url, MODEL, [FIFTEENTH, NOON])  # priced before the change
    assert fin_by_hour(db_url) == {FIFTEENTH: 2_500_000, NOON: 2_500_000}
    engine = create_engine(db_url)
    assert stale_hours(engine, MODEL) == []
    assert stale_hours(engine, CHANGED) == [NOON]  # exactly the hour the change covers
    assert reprice(engine, CHANGED, "c1", [NOON]).done == [NOON]
    assert stale_hours(engine, CHANGED) == []
    with engine.connect() as conn:
        kinds = conn.execute(
            select(IngestRun.kind, IngestRun.cost_model_id).order_by(IngestRun.id)
        ).all()
        documents = dict(conn.execute(select(CostModelVersion.id, CostModelVersion.sha256)).all())
    engine.dispose()
    assert [k for k, _ in kinds] == ["ingest", "ingest", "reprice"]
    assert documents[kinds[-1][1]] == CHANGED.sha256()  # each run names the model it used
    assert fin_by_hour(db_url) == {FIFTEENTH: 2_500_000, NOON: 2_200_000}
    assert tables(db_url) == tables(reference)  # the same rows as if it had been known
    assert_every_hour_adds_up(db_url)


@pytest.mark.parametrize(
    "new",
    [
        model("3.10"),
        model("0.333333", shared_gpu_policy="usage", idle_policy="weighted"),
        model("7.00", mig_share_basis="memory", idle_policy="even"),
    ],
)
def test_reprice_from_stored_facts_equals_a_fresh_ingest(
    prometheus: Prometheus, db_url: str, tmp_path: Path, new: CostModel
) -> None:
    hours = [HOUR, HOUR2, HOUR3]
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    ingest_with(prometheus.url, fresh, new, hours)
    ingest_with(prometheus.url, db_url, MODEL, hours)
    engine = create_engine(db_url)
    stale = stale_hours(engine, new)
    assert stale == hours
    assert reprice(engine, new, "c1", stale).done == hours
    engine.dispose()
    assert tables(db_url) == tables(fresh)
    assert_every_hour_adds_up(db_url)


def test_a_model_that_drops_a_price_fails_the_reprice_and_keeps_the_hour(
    prometheus: Prometheus, db_url: str
) -> None:
    ingest_with(prometheus.url, db_url, MODEL, [HOUR])
    before = tables(db_url)
    l4 = {"model": "NVIDIA L4", "hourly": "1"}
    no_h100 = parse({"versions": [{"effective_from": "2026-11-01T00:00:00Z", "prices": [l4]}]})
    engine = create_engine(db_url)
    assert stale_hours(engine, no_h100) == [HOUR]
    report = reprice(engine, no_h100, "c1", [HOUR])
    engine.dispose()
    assert report.done == [] and H100 in report.failed[HOUR]
    assert tables(db_url) == before  # nothing of the failed reprice was written


def test_cli_ingest_reprices_after_the_model_changes(
    prometheus: Prometheus, db_url: str, tmp_path: Path
) -> None:
    cost = tmp_path / "cost.yaml"
    env = {
        **os.environ,
        "COSTSVC_DATABASE_URL": db_url,
        "COSTSVC_CLUSTER": "c1",
        "COSTSVC_PROMETHEUS_URL": prometheus.url,
        "COSTSVC_COST_MODEL": str(cost),
    }
    span = ["--start", "2026-11-15T11:00:00Z", "--end", "2026-11-15T13:00:00Z"]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "costsvc.cli", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    cost.write_text(
        f'versions:\n  - {{effective_from: "2026-11-01T00:00:00Z", prices: '
        f'[{{model: "{H100}", hourly: "2.50"}}]}}\n'
    )
    assert cli("db", "upgrade").returncode == 0
    first = cli("ingest", *span)
    assert first.returncode == 0, first.stderr
    assert "repriced" not in first.stdout
    change = f'  - {{effective_from: "2026-11-15T12:00:00Z", prices: [{{model: "{H100}", '
    cost.write_text(cost.read_text() + change + 'hourly: "2.20"}]}\n')
    again = cli("ingest", "--start", "2026-11-15T13:00:00Z", "--end", "2026-11-15T13:00:00Z")
    assert again.returncode == 0, again.stderr
    assert "repriced 1 hour(s)" in again.stdout and "ingested 0 hour(s)" in again.stdout
    assert fin_by_hour(db_url) == {FIFTEENTH: 2_500_000, NOON: 2_200_000}
