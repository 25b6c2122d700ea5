"""Kueue's queues as tenants, through a real Prometheus on SQLite and PostgreSQL: the 8/4/4
cohort, a MIG flavor, a queue relabelled mid-day, a pod without the queue label, both borrowing
policies and a back-dated one (hand-computed figures: queue_history.py)."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select

from costsvc.db.models import Chargeback, GpuPresence, QueueHourRow
from costsvc.ingest.reprice import reprice, stale_hours
from tests.costsvc import queue_history
from tests.costsvc.apiserver import Api, Clock, serve
from tests.costsvc.conftest import fresh_database
from tests.costsvc.history import ingest_with
from tests.costsvc.history_checks import as_utc
from tests.costsvc.queue_history import CREDIT, HOURS, MODEL, NONE, model
from tests.costsvc.test_pages_access import signed_in
from tests.prom import Prometheus

H10, H11, H12 = HOURS
G = 3600  # one GPU (or MIG instance) for the whole hour, in resource-seconds
# (hour, ClusterQueue) -> team, nominal, used, within, borrowed, lent, idle (s), charge, credit
# (micro-units), by hand from queue_history.py:
# 10:00 cq-b borrows 3 GPUs, cq-c (1 of 4 used) lends all 3: 3 x 2.50 x 1.2 = 9.000000 each way
# 11:00 cq-b borrows 3; unused a 2, c 4 -> a lends 1 (idle 1), c 2 (idle 2); 9.000000 charged,
#       credited 1:2 -> 3.000000 and 6.000000
# 12:00 nothing borrowed; cq-c leaves 2 idle
# every hour, MIG: cq-d borrows 3 1g.10gb of cq-e (2 of 7 used: idle 2): 3 x 2.50 / 7 x 1.2
#       = 1.2857142… -> 1.285714 each way; odd: 2 GPUs idle, its use -5 read as 0
ROWS = {
    H10: {
        "cq-a": ("alpha", 8 * G, 8 * G, 8 * G, 0, 0, 0, 0, 0),
        "cq-b": ("beta", 4 * G, 7 * G, 4 * G, 3 * G, 0, 0, 9_000_000, 0),
        "cq-c": ("gamma", 4 * G, 1 * G, 1 * G, 0, 3 * G, 0, 0, 9_000_000),
    },
    H11: {
        "cq-a": ("alpha", 8 * G, 6 * G, 6 * G, 0, 1 * G, 1 * G, 0, 3_000_000),
        "cq-b": ("beta2", 4 * G, 7 * G, 4 * G, 3 * G, 0, 0, 9_000_000, 0),  # relabelled
        "cq-c": ("gamma", 4 * G, 0, 0, 0, 2 * G, 2 * G, 0, 6_000_000),
    },
    H12: {
        "cq-a": ("alpha", 8 * G, 8 * G, 8 * G, 0, 0, 0, 0, 0),
        "cq-b": ("beta2", 4 * G, 4 * G, 4 * G, 0, 0, 0, 0, 0),
        "cq-c": ("gamma", 4 * G, 2 * G, 2 * G, 0, 0, 2 * G, 0, 0),
    },
}
EVERY_HOUR = {
    "cq-d": ("delta", 7 * G, 10 * G, 7 * G, 3 * G, 0, 0, 1_285_714, 0),
    "cq-e": ("eps", 7 * G, 2 * G, 2 * G, 0, 3 * G, 2 * G, 0, 1_285_714),
    "x" * 253: ("__unallocated__", 2 * G, 0, 0, 0, 0, 2 * G, 0, 0),  # the name cut to 253
}
EXPECTED = {(h, q): v for h in HOURS for q, v in {**ROWS[h], **EVERY_HOUR}.items()}


queue_prom, db = queue_history.queue_prom, queue_history.db  # the fleet, each database


def queue_rows(url: str) -> dict[tuple[datetime, str], tuple[Any, ...]]:
    engine = create_engine(url)
    t = QueueHourRow
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(*t.__table__.c)).all()
            return {
                (as_utc(r.hour), r.cluster_queue): (
                    r.team,
                    r.nominal_s,
                    r.used_s,
                    r.within_s,
                    r.borrowed_s,
                    r.lent_s,
                    r.idle_s,
                    r.charge,
                    r.credit,
                )
                for r in rows
            }
    finally:
        engine.dispose()


def pod_teams(url: str) -> dict[tuple[datetime, str], str]:
    engine = create_engine(url)
    c = Chargeback
    try:
        with engine.connect() as conn:
            found = conn.execute(select(c.hour, c.pod, c.team).where(c.pod != "")).all()
            return {(as_utc(h), pod): team for h, pod, team in found}
    finally:
        engine.dispose()


def assert_sums_are_the_fleet_cost(url: str) -> None:
    """Every hour: Σ charges = Σ credits, so Σ chargeback + charges - credits = Σ GPU cost."""
    engine = create_engine(url)
    c, g, q = Chargeback, GpuPresence, QueueHourRow
    try:
        with engine.connect() as conn:
            fleet = dict(conn.execute(select(g.hour, func.sum(g.cost)).group_by(g.hour)).all())
            charged = conn.execute(
                select(c.hour, func.sum(c.allocated + c.idle)).group_by(c.hour)
            ).all()
            moved = dict(
                conn.execute(select(q.hour, func.sum(q.charge - q.credit)).group_by(q.hour)).all()
            )
    finally:
        engine.dispose()
    assert len(charged) == 3
    for hour, total in charged:
        assert moved[hour] == 0
        assert total + moved[hour] == fleet[hour] == 7_500_000  # 3 GPUs x 2.50


def test_credit_lenders_through_prometheus(queue_prom: Prometheus, db: str) -> None:
    ingest_with(queue_prom.url, db, MODEL, HOURS)
    assert queue_rows(db) == EXPECTED
    assert_sums_are_the_fleet_cost(db)
    teams = pod_teams(db)
    # p1 submits to lq-b: its LocalQueue's team, relabelled at 11:00; p2 has no queue label:
    # its namespace's; p3 has its own team label, which comes first (pod_first)
    assert [teams[(h, "p1")] for h in HOURS] == ["beta", "beta2", "beta2"]
    assert {teams[(h, "p2")] for h in HOURS} == {"ns-team"}
    assert {teams[(h, "p3")] for h in HOURS} == {"own"}


def test_policy_none_and_a_back_dated_credit_lenders(queue_prom: Prometheus, db: str) -> None:
    ingest_with(queue_prom.url, db, model(precedence="queue_first"), HOURS)
    rows = queue_rows(db)
    # the same figures, no money moved
    assert {k: v[:7] for k, v in rows.items()} == {k: v[:7] for k, v in EXPECTED.items()}
    assert {v[7:] for v in rows.values()} == {(0, 0)}
    assert_sums_are_the_fleet_cost(db)
    # queue_first: p3's queue (beta, then beta2) wins over its own label
    assert [pod_teams(db)[(h, "p3")] for h in HOURS] == ["beta", "beta2", "beta2"]
    # credit_lenders back-dated to 11:00: the hours it covers are repriced from the stored
    # rows, 10:00 stays as it was
    later = model({**CREDIT, "effective_from": "2026-11-18T11:00:00Z"}, precedence="queue_first")
    engine = create_engine(db)
    try:
        assert stale_hours(engine, later) == [H11, H12]
        assert reprice(engine, later, "c1", [H11, H12]).done == [H11, H12]
        assert stale_hours(engine, later) == []
    finally:
        engine.dispose()
    rows = queue_rows(db)
    for key, want in EXPECTED.items():
        assert rows[key] == (want if key[0] != H10 else (*want[:7], 0, 0)), key
    assert_sums_are_the_fleet_cost(db)
    assert NONE.queues.borrowing_at(H10 + timedelta(days=365)).policy == "none"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, queue_prom: Prometheus
) -> Iterator[Api]:
    with fresh_database(request.param, request, tmp_path_factory.mktemp("qapi")) as url:
        ingest_with(queue_prom.url, url, MODEL, HOURS)
        with serve(url, Clock(datetime(2026, 11, 21, tzinfo=UTC)), ["beta", "gamma"]) as running:
            yield running


WINDOW = {"start": "2026-11-18T10:00:00Z", "end": "2026-11-18T13:00:00Z"}


def test_v1_queues_by_team_and_cohort(api: Api) -> None:
    rows = {
        r["group"]["team"]: r
        for r in api.get("/v1/queues", **WINDOW, group_by="team").json()["rows"]
    }
    assert set(rows) == {"alpha", "beta", "beta2", "gamma", "delta", "eps", "__unallocated__"}
    gamma = rows["gamma"]
    # 4 GPUs x 3 h nominal; used 1 + 0 + 2; lent 3 + 2; idle 0 + 2 + 2; at 2.50 a GPU-hour
    assert (gamma["nominal_hours"], gamma["used_hours"], gamma["lent_hours"]) == (
        "12.000000",
        "3.000000",
        "5.000000",
    )
    assert (gamma["idle_hours"], gamma["idle_cost"]) == ("4.000000", "10.000000")
    assert (gamma["lending_credit"], gamma["borrowing_net"]) == ("15.000000", "-15.000000")  # 9 + 6
    beta = rows["beta"]  # cq-b at 10:00 only (beta2 from 11:00)
    assert (beta["used_hours"], beta["borrowed_hours"], beta["borrowing_charge"]) == (
        "7.000000",
        "3.000000",
        "9.000000",
    )
    cohorts = {
        r["group"]["cohort"]: r
        for r in api.get("/v1/queues", **WINDOW, group_by="cohort").json()["rows"]
    }
    # 16 GPUs x 3 h; 9.000000 charged twice, as much credited: the fleet total unchanged
    research = cohorts["research"]
    assert (
        research["nominal_hours"],
        research["borrowing_charge"],
        research["lending_credit"],
    ) == ("48.000000", "18.000000", "18.000000")
    assert research["borrowing_net"] == "0.000000"
    mig = cohorts["mig"]  # 3 x 1.285714 each way; 14 instances x 3 h
    assert (mig["nominal_hours"], mig["borrowing_charge"], mig["borrowing_net"]) == (
        "42.000000",
        "3.857142",
        "0.000000",
    )


def test_v1_queues_is_team_scoped_and_refuses_bad_input(api: Api) -> None:
    mine = api.get("/v1/queues", "team:gamma", **WINDOW, group_by="team,cluster_queue").json()[
        "rows"
    ]
    assert [(r["group"]["team"], r["group"]["cluster_queue"]) for r in mine] == [("gamma", "cq-c")]
    assert api.get("/v1/queues", "team:gamma", **WINDOW, team="beta").status_code == 403
    assert api.get("/v1/queues", "team:beta", **WINDOW, team="beta").json()["rows"][0]["group"] == {
        "cluster_queue": "cq-b",
        "flavor": "h100",
        "resource": "nvidia.com/gpu",
    }
    for bad in ({"group_by": "pod"}, {"group_by": "team,team"}, {"start": "x"}, {"window": "\x00"}):
        r = api.get("/v1/queues", **{**WINDOW, **bad})
        assert r.status_code in (400, 422) and len(r.text) < 500, (bad, r.text)
    assert api.get("/v1/queues", None, **WINDOW).status_code == 401


def test_the_team_page_shows_its_queues(api: Api) -> None:
    with signed_in(api, "team:gamma") as client:
        page = client.get("/ui/teams/gamma", params={"month": "2026-11"})
        assert page.status_code == 200
        row = re.search(r'<tr><th scope="row">cq-c</th>(.*?)</tr>', page.text)
        assert row is not None, page.text
        # quota 12 GPU-hours x 2.50 = 30.00; used within 3 h = 7.50; lent 5 h = 12.50;
        # idle 4 h = 10.00; credited 15.00
        cells = re.findall(r'<td class="n">([^<]*)</td>', row[1])
        assert cells == ["30.00", "7.50", "0.00", "12.50", "10.00", "-15.00"]
        assert client.get("/ui/teams/beta").status_code == 404  # another team's page
    with signed_in(api, "finance") as client:  # team own has costs (p3) and no ClusterQueue
        page = client.get("/ui/teams/own", params={"month": "2026-11"})
        assert page.status_code == 200 and 'id="queues"' not in page.text


def test_v1_queues_per_hour(api: Api) -> None:
    # cq-b hour by hour: 3 GPUs borrowed at 10:00 and 11:00 (9.000000 each), none at 12:00
    asked = {**WINDOW, "group_by": "cluster_queue", "cluster_queue": "cq-b", "step": "hour"}
    answer = api.get("/v1/queues", **asked).json()
    assert answer["step"] == "hour"
    found = [(r["start"], r["borrowed_hours"], r["borrowing_charge"]) for r in answer["rows"]]
    assert found == [
        ("2026-11-18T10:00:00Z", "3.000000", "9.000000"),
        ("2026-11-18T11:00:00Z", "3.000000", "9.000000"),
        ("2026-11-18T12:00:00Z", "0.000000", "0.000000"),
    ]
    days = api.get("/v1/queues", **{**asked, "step": "day"}).json()["rows"]
    assert [(r["start"], r["borrowed_hours"]) for r in days] == [
        ("2026-11-18T00:00:00Z", "6.000000")
    ]
    assert api.get("/v1/queues", **{**asked, "step": "fortnight"}).status_code == 422


def test_v1_queues_csv_is_the_same_rows(api: Api) -> None:
    asked = {**WINDOW, "group_by": "team,cluster_queue", "step": "hour"}
    r = api.get("/v1/queues.csv", "team:gamma", **asked)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    lines = list(csv.DictReader(io.StringIO(r.text)))
    # gamma's cq-c credited 9.000000 at 10:00 and 6.000000 at 11:00, nothing at 12:00
    assert [(x["start"], x["team"], x["cluster_queue"], x["lending_credit"]) for x in lines] == [
        ("2026-11-18T10:00:00Z", "gamma", "cq-c", "9.000000"),
        ("2026-11-18T11:00:00Z", "gamma", "cq-c", "6.000000"),
        ("2026-11-18T12:00:00Z", "gamma", "cq-c", "0.000000"),
    ]
    as_json = api.get("/v1/queues", "team:gamma", **asked).json()["rows"]
    assert [x["idle_cost"] for x in lines] == [x["idle_cost"] for x in as_json]
    assert api.get("/v1/queues.csv", "team:gamma", **WINDOW, team="alpha").status_code == 403
