"""costsvc/db/hour_facts.py store_hour: the rows it writes (built as tuples, sent by binary COPY on
PostgreSQL) are exactly the facts and money handed to it — first write and re-write alike —
and the rollups stay Σ of the chargeback, with a re-write of unchanged money touching no
rollup row (PostgreSQL: the per-pod difference path of costsvc/db/rollup.py). SQLite and
PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, text

from costsvc.db import runs
from costsvc.db.bulk import binary_types
from costsvc.db.hour_facts import flush_pod_days, store_hour
from costsvc.db.models import Chargeback, CostHour, CostPodDay, GpuPresence, UsageFact
from costsvc.db.rollup import pending_pod_days, pod_rows
from costsvc.kit.times import month_of
from costsvc.rules.attribution import GpuHour, Holding, HourFacts, Owner, attribute_hour
from costsvc.rules.chargeback import AMOUNTS, LINE_KEY
from costsvc.rules.lines import HourResult
from tests.costsvc.history import H100, model
from tests.costsvc.history_checks import as_utc, rollup_days, rollup_months, rollup_pod_days

HOUR = datetime(2026, 11, 20, 5, tzinfo=UTC)
US = 1_000_000


def facts(extra_pod: bool = False) -> HourFacts:
    """GPUs whole, time-sliced and MIG; energy on some; a holding with no utilisation, one
    with a memory share; a lost GPU; fractions of a micro-second (truncated when stored)."""
    f = HourFacts(HOUR)
    third = Decimal(3600) / 3
    f.gpus = [
        GpuHour("c", "n0", "GPU-0", H100, None, Decimal(3600), 7_200_000, 5, Decimal(3590), 180),
        GpuHour("c", "n0", "GPU-1", H100, "pool", Decimal("3599.9999995")),
        GpuHour("c", "n1", "GPU-2", H100, None, Decimal(3600), lost_seconds=Decimal("60.5")),
    ]
    f.holdings = [
        Holding("GPU-0", "a", "p0", "main", Decimal(3600), Decimal(1800), cluster="c"),
        Holding("GPU-1", "a", "p1", "main", third, None, third / 2, True, cluster="c"),
        Holding("GPU-1", "b", "p2", "side", third, third / 4, third / 4, True, cluster="c"),
        Holding(
            "GPU-2",
            "b",
            "p3",
            "main",
            Decimal(1800),
            Decimal(900),
            compute_slices=3,
            memory_slices=4,
            gi_id=1,
            mig_profile="3g.40gb",
            memory_share_seconds=Decimal("1542.857142857"),
            cluster="c",
        ),
    ]
    if extra_pod:
        f.holdings.append(Holding("GPU-2", "a", "p4", "x", Decimal(900), cluster="c"))
    f.node_of = {g.key: g.node for g in f.gpus}
    return f


def owner(cluster: str, namespace: str, pod: str) -> Owner:
    return Owner(f"team-{namespace}", "proj", "prod")


def price(f: HourFacts, hourly: str = "2.50") -> HourResult:
    return attribute_hour(HOUR, f.gpus, f.holdings, owner, model(hourly))


def store(engine: Engine, f: HourFacts, result: HourResult) -> None:
    model_id = runs.record_cost_model(engine, model())
    store_hour(engine, "c", f, result, "USD", runs.start_run(engine, "c", HOUR, "ingest", model_id))


def expected(f: HourFacts, result: HourResult) -> list[list[dict[str, Any]]]:
    """The rows as the writer built them before it wrote tuples (one dict per row)."""
    gpus = [
        {
            "hour": HOUR,
            "cluster": g.cluster,
            "node": g.node,
            "gpu_uuid": g.gpu_uuid,
            "model": g.model,
            "node_pool": g.node_pool,
            "present_us": int(g.present_seconds * US),
            "price": result.gpu_price[g.key],
            "cost": result.gpu_cost[g.key],
            "lost_us": int(g.lost_seconds * US),
            "energy_mj": g.energy_mj,
            "gap_mj": g.gap_mj,
            "energy_us": int(g.energy_seconds * US),
            "min_power_mw": g.min_power_mw,
            "kwh_price": result.gpu_kwh_price.get(g.key, 0),
            "carbon_ug_per_kwh": result.gpu_carbon.get(g.key, 0),
            "co2e_mg": result.gpu_co2e.get(g.key, 0),
        }
        for g in f.gpus
    ]
    holdings = []
    for h in f.holdings:
        b, m = h.busy_share_seconds, h.memory_share_seconds
        holdings.append(
            {
                "hour": HOUR,
                "cluster": h.cluster,
                "node": f.node_of[h.gpu],
                "gpu_uuid": h.gpu_uuid,
                "gi_id": -1 if h.gi_id is None else h.gi_id,
                "namespace": h.namespace,
                "pod": h.pod,
                "container": h.container,
                "share_us": int(h.share_seconds * US),
                "busy_share_us": -1 if b is None else int(b * US),
                "sm_us": int(h.sm_seconds * US),
                "shared": h.shared,
                "compute_slices": h.compute_slices,
                "memory_slices": h.memory_slices,
                "mig_profile": h.mig_profile,
                "memory_share_us": None if m is None else int(m * US),
            }
        )
    lines = [
        {
            **dict(zip(LINE_KEY, ln.key, strict=True)),
            "hour": HOUR,
            "billing_month": month_of(HOUR),
            "correction": False,
            "currency": "USD",
            **{a: getattr(ln, a) for a in AMOUNTS},
        }
        for ln in result.lines
    ]
    return [sorted(rows, key=repr) for rows in (gpus, holdings, lines)]


def stored(engine: Engine, names: list[list[str]]) -> list[list[dict[str, Any]]]:
    out = []
    with engine.connect() as conn:
        for table, cols in zip((GpuPresence, UsageFact, Chargeback), names, strict=True):
            rows = conn.execute(select(*(getattr(table, c) for c in cols)).order_by(table.id))
            found = [{c: as_utc(v) for c, v in zip(cols, r, strict=True)} for r in rows]
            out.append(sorted(found, key=repr))
    return out


def assert_rollups_are_sums(engine: Engine) -> None:
    """cost_hours, cost_days, cost_pod_days and cost_months are Σ of the chargeback, every
    amount."""
    c, o = Chargeback, CostHour
    owner = ("hour", "cluster", "team", "project", "stage", "currency")
    with engine.connect() as conn:
        for want, got in (rollup_days(conn), rollup_pod_days(conn), rollup_months(conn)):
            assert want == got
            assert got
        cols = [getattr(c, k) for k in owner]
        sums = [func.sum(getattr(c, a)) for a in AMOUNTS]
        want_hours = {
            tuple(as_utc(v) for v in r[:6]): [int(v) for v in r[6:]]
            for r in conn.execute(select(*cols, *sums).group_by(*cols))
        }
        stored_hours = {
            tuple(as_utc(v) for v in r[:6]): [int(v) for v in r[6:]]
            for r in conn.execute(
                select(*(getattr(o, k) for k in owner), *(getattr(o, a) for a in AMOUNTS))
            )
        }
        assert want_hours == stored_hours


def test_first_write_and_rewrites_store_exactly_the_rows_handed_over(engine: Engine) -> None:
    f = facts()
    result = price(f)
    assert result.lines and any(g.energy_mj for g in f.gpus)
    want = expected(f, result)
    names = [list(rows[0]) for rows in want]
    store(engine, f, result)
    assert stored(engine, names) == want
    assert_rollups_are_sums(engine)
    store(engine, f, result)  # a re-ingest of the same hour: the same rows, not twice
    assert stored(engine, names) == want
    assert_rollups_are_sums(engine)
    # a re-ingest with other money and another pod: replaced, the rollups follow
    f2 = facts(extra_pod=True)
    result2 = price(f2, "3.10")
    store(engine, f2, result2)
    assert stored(engine, names) == expected(f2, result2)
    assert_rollups_are_sums(engine)
    store(engine, f, result)  # and back: the extra pod's rollup rows are gone
    assert stored(engine, names) == want
    assert_rollups_are_sums(engine)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # row versions: xmin
def test_a_rewrite_of_unchanged_money_leaves_the_rollup_rows_alone(
    engine: Engine, db_url: str
) -> None:
    f = facts()
    result = price(f)
    store(engine, f, result)

    def versions() -> list[tuple[Any, ...]]:
        with engine.connect() as conn:
            return sorted(conn.execute(text("SELECT id, xmin::text FROM cost_pod_days")).all())

    before = versions()
    store(engine, f, result)
    assert versions() == before  # nothing to add: not one row updated
    store(engine, f, price(f, "3.10"))
    after = versions()
    assert [r[0] for r in after] == [r[0] for r in before]
    assert all(a[1] != b[1] for a, b in zip(after, before, strict=True))  # each updated once
    assert_rollups_are_sums(engine)
    with engine.connect() as conn:
        assert conn.execute(select(CostPodDay.id)).first() is not None


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # the binary COPY's
def test_binary_copy_types_are_the_columns_types(engine: Engine, db_url: str) -> None:
    for table in (GpuPresence.__table__, UsageFact.__table__, Chargeback.__table__):
        names = tuple(c.name for c in table.columns)
        with engine.connect() as conn:
            found = dict(
                conn.execute(  # type: ignore[arg-type]
                    text(
                        "SELECT column_name, udt_name FROM information_schema.columns "
                        "WHERE table_name = :t"
                    ),
                    {"t": table.name},
                ).all()
            )
        assert binary_types(table, names) == [found[n] for n in names]  # type: ignore[arg-type]


def _at(hour: datetime, f: HourFacts) -> tuple[HourFacts, HourResult]:
    """``f`` as the facts of another ``hour``, priced."""
    moved = HourFacts(hour)
    moved.gpus, moved.holdings, moved.node_of = f.gpus, f.holdings, f.node_of
    return moved, attribute_hour(hour, f.gpus, f.holdings, owner, model())


def _per_pod(engine: Engine, start: datetime, end: datetime) -> tuple[dict[Any, Any], ...]:
    """Σ per pod over [start, end): read through pod_rows, and from the chargeback."""
    key = ("cluster", "team", "namespace", "pod")
    r, c = pod_rows(start, end).c, Chargeback
    with engine.connect() as conn:
        read = conn.execute(
            select(*(r[k] for k in key), *(func.sum(r[a]) for a in AMOUNTS)).group_by(
                *(r[k] for k in key)
            )
        )
        wanted = conn.execute(
            select(*(getattr(c, k) for k in key), *(func.sum(getattr(c, a)) for a in AMOUNTS))
            .where(c.hour >= start, c.hour < end)
            .group_by(*(getattr(c, k) for k in key))
        )
        return tuple(
            {tuple(x[:4]): [int(v) for v in x[4:]] for x in rows} for rows in (read, wanted)
        )


def test_a_pending_day_is_read_from_the_chargeback_until_its_pod_rows_are_written(
    engine: Engine,
) -> None:
    day = datetime(2026, 11, 20, tzinfo=UTC)
    model_id = runs.record_cost_model(engine, model())
    f = facts(extra_pod=True)

    def write(hour: datetime, defer: bool) -> None:
        at, result = _at(hour, f)
        run_id = runs.start_run(engine, "c", hour, "ingest", model_id)
        store_hour(engine, "c", at, result, "USD", run_id, defer=defer)

    def pod_day_rows() -> int:
        with engine.connect() as conn:
            return len(conn.execute(select(CostPodDay.id).where(CostPodDay.day == day)).all())

    def reads_agree() -> None:
        # whole days and edges: the day alone, and with hours of the days around it
        for start, end in (
            (day, day + timedelta(days=1)),
            (day - timedelta(hours=2), day + timedelta(days=1, hours=3)),
        ):
            read, wanted = _per_pod(engine, start, end)
            assert read == wanted and wanted

    write(day - timedelta(hours=1), False)  # the day before: kept hour by hour
    write(day + timedelta(hours=1), True)
    write(day + timedelta(hours=2), True)
    with engine.connect() as conn:
        assert pending_pod_days(conn) == [(day, "c")]
    assert pod_day_rows() == 0  # left out: the day's rows come from its chargeback
    reads_agree()
    write(day + timedelta(hours=3), False)  # an hour of a pending day: left out too
    assert pod_day_rows() == 0
    reads_agree()
    assert flush_pod_days(engine) == 1
    with engine.connect() as conn:
        assert pending_pod_days(conn) == []
    assert pod_day_rows() > 0
    assert_rollups_are_sums(engine)  # the day's rows are its chargeback, summed per pod
    reads_agree()
    write(day + timedelta(hours=4), False)  # kept: added hour by hour again
    write(day + timedelta(hours=1), False)  # and a re-write of one, new minus old
    assert_rollups_are_sums(engine)
    reads_agree()
    write(day + timedelta(hours=5), True)  # a kept day deferred: its rows are set aside
    with engine.connect() as conn:
        assert pending_pod_days(conn) == [(day, "c")]
    reads_agree()
    assert flush_pod_days(engine, {day - timedelta(days=1)}) == 0  # (another day's: none)
    assert flush_pod_days(engine, {day}) == 1
    assert_rollups_are_sums(engine)
    reads_agree()
