"""The daily rollups ``cost_days`` and ``cost_pod_days`` (costsvc/db/rollup.py): every read
that takes whole days from them answers exactly what the hourly path (``cost_hours`` and the
chargeback only) answers — on the ingested ground-truth history and on random ranges over
hours written by the writer (originals, re-writes of an hour, corrections of a closed month)
— and they are Σ of their day's hours after each of those writes. SQLite and PostgreSQL."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, insert, select

import costsvc.db.rollup as rollup
from costsvc.costs.queries import (
    costs,
    forecast,
    idle_by_currency,
    owner_money,
    pod_money,
    team_total,
    top_wasters,
)
from costsvc.db.lines import write_lines
from costsvc.db.migrate import upgrade
from costsvc.db.models import CostDay, MonthClose
from costsvc.kit.times import month_of
from costsvc.rules.chargeback import AMOUNTS, KEY
from costsvc.rules.lines import Line
from tests.costsvc.history import ELEVENTH, FIFTEENTH, HOUR, MODEL, TWELFTH, ingest_with
from tests.costsvc.history_checks import (
    assert_every_hour_adds_up,
    rollup_days,
    rollup_months,
    rollup_pod_days,
)
from tests.prom import Prometheus

H = timedelta(hours=1)
TEAMS = ("a", "b", "c", "__idle__")


def answers(engine: Engine, start: datetime, end: datetime, monkeypatch: Any) -> list[Any]:
    """Every rollup-backed read over [start, end), through the rollup and hourly only (the
    reads given only their hourly tables: ``cost_hours``, the chargeback)."""
    out = []
    reads = (rollup.OWNER_READS, rollup.POD_READS)
    for owner_reads, pod_reads in (reads, tuple(r[-1:] for r in reads)):
        monkeypatch.setattr(rollup, "OWNER_READS", owner_reads)
        monkeypatch.setattr(rollup, "POD_READS", pod_reads)
        with engine.connect() as conn:
            got: list[Any] = []
            for group_by in (
                [],
                ["team"],
                ["team", "project"],
                ["cluster", "stage"],
                ["namespace"],
                ["pod", "team"],
            ):
                for step in (None, "day", "month"):
                    got.append(costs(conn, start, end, group_by, step, {}))
                got.append(costs(conn, start, end, group_by, "day", {"team": ["a", "b"]}))
            got.append([team_total(conn, start, end, t) for t in TEAMS])
            got.append(team_total(conn, start, end, "a", "pa1"))
            got.append(sorted(owner_money(conn, start, end), key=repr))
            got.append(sorted(idle_by_currency(conn, start, end)))
            got.append(forecast(conn, end - H, "a"))
            got.append(costs(conn, start, end, ["team"], "day", {"pod": ["pod-3", "pod-7"]}))
            got.append([top_wasters(conn, start, end, t, limit=50) for t in TEAMS])
            got.append(top_wasters(conn, start, end, "b", limit=3))
            got.append(sorted(pod_money(conn, start, end), key=repr))
        out.append(got)
    return out


def assert_same(engine: Engine, start: datetime, end: datetime, monkeypatch: Any) -> None:
    via_days, hourly = answers(engine, start, end, monkeypatch)
    assert via_days == hourly, (start, end)


def line(rng: random.Random, cluster: str) -> Line:
    team = rng.choice(TEAMS)
    idle = team == "__idle__"
    alloc = 0 if idle else rng.randrange(1, 9_000_000)
    used = rng.randrange(0, alloc + 1)
    return Line(
        cluster,
        team,
        team if idle else f"p{team}{rng.randrange(2)}",
        team if idle else rng.choice(("prod", "dev")),
        "" if idle else f"ns-{team}",
        "" if idle else f"pod-{rng.randrange(40)}",
        f"node-{rng.randrange(3)}",
        "NVIDIA H100 80GB HBM3",
        "",
        allocated=alloc,
        used=used,
        waste=alloc - used,
        idle=rng.randrange(0, 3_000_000),
        gpu_hours=rng.randrange(1, 1_000_000),
        unavailable=rng.randrange(0, 1000),
        energy_mj=rng.randrange(0, 10**9),
        idle_energy_mj=rng.randrange(0, 10**8),
        co2e_mg=rng.randrange(0, 10**6),
        idle_co2e_mg=rng.randrange(0, 10**5),
    )


def write_hour(engine: Engine, rng: random.Random, hour: datetime) -> None:
    """One hour of random lines for both clusters (unique keys, as attribution makes them)."""
    with engine.begin() as conn:
        for cluster in ("east", "west"):
            lines = {ln.key: ln for ln in (line(rng, cluster) for _ in range(rng.randrange(8)))}
            write_lines(conn, hour, {cluster}, list(lines.values()), "USD")


def assert_days_are_sums(engine: Engine) -> None:
    with engine.connect() as conn:
        for want, stored in (rollup_days(conn), rollup_pod_days(conn), rollup_months(conn)):
            assert want == stored
            assert stored  # something was written


def test_random_ranges_over_written_hours_answer_as_the_hourly_path(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(15)
    t0 = datetime(2026, 9, 28, 0, tzinfo=UTC)  # the whole of October and the days around
    span = 24 * 38
    hours = sorted(t0 + i * H for i in rng.sample(range(span), 150))
    for h in hours:
        write_hour(engine, rng, h)
    assert_days_are_sums(engine)
    # re-ingest of some hours (different lines), then close October and re-write some of
    # its hours: corrections billed in November, kept in the hour's day
    for h in rng.sample(hours, 12):
        write_hour(engine, rng, h)
    assert_days_are_sums(engine)
    with engine.begin() as conn:
        conn.execute(
            insert(MonthClose).values(
                month="2026-10", closed_at=t0, closed_by="t", csv_sha256="", focus_sha256=""
            )
        )
    for h in [h for h in hours if h.month == 10][-10:]:
        write_hour(engine, rng, h)
    assert_days_are_sums(engine)
    end = t0 + span * H
    october = (datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC))
    ranges = [(t0, end), (t0 - 5 * H, end + 7 * H), (t0 + 24 * H, t0 + 48 * H), october]
    for _ in range(25):
        a, b = sorted(rng.sample(range(-3, span + 3), 2))
        ranges.append((t0 + a * H, t0 + b * H))
    for start, stop in ranges:
        assert_same(engine, start, stop, monkeypatch)
    # the rollup had work to do: some range read whole days from it
    with engine.connect() as conn:
        assert conn.execute(select(CostDay.id)).first() is not None


def test_ground_truth_history_answers_as_the_hourly_path(
    prometheus: Prometheus, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hours = [HOUR, HOUR + H, ELEVENTH, TWELFTH, FIFTEENTH]
    ingest_with(prometheus.url, db_url, MODEL, hours)
    assert_every_hour_adds_up(db_url)  # includes cost_days == Σ cost_hours per day
    engine = create_engine(db_url)
    try:
        day = datetime(2026, 11, 10, tzinfo=UTC)
        ranges = [
            (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)),
            (day, day + timedelta(days=6)),
            (HOUR, FIFTEENTH + H),
            (HOUR + H, TWELFTH),
            (day + timedelta(days=1), day + timedelta(days=2)),
            (FIFTEENTH, FIFTEENTH + H),
        ]
        for start, stop in ranges:
            assert_same(engine, start, stop, monkeypatch)
    finally:
        engine.dispose()


def test_migration_0010_backfills_the_daily_rollups(db_url: str) -> None:
    """Hours stored before revision 0010 (chargeback + cost_hours only) get their days."""
    from costsvc.db.models import Chargeback
    from costsvc.db.rollup import refresh_cost_hours

    upgrade(db_url, "0007")
    engine = create_engine(db_url)
    rng = random.Random(10)
    t0 = datetime(2026, 10, 30, 21, tzinfo=UTC)  # days cut at UTC midnight, a month boundary
    try:
        for i in range(40):
            hour = t0 + i * H
            rows = {}
            for cluster in ("east", "west"):
                for ln in (line(rng, cluster) for _ in range(5)):
                    row: dict[str, Any] = {k: getattr(ln, k) for k in KEY + AMOUNTS}
                    row.update(
                        hour=hour, billing_month=month_of(hour), correction=False, currency="USD"
                    )
                    rows[ln.key] = row
            with engine.begin() as conn:
                conn.execute(insert(Chargeback), list(rows.values()))
                refresh_cost_hours(conn, hour, {"east", "west"})
        upgrade(db_url)
        with engine.connect() as conn:
            for want, stored in (rollup_days(conn), rollup_pod_days(conn)):
                assert want == stored
                assert len({k[0] for k in stored}) == 3  # Oct 30, Oct 31, Nov 1
    finally:
        engine.dispose()
