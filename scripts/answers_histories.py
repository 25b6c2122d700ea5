"""The histories scripts/answers_dump.py serves and asks (its docstring): a real prometheus
holding a test history, a fresh database per history (SQLite or a throwaway PostgreSQL
cluster), the ``ingested`` and ``seeded`` histories built into them, the wall-clock times
written while building set to :data:`FIXED`, and the harness's API tokens."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text, update

from costsvc.auth.tokens import create_token
from costsvc.budgets.repository import BudgetValues, create_budget
from costsvc.db import models
from costsvc.db.cost_models import activate
from costsvc.months.close import close_month
from tests.costsvc import history as hist
from tests.costsvc import inference_history as inf
from tests.costsvc import pages_history as pages
from tests.costsvc.allocation_checks import label_history, owner_history
from tests.costsvc.scraped import as_scraped
from tests.prom import Prometheus

FIXED = datetime(2026, 11, 1, tzinfo=UTC)  # every wall-clock time written while building
NOV20 = datetime(2026, 11, 20, 12, tzinfo=UTC)  # "now" of the ingested history's server
INGESTED_HOURS = [
    hist.HOUR,
    hist.HOUR2,
    hist.HOUR3,
    hist.ELEVENTH,
    hist.FIFTEENTH,
    hist.FIFTEENTH + timedelta(hours=1),
]
INFERENCE_HOURS = [inf.I1, inf.I2]


@contextlib.contextmanager
def prometheus(work: Path, om: str, probe: int) -> Iterator[Prometheus]:
    """A real prometheus holding ``om`` (put in the scraped form), as tests/costsvc/conftest.py
    loads its histories."""
    promtool, binary = shutil.which("promtool"), shutil.which("prometheus")
    if not promtool or not binary:
        raise SystemExit("prometheus and promtool must be on PATH (scripts/ensure-system-deps.sh)")
    work.mkdir(parents=True)
    (work / "history.om").write_text(as_scraped(om))
    om_file, data = str(work / "history.om"), str(work / "data")
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", om_file, data],
        check=True,
        capture_output=True,
        timeout=300,
    )
    prom = Prometheus(binary, work, [], extra_args=["--storage.tsdb.retention.time=100y"])
    try:
        prom.wait_ready()
        prom.until(lambda: prom.query(f"{{__name__=~'.+'}} @ {probe + 60}"), 60, "blocks loaded")
        yield prom
    finally:
        prom.stop()


@contextlib.contextmanager
def databases(kind: str, work: Path, names: list[str]) -> Iterator[dict[str, str]]:
    """A fresh, empty database per name: SQLite files, or databases in a throwaway PostgreSQL
    cluster (bench/pgcluster.py)."""
    if kind == "sqlite":
        yield {n: f"sqlite:///{work / f'{n}.db'}" for n in names}
        return
    from bench.pgcluster import start_postgres

    base = Path(tempfile.mkdtemp(prefix="pgd-"))  # short: the socket path must be < 108 bytes
    url, sock, stop = start_postgres(base)
    try:
        admin = create_engine(url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            for n in names:
                conn.execute(text(f'CREATE DATABASE "{n}"'))
        admin.dispose()
        yield {n: f"postgresql+psycopg://postgres@/{n}?host={sock}" for n in names}
    finally:
        subprocess.run(stop, check=False, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _dbmodel_document() -> dict[str, Any]:
    """The ingested history's model, kept in the database, its team label keys widened."""
    doc = hist.MODEL.document()
    doc["labels"] = {**doc.get("labels", {}), "team": ["team", "squad"]}
    return doc


def build_ingested(url: str, prom: str, inference_prom: str) -> None:
    from costsvc.rules.cost_model import parse

    owner_history(url)
    hist.ingest_with(prom, url, hist.MODEL, INGESTED_HOURS)
    hist.ingest_with(inference_prom, url, inf.MODEL, INFERENCE_HOURS)
    label_history(url)
    engine = create_engine(url)
    try:
        for team, amount in (("a", 1), ("nlp", 5), ("chat", 100)):
            values = BudgetValues(team, "", amount * 1_000_000, "USD", [0.5, 0.8, 1.0])
            create_budget(engine, values, NOV20, "harness", {"team": team})
        activate(engine, parse(_dbmodel_document()), "harness", "cli")
    finally:
        engine.dispose()


def build_seeded(url: str) -> None:
    pages.seed(url)
    engine = create_engine(url)
    try:
        close_month(engine, "2026-10", "finance", pages.NOW)
    finally:
        engine.dispose()
    pages.reprice(url, datetime(2026, 10, 31, 22, tzinfo=UTC), "3.00")


def fix_clock_columns(url: str) -> None:
    """Every time the building wrote from the wall clock, set to :data:`FIXED`."""
    engine = create_engine(url)
    m = models
    columns: list[tuple[Any, list[str]]] = [
        (m.ApiToken, ["created_at"]),
        (m.IngestRun, ["started_at", "finished_at"]),
        (m.CostModelVersion, ["loaded_at", "activated_at"]),
        (m.Budget, ["created_at", "updated_at"]),
        (m.AuditEntry, ["at"]),
    ]
    try:
        with engine.begin() as conn:
            for table, names in columns:
                for name in names:
                    col = getattr(table, name)
                    conn.execute(update(table).where(col.is_not(None)).values({name: FIXED}))
    finally:
        engine.dispose()


def harness_tokens(url: str, teams: list[str]) -> dict[str, str]:
    engine = create_engine(url)
    try:
        tokens = {
            "admin": create_token(engine, "admin", "admin", None, "harness"),
            "finance": create_token(engine, "finance", "finance", None, "harness"),
            "metrics": create_token(engine, "prometheus", "metrics", None, "harness"),
        }
        for team in teams:
            tokens[team] = create_token(engine, f"team-{team}", "team", team, "harness")
    finally:
        engine.dispose()
    return tokens
