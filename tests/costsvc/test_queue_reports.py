"""The borrowing policy's money in the month's reports (costsvc/reports/queue_lines.py): the
chargeback CSV, FOCUS 1.2 and FOCUS 1.3, through a real Prometheus on SQLite and PostgreSQL
(the 8/4/4 cohort and the MIG cohort of queue_history.py, hand-computed figures there)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from costsvc.ingest.reprice import reprice, stale_hours
from costsvc.kit.csv_cells import CsvLines
from costsvc.months.close import close_month
from costsvc.queues.queries import queue_totals
from costsvc.reports.focus import COLUMNS, focus_lines
from costsvc.reports.focus13_reads import focus13_csv
from costsvc.reports.monthly import chargeback_csv, csv_columns, focus_csv, sha256_of
from costsvc.reports.queue_lines import CHARGE, CREDIT, QueueLine, csv_row, focus_row
from tests.costsvc import queue_history
from tests.costsvc.apiserver import Api, Clock, serve
from tests.costsvc.conftest import fresh_database, prometheus_over
from tests.costsvc.focus13_checks import violations
from tests.costsvc.history import ingest_with
from tests.costsvc.inference_history import _History
from tests.costsvc.queue_history import CREDIT as CREDIT_LENDERS
from tests.costsvc.queue_history import H100, HOURS, MODEL, NONE, T, model
from tests.costsvc.scraped import as_scraped
from tests.costsvc.test_focus import OR_BRANCHES, ROWS, VALIDATOR_TIMEOUT, _junit, _run_validator
from tests.prom import Prometheus

MONTH = "2026-11"
FLEET = Decimal("22.500000")  # 3 GPUs x 2.50 x 3 hours
# the queue lines of the month, in order (hour, cluster, cohort, ClusterQueue), by hand from
# queue_history.py: (start, team, workload, total_cost)
# - every hour, cohort mig: cq-d borrows 3 1g.10gb of cq-e: 3 x 2.50 / 7 x 1.2 = 1.2857142…
#   -> 1.285714 charged to delta, credited to eps
# - 10:00 research: cq-b (beta) borrows 3 GPUs of cq-c (gamma): 3 x 2.50 x 1.2 = 9.000000
# - 11:00 research: cq-b (beta2) borrows 3: 9.000000, credited 1:2 -> alpha 3.000000,
#   gamma 6.000000
MIG = [
    ("delta", "kueue:borrowing-charge/mig/cq-d/h100-mig", "1.285714"),
    ("eps", "kueue:lending-credit/mig/cq-e/h100-mig", "-1.285714"),
]
LINES = [
    *((f"2026-11-18T{h}:00:00Z", *m) for h in ("10", "11", "12") for m in MIG),
    ("2026-11-18T10:00:00Z", "beta", "kueue:borrowing-charge/research/cq-b/h100", "9.000000"),
    ("2026-11-18T10:00:00Z", "gamma", "kueue:lending-credit/research/cq-c/h100", "-9.000000"),
    ("2026-11-18T11:00:00Z", "alpha", "kueue:lending-credit/research/cq-a/h100", "-3.000000"),
    ("2026-11-18T11:00:00Z", "beta2", "kueue:borrowing-charge/research/cq-b/h100", "9.000000"),
    ("2026-11-18T11:00:00Z", "gamma", "kueue:lending-credit/research/cq-c/h100", "-6.000000"),
]
LINES.sort(key=lambda x: (x[0], "research" in x[2], x[2].split("/")[2]))


queue_prom, db = queue_history.queue_prom, queue_history.db  # the fleet, each database


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _queue_lines(rows: list[dict[str, str]]) -> list[tuple[str, str, str, str]]:
    return [
        (r["charge_period_start"], r["team"], r["workload"], r["total_cost"])
        for r in rows
        if r["workload"].startswith("kueue:")
    ]


def _check_focus13(text: str) -> list[dict[str, str]]:
    rows = _rows(text)
    assert violations(rows) == []
    return rows


def test_credit_lenders_lines_in_csv_and_focus(queue_prom: Prometheus, db: str) -> None:
    ingest_with(queue_prom.url, db, MODEL, HOURS)
    engine = create_engine(db)
    try:
        rows = _rows("".join(chargeback_csv(engine, MONTH)))
        f12 = _rows("".join(focus_csv(engine, MONTH)))
        f13 = _check_focus13("".join(focus13_csv(engine, MONTH)))
    finally:
        engine.dispose()
    assert _queue_lines(rows) == LINES
    # each hour: the GPUs' 7.500000, the charges and credits cancel
    for hour in ("10", "11", "12"):
        start = f"2026-11-18T{hour}:00:00Z"
        assert sum(Decimal(r["total_cost"]) for r in rows if r["charge_period_start"] == start) == (
            Decimal("7.500000")
        )
    assert sum(Decimal(r["total_cost"]) for r in rows) == FLEET
    for focus in (f12, f13):
        assert sum(Decimal(r["BilledCost"]) for r in focus) == FLEET
        queue = [r for r in focus if r["ChargeCategory"] == "Adjustment"]
        assert [(r["ChargePeriodStart"], r["x_Team"], r["BilledCost"]) for r in queue] == [
            (start, team, cost) for start, team, _, cost in LINES
        ]
        beta = queue[2]  # 10:00, cq-b: 3 GPU-hours borrowed from the cohort research
        assert beta["ChargeDescription"] == (
            "Kueue Borrowing charge: ClusterQueue cq-b, flavor h100, nvidia.com/gpu borrowed "
            "from cohort research"
        )
        assert (beta["PricingQuantity"], beta["PricingUnit"]) == ("3.000000", "GPU-Hours")
        assert (beta["ConsumedQuantity"], beta["ListUnitPrice"]) == ("", "")
        mig = queue[0]  # 3 1g.10gb instance-hours
        assert (mig["PricingQuantity"], mig["PricingUnit"], mig["x_MigProfile"]) == (
            "3.000000",
            "Hours",
            "1g.10gb",
        )
    assert {r["AllocatedMethodId"] for r in f13 if r["ChargeCategory"] == "Adjustment"} == {""}


def test_policy_none_has_no_queue_lines(queue_prom: Prometheus, db: str) -> None:
    ingest_with(queue_prom.url, db, NONE, HOURS)
    engine = create_engine(db)
    try:
        rows = _rows("".join(chargeback_csv(engine, MONTH)))
        f12 = _rows("".join(focus_csv(engine, MONTH)))
        f13 = _check_focus13("".join(focus13_csv(engine, MONTH)))
    finally:
        engine.dispose()
    assert _queue_lines(rows) == []
    assert sum(Decimal(r["total_cost"]) for r in rows) == FLEET
    for focus in (f12, f13):
        assert {r["ChargeCategory"] for r in focus} == {"Usage"}
        assert sum(Decimal(r["BilledCost"]) for r in focus) == FLEET


def test_the_close_digest_covers_the_queue_lines(queue_prom: Prometheus, db: str) -> None:
    ingest_with(queue_prom.url, db, MODEL, HOURS)
    engine = create_engine(db)
    try:
        text = "".join(chargeback_csv(engine, MONTH))
        focus = "".join(focus_csv(engine, MONTH))
        closed = close_month(engine, MONTH, "finance", datetime(2026, 12, 2, tzinfo=UTC), True)
    finally:
        engine.dispose()
    assert closed.csv_sha256 == sha256_of(iter([text]))
    assert closed.focus_sha256 == sha256_of(iter([focus]))
    without = "".join(line for line in text.splitlines(True) if "kueue:" not in line)
    assert without != text and closed.csv_sha256 != sha256_of(iter([without]))


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, queue_prom: Prometheus
) -> Iterator[Api]:
    with fresh_database(request.param, request, tmp_path_factory.mktemp("qrep")) as url:
        ingest_with(queue_prom.url, url, MODEL, HOURS)
        with serve(url, Clock(datetime(2026, 11, 21, tzinfo=UTC)), ["gamma"]) as running:
            yield running


def test_a_team_sees_its_own_queue_lines_only(api: Api) -> None:
    r = api.get("/v1/reports/chargeback.csv", "team:gamma", month=MONTH)
    assert r.status_code == 200
    rows = _rows(r.text)
    assert {x["team"] for x in rows} == {"gamma"}  # gamma holds no GPU: its credits only
    assert _queue_lines(rows) == [x for x in LINES if x[1] == "gamma"]
    for version in ("1.2", "1.3"):
        focus = _rows(
            api.get("/v1/reports/focus.csv", "team:gamma", month=MONTH, version=version).text
        )
        # credited 9.000000 at 10:00 and 6.000000 at 11:00
        assert [(x["x_Team"], x["BilledCost"]) for x in focus] == [
            ("gamma", "-9.000000"),
            ("gamma", "-6.000000"),
        ]
    everyone = _rows(api.get("/v1/reports/chargeback.csv", month=MONTH).text)
    assert _queue_lines(everyone) == LINES


def test_queue_names_are_spreadsheet_safe() -> None:
    hostile = '=HYPERLINK("http://x")'
    line = QueueLine(
        datetime(2026, 11, 18, 10, tzinfo=UTC),
        MONTH,
        "@c1",
        "+co",
        hostile,
        "-fl",
        "nvidia.com/gpu",
        hostile,
        "USD",
        CHARGE,
        -1_000_000,
        3600,
    )
    cells = dict(zip(csv_columns(None), csv_row(line, csv_columns(None)), strict=True))
    assert (cells["cluster"], cells["team"]) == ("'@c1", "'" + hostile)
    assert cells["workload"].startswith("kueue:")
    assert cells["total_cost"] == "-1.000000"  # a number stays a number
    focus = dict(zip(COLUMNS, focus_row(line), strict=True))
    assert (focus["ResourceName"], focus["x_Team"], focus["SubAccountId"]) == (
        "'" + hostile,
        "'" + hostile,
        "'@c1",
    )
    assert focus["BilledCost"] == "-1.000000"


def _line(kind: str, team: str, resource: str, amount: int, seconds: int) -> QueueLine:
    hour = datetime(2026, 11, 3, 5, tzinfo=UTC)
    queue = f"cq-{team}"
    return QueueLine(
        hour, MONTH, "prod", "research", queue, "h100", resource, team, "USD", kind, amount, seconds
    )


@pytest.mark.timeout(VALIDATOR_TIMEOUT + 60)
def test_focus_validator_passes_with_queue_lines(tmp_path: Path) -> None:
    """The 1.2 file of test_focus.py with a charge and a credit of a GPU and a MIG flavor: the
    FinOps Foundation's validator finds no failure (OR branches as test_focus.py counts them)."""
    mig = "nvidia.com/mig-1g.10gb"
    extra = [
        _line(CHARGE, "beta", "nvidia.com/gpu", 9_000_000, 3 * 3600),
        _line(CREDIT, "gamma", "nvidia.com/gpu", -9_000_000, 3 * 3600),
        _line(CHARGE, "delta", mig, 1_285_714, 3 * 3600),
        _line(CREDIT, "eps", mig, -1_285_714, 3 * 3600),
    ]
    path = tmp_path / "focus.csv"
    out = CsvLines()
    out.rows([focus_row(x) for x in extra])
    path.write_text("".join(focus_lines(ROWS)) + out.take(), encoding="utf-8")
    junit = tmp_path / "focus.xml"
    proc = _run_validator(path, junit)
    _, status = _junit(junit)
    report = f"{proc.stdout}\n{proc.stderr}"
    failed = {r for r, s in status.items() if s in ("failure", "error")}
    for rule in failed:
        assert rule in OR_BRANCHES, f"{rule} failed:\n{report}"
        assert status[OR_BRANCHES[rule]] == "passed", f"{OR_BRANCHES[rule]}:\n{report}"
    for rule in ("ChargeCategory-C-003-M", "ConsumedQuantity-C-004-C", "BilledCost-C-003-M"):
        assert status.get(rule) == "passed", f"{rule}: {status.get(rule)}\n{report}"
    assert proc.returncode == 0, report


