"""Energy and carbon through a real Prometheus into SQLite and PostgreSQL: the hand-computed
hours of energy_history.py (a whole GPU, MIG 3g+2g+1g+1g, time-sliced x4, a counter reset, a
20-minute gap) and a carbon-intensity change mid-month, forward and back-dated, into a closed
month too."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select

from costsvc.db.models import Chargeback, GpuPresence
from costsvc.ingest.reprice import reprice, stale_hours
from costsvc.months.close import close_month
from costsvc.rules.chargeback import IDLE
from costsvc.rules.cost_model import parse
from tests.conftest import require_binary
from tests.costsvc.energy_history import (
    CARBON,
    E0,
    E1,
    E2,
    H100,
    MODEL,
    assert_energy_adds_up,
    energy_model,
    history,
)
from tests.costsvc.history import assert_fast_is_raw, ingest_with
from tests.costsvc.history_checks import as_utc, assert_every_hour_adds_up, tables
from tests.costsvc.scraped import as_scraped
from tests.prom import Prometheus


@pytest.fixture(scope="module")
def energy_prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    promtool, binary = require_binary("promtool"), require_binary("prometheus")
    work = tmp_path_factory.mktemp("energy")
    (work / "history.om").write_text(as_scraped(history()))
    subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(work / "history.om"),
            str(work / "data"),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    prom = Prometheus(binary, work, [], extra_args=["--storage.tsdb.retention.time=100y"])
    try:
        prom.wait_ready()
        t = int(E1.timestamp()) + 60
        prom.until(lambda: prom.query(f"gpu_device_up @ {t}"), 30, "blocks loaded")
        yield prom
    finally:
        prom.stop()


def by_team(url: str, hour: datetime | None = None) -> dict[str, tuple[int, int]]:
    """(energy mJ, CO2e mg) per team, attributed + idle, over every row (or one hour's)."""
    engine = create_engine(url)
    c = Chargeback
    q = select(
        c.team, func.sum(c.energy_mj + c.idle_energy_mj), func.sum(c.co2e_mg + c.idle_co2e_mg)
    ).group_by(c.team)
    if hour is not None:
        q = q.where(c.hour == hour)
    with engine.connect() as conn:
        rows = conn.execute(q).all()
    engine.dispose()
    return {r[0]: (int(r[1]), int(r[2])) for r in rows}


def test_hour_ten_by_hand(energy_prom: Prometheus, db_url: str) -> None:
    ingest_with(energy_prom.url, db_url, MODEL, [E1])
    got = by_team(db_url)
    energy = {team: mj for team, (mj, _) in got.items()}
    assert energy == {
        "green": 1_314_000_000,
        # the shares as published (3/7 as a float, its ∫ dt kept to the micro-second:
        # 1542.857143 s) give activities 771.428572 : 1028.571429 : 102.857143 : 0, so the
        # active 1548e6 splits 627567567.66, 836756756.60, 83675675.74 -> ma and mc get +1
        # (test_energy.py has the split with exact sevenths: there mb gets the unit)
        "ma": 108_000_000 + 627_567_568,
        "mb": 72_000_000 + 836_756_756,
        "mc": 119_675_676,
        "md": 36_000_000,
        "tw": 536_142_857,
        "tx": 299_571_429,
        "ty": 181_285_714,
        "tz": 63_000_000,
        "reset": 1_438_000_000,
        "gap": 834_750_000,
        IDLE: 126_000_000 + 425_250_000,
    }
    carbon = {team: mg for team, (_, mg) in got.items()}
    # 480 g/kWh: EW 0.4 kWh = 192 000 mg split 1314 : 126; EG 168 000 split 83475 : 42525;
    # ER 1.438e9 mJ x 480 / 3.6e6 = 191 733.3 -> 191 733
    assert carbon["green"] == 175_200
    assert carbon["gap"] == 111_300
    assert carbon[IDLE] == 16_800 + 56_700
    assert carbon["reset"] == 191_733
    assert sum(carbon[t] for t in ("ma", "mb", "mc", "md")) == 240_000  # 0.5 kWh
    assert sum(carbon[t] for t in ("tw", "tx", "ty", "tz")) == 144_000  # 0.3 kWh
    assert assert_energy_adds_up(db_url) == 1
    assert_every_hour_adds_up(db_url)

    engine = create_engine(db_url)
    with engine.connect() as conn:
        g = GpuPresence
        rows = {
            r.gpu_uuid: (r.energy_mj, r.gap_mj, r.energy_us, r.min_power_mw, r.carbon_ug_per_kwh)
            for r in conn.execute(select(g))
        }
    engine.dispose()
    assert rows["GPU-EG"] == (1_260_000_000, 425_250_000, 2_385_000_000, 350_000, 480_000_000)
    assert rows["GPU-ER"][:3] == (1_438_000_000, 0, 3_600_000_000)


OLD_CARBON: dict[str, str] = {}
NOON = {"effective_from": "2026-11-20T11:00:00Z", "grams_per_kwh": "200", "pue": "1.2"}
OCTOBER = {"effective_from": "2026-10-31T23:00:00Z", "grams_per_kwh": "300", "pue": "1.2"}


def green(url: str) -> dict[tuple[Any, str, bool], tuple[int, int, int]]:
    """Team green's (allocated + idle money, energy, CO2e) by hour, billing month, correction."""
    engine = create_engine(url)
    c = Chargeback
    q = (
        select(
            c.hour,
            c.billing_month,
            c.correction,
            func.sum(c.allocated + c.idle),
            func.sum(c.energy_mj + c.idle_energy_mj),
            func.sum(c.co2e_mg + c.idle_co2e_mg),
        )
        .where(c.team == "green")
        .group_by(c.hour, c.billing_month, c.correction)
    )
    with engine.connect() as conn:
        out = {
            (as_utc(r[0]), r[1], bool(r[2])): (int(r[3]), int(r[4]), int(r[5]))
            for r in conn.execute(q)
        }
    engine.dispose()
    return out


def test_a_carbon_change_mid_month_forward_and_back_dated(
    energy_prom: Prometheus, db_url: str, tmp_path: Any
) -> None:
    changed = energy_model(NOON)
    reference = f"sqlite:///{tmp_path / 'forward.db'}"
    ingest_with(energy_prom.url, reference, changed, [E1, E2])  # known in advance

    ingest_with(energy_prom.url, db_url, MODEL, [E0, E1, E2])
    engine = create_engine(db_url)
    assert green(db_url) == {
        (E0, "2026-10", False): (2_500_000, 1_440_000_000, 192_000),
        (E1, "2026-11", False): (1_250_000, 1_314_000_000, 175_200),
        (E2, "2026-11", False): (2_500_000, 1_440_000_000, 192_000),
    }
    assert stale_hours(engine, MODEL) == []
    assert stale_hours(engine, changed) == [E2]  # exactly the hours the change covers
    assert reprice(engine, changed, "c1", [E2]).done == [E2]
    assert stale_hours(engine, changed) == []
    assert green(db_url)[(E2, "2026-11", False)] == (2_500_000, 1_440_000_000, 96_000)
    # the same rows as if the change had been known when the hours were ingested
    assert [[r for r in t if as_utc(r[0]) != E0] for t in tables(db_url)] == tables(reference)

    # back-dated into October, closed since: October's rows stay, November gets corrections
    now = datetime(2026, 11, 21, tzinfo=UTC)
    close_month(engine, "2026-10", "test", now)
    october = energy_model(OCTOBER)  # 300 g x 1.2 = 360 g/kWh from 23:00 on the 31st
    assert stale_hours(engine, october) == [E0, E1, E2]
    assert reprice(engine, october, "c1", [E0, E1, E2]).done == [E0, E1, E2]
    engine.dispose()
    assert green(db_url) == {
        (E0, "2026-10", False): (2_500_000, 1_440_000_000, 192_000),  # frozen
        (E0, "2026-11", True): (0, 0, 144_000 - 192_000),  # the correction: CO2e only
        (E1, "2026-11", False): (1_250_000, 1_314_000_000, 131_400),  # 144 000 x 1314/1440
        (E2, "2026-11", False): (2_500_000, 1_440_000_000, 144_000),
    }
    assert assert_energy_adds_up(db_url) == 3
    assert_every_hour_adds_up(db_url)


def test_measured_power_prices_the_joules_drawn(energy_prom: Prometheus, db_url: str) -> None:
    amortised = {
        "purchase_price": "21900",
        "depreciation_months": 36,
        "kwh_price": "0.25",
        "overhead_factor": "1.2",
        "power_from": "measured",
    }
    measured = parse(
        {
            "versions": [
                {
                    "effective_from": "2026-10-01T00:00:00Z",
                    "prices": [{"model": H100, "idle_watts": "70", "amortised": amortised}],
                }
            ],
            "carbon": [CARBON],
        }
    )
    ingest_with(energy_prom.url, db_url, measured, [E2])
    # capital 21900 / (36 x 730 h) x 1.2 = 1.000000 per hour; the power part from the
    # 1 440 000 000 mJ drawn: 0.4 kWh x 0.25 x 1.2 = 0.120000 (not nameplate watts)
    assert green(db_url) == {(E2, "2026-11", False): (1_120_000, 1_440_000_000, 192_000)}
    engine = create_engine(db_url)
    with engine.connect() as conn:
        g = GpuPresence
        row = conn.execute(select(g.price, g.kwh_price, g.cost, g.energy_mj)).one()
    engine.dispose()
    assert tuple(row) == (1_000_000, 300_000, 1_120_000, 1_440_000_000)


def test_fast_reads_are_raw_reads(energy_prom: Prometheus, three_dbs: tuple[str, str, str]) -> None:
    """The energy hours (counters, a counter reset, the 20-minute gap) give the same rows
    whether steady series are synthesised (costsvc/ingest/gauges/steady.py) or read raw."""
    fast, raw = assert_fast_is_raw(energy_prom.url, three_dbs, MODEL, [([E0, E1, E2], "auto")])
    assert fast.fast > 0 and fast.raw > 0, fast
    assert fast.fast + fast.raw == raw.raw