def test_a_closed_month_gets_queue_corrections(queue_prom: Prometheus, db: str) -> None:
    """credit_lenders back-dated over a month closed under none: the closed month's files keep
    their SHA-256; the difference (new - billed: the charges and credits of LINES, billed 0)
    lands in December as correction lines; /v1/queues counts each hour once."""
    ingest_with(queue_prom.url, db, NONE, HOURS)
    later = model(CREDIT_LENDERS)  # credit_lenders from 10:00, given after the close
    engine = create_engine(db)
    try:
        closed = close_month(engine, MONTH, "finance", datetime(2026, 12, 2, tzinfo=UTC), True)
        assert stale_hours(engine, later) == HOURS  # every hour was billed under none
        assert reprice(engine, later, "c1", HOURS).done == HOURS
        assert stale_hours(engine, later) == []  # the corrections carry the terms now in force
        assert reprice(engine, later, "c1", HOURS).done == HOURS  # again: nothing more to bill
        text = "".join(chargeback_csv(engine, MONTH))
        focus = "".join(focus_csv(engine, MONTH))
        dec = _rows("".join(chargeback_csv(engine, "2026-12")))
        f12 = _rows("".join(focus_csv(engine, "2026-12")))
        f13 = _check_focus13("".join(focus13_csv(engine, "2026-12")))
        with engine.connect() as conn:
            totals = queue_totals(conn, HOURS[0], HOURS[-1] + timedelta(hours=1), ["cohort"], {})
        assert reprice(engine, NONE, "c1", HOURS).done == HOURS  # back to none: all taken back
        undone = _rows("".join(chargeback_csv(engine, "2026-12")))
    finally:
        engine.dispose()
    assert _queue_lines(_rows(text)) == []
    assert sha256_of(iter([text])) == closed.csv_sha256
    assert sha256_of(iter([focus])) == closed.focus_sha256
    # December: no GPU row (the GPUs' cost did not change), the corrections of LINES
    assert _queue_lines(dec) == LINES and len(dec) == len(LINES)
    assert {(r["billing_month"], r["charge_class"]) for r in dec} == {("2026-12", "correction")}
    assert sum(Decimal(r["total_cost"]) for r in dec) == 0  # charges and credits cancel
    for focus_rows in (f12, f13):
        assert [(r["ChargePeriodStart"], r["x_Team"], r["BilledCost"]) for r in focus_rows] == [
            (start, team, cost) for start, team, _, cost in LINES
        ]
        assert {r["ChargeClass"] for r in focus_rows} == {"Correction"}
        assert focus_rows[2]["ChargeDescription"] == (
            "Correction: Kueue Borrowing charge: ClusterQueue cq-b, flavor h100, nvidia.com/gpu "
            "borrowed from cohort research"
        )
        assert {r["BillingPeriodStart"] for r in focus_rows} == {"2026-12-01T00:00:00Z"}
    # /v1/queues: 10:00 and 11:00 research borrow 3 GPU-hours each (not 12 with the
    # corrections counted twice), charged 9.000000 + 9.000000; mig 3 x 1.285714 = 3.857142
    by_cohort = {t["group"]["cohort"]: t for t in totals}
    assert by_cohort["research"]["borrowed_hours"] == "6.000000"
    assert by_cohort["research"]["borrowing_charge"] == "18.000000"
    assert by_cohort["mig"]["borrowing_charge"] == "3.857142"
    assert by_cohort["mig"]["borrowing_net"] == "0.000000"
    assert undone == []  # the corrections are back to 0: no line


def hostile_history() -> str:
    """10:00-11:00: a cohort ``=evil,x`` of a borrower ``=HYPERLINK(1)`` (team ``+team``, 1
    GPU of quota, 3 used: borrows 2) and a lender ``@lend`` (team ``-lender``, 4 of quota, 0
    used); one H100 nobody holds (idle: 2.500000)."""
    h = _History()
    start, stop = T - 60, T + 3600
    cohort = {"cohort": "=evil,x", "flavor": "h100", "resource": "nvidia.com/gpu"}
    for queue, team, nominal, used in (
        ("=HYPERLINK(1)", "+team", 1, 3),
        ("@lend", "-lender", 4, 0),
    ):
        lab = {**cohort, "cluster_queue": queue, "replica_role": "leader", "custom_team": team}
        h.add("kueue_cluster_queue_nominal_quota", lab, nominal, start, stop)
        h.add("kueue_cluster_queue_resource_usage", lab, used, start, stop)
    device = {"gpu": "0", "UUID": "GPU-Z", "modelName": H100, "Hostname": "node-z"}
    h.add("gpu_device_up", device, 1, start, stop)
    return h.text()


def test_hostile_queue_names_through_prometheus(
    tmp_path_factory: pytest.TempPathFactory, db: str
) -> None:
    work = tmp_path_factory.mktemp("hostile_queues")
    (work / "history.om").write_text(as_scraped(hostile_history()))
    for prom in prometheus_over(work, T):
        ingest_with(prom.url, db, MODEL, HOURS[:1])
    engine = create_engine(db)
    try:
        rows = _rows("".join(chargeback_csv(engine, MONTH)))
        focus = _rows("".join(focus_csv(engine, MONTH)))
    finally:
        engine.dispose()
    # 2 GPU-hours borrowed x 2.50 x 1.2 = 6.000000, charged and credited; with the idle H100
    # the hour is 2.500000
    assert _queue_lines(rows) == [
        (
            "2026-11-18T10:00:00Z",
            "'+team",
            "kueue:borrowing-charge/=evil,x/=HYPERLINK(1)/h100",
            "6.000000",
        ),
        (
            "2026-11-18T10:00:00Z",
            "'-lender",
            "kueue:lending-credit/=evil,x/@lend/h100",
            "-6.000000",
        ),
    ]
    assert sum(Decimal(r["total_cost"]) for r in rows) == Decimal("2.500000")
    queue = [r for r in focus if r["ChargeCategory"] == "Adjustment"]
    assert [(r["x_Team"], r["ResourceName"], r["BilledCost"]) for r in queue] == [
        ("'+team", "'=HYPERLINK(1)", "6.000000"),
        ("'-lender", "'@lend", "-6.000000"),
    ]
