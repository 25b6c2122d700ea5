"""A rolling upgrade of our exporter to its integrals, on a real Prometheus, on SQLite and
PostgreSQL (tests/costsvc/test_integral_reads.py reads the other histories): each GPU is read
by its own rule, and the first hour of the integrals after one of the gauges starts at its edge
(nothing billed twice or lost), by hand."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import create_engine, select

from costsvc.db.models import Chargeback, GpuPresence
from costsvc.fleet.usage import gpu_use
from tests.costsvc.conftest import _loaded_prometheus
from tests.costsvc.history import ingest_with, model
from tests.costsvc.history_checks import assert_every_hour_adds_up
from tests.costsvc.integral_history import (
    COUNTERS,
    HOURS,
    T0,
    Node,
    per_gpu,
    pod_money,
    pod_seconds,
    utc,
)
from tests.costsvc.scraped import Families
from tests.prom import Prometheus


def _upgrade() -> str:
    """A rolling upgrade, three nodes from 70 minutes before 14:00: n1's exporter (scraped at
    :17 of every minute) publishes no integrals until it is upgraded at 14:20:17, its GPU held
    by pod p all along; n2's is never upgraded (gauges only), its GPU held by pod o from
    14:10:00 to 16:40:00; n3's publishes them all along, its GPU held by pod i."""
    history = Families()
    n1, n2, n3 = (Node(history, f"n{k}", f"GPU-{x}") for k, x in enumerate("UOI", 1))
    n1.counters = n2.counters = False
    for minute in range(T0 - 4200, T0 + 10800 + 60, 60):
        upgraded = minute + 17 == T0 + 1217
        if upgraded:
            n1.counters = True
        n1.scrape(minute + 17, True, {"p": 1.0}, 0.5, restarted=upgraded)
        n2.scrape(minute, True, {"o": 1.0} if T0 + 600 <= minute < T0 + 9600 else {}, 0.5)
        n3.scrape(minute, True, {"i": 1.0}, 0.5)
    return history.text(counters=COUNTERS)


@pytest.fixture(scope="module")
def upgrade(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    yield from _loaded_prometheus(tmp_path_factory, "upgrade", _upgrade(), T0, False)


def test_an_upgrade_to_the_integrals_loses_and_doubles_nothing_and_each_gpu_has_its_rule(
    upgrade: Prometheus, db_url: str
) -> None:
    hours = [*HOURS, datetime.fromtimestamp(T0 + 7200, UTC)]
    read = ingest_with(upgrade.url, db_url, model(), hours)
    # GPU-U from the gauges in the hour of its upgrade (its counters start in it, from 0), from
    # the integrals after; GPU-O from the gauges throughout; GPU-I from the integrals
    assert read.integral_gpus == 5 and read.gauge_gpus == 4
    assert per_gpu(db_url, GpuPresence.reads) == {
        ("GPU-U", hours[0]): "gauges",
        ("GPU-U", hours[1]): "integrals",
        ("GPU-U", hours[2]): "integrals",
        ("GPU-O", hours[0]): "gauges",
        ("GPU-O", hours[1]): "gauges",
        ("GPU-O", hours[2]): "gauges",
        ("GPU-I", hours[0]): "integrals",
        ("GPU-I", hours[1]): "integrals",
        ("GPU-I", hours[2]): "integrals",
    }
    # p, by hand. 14:00 from the gauges: held all hour (13:59:17's sample holds to 14:00:17),
    # 3600 s, billed through 15:00:00. 15:00 from the integrals, the first hour after the
    # gauges': its share-seconds from 0 at 14:20:17, 60 a collection, are 2340 at 14:59:17 and
    # 2400 at 15:00:17, so 2340 + 60 x 43 / 60 = 2383 at 15:00:00; 5940 at 15:59:17: 3557 s.
    # 16:00: 9540 - 5940 = 3600 s. 14:00:00 to 16:59:17 is 10757 s, none twice (from
    # 14:59:17 instead: 3600 s, and 43 s billed twice). o from the gauges: 14:10 to 15:00,
    # 3000 s; 3600 s; 16:00 to 16:40, 2400 s. i: 3600 s an hour
    shares = pod_seconds(db_url)
    assert shares == {
        ("p", hours[0]): 3600,
        ("p", hours[1]): 3557,
        ("p", hours[2]): 3600,
        ("o", hours[0]): 3000,
        ("o", hours[1]): 3600,
        ("o", hours[2]): 2400,
        ("i", hours[0]): 3600,
        ("i", hours[1]): 3600,
        ("i", hours[2]): 3600,
    }
    assert sum(v for (pod, _), v in shares.items() if pod == "p") == 10757
    # the money, 2.50 an hour: p 2.50 x 3557 / 3600 = 2.470139 (2.4701388…); o 2.083333,
    # 2.500000, 1.666667; the GPU's seconds are p's (GPU-U is held all along): nothing idle on
    # it; GPU-O idle 600 s (0.416667) at 14:00 and 1200 s (0.833333) at 16:00
    money = pod_money(db_url)
    assert money[("p", hours[1])] == Decimal("2.470139")
    assert [money[("o", h)] for h in hours] == [
        Decimal("2.083333"),
        Decimal("2.500000"),
        Decimal("1.666667"),
    ]
    assert all(
        money[(pod, h)] == Decimal("2.500000")
        for pod in "pi"
        for h in hours
        if (pod, h) != ("p", hours[1])
    )
    engine = create_engine(db_url)
    with engine.connect() as conn:
        idle = conn.execute(
            select(Chargeback.node, Chargeback.hour, Chargeback.idle).where(
                Chargeback.team == "__idle__"
            )
        ).all()
    engine.dispose()
    assert {(node, utc(hour)): micro for node, hour, micro in idle if micro} == {
        ("n2", hours[0]): 416_667,
        ("n2", hours[2]): 833_333,
    }
    assert assert_every_hour_adds_up(db_url) == 3
    # the fleet's answer (the fleet page's) says which rule read each GPU's hours: GPU-U's
    # 15:00 and 16:00 (3557 + 3600 s), none of GPU-O's, all of GPU-I's (3 x 3600 s)
    engine = create_engine(db_url)
    with engine.connect() as conn:
        used = gpu_use(conn, hours[0], hours[-1] + timedelta(hours=1))
    engine.dispose()
    assert {g.gpu_uuid: (g.present_us, g.integral_us) for g in used} == {
        "GPU-U": (10757 * 10**6, 7157 * 10**6),
        "GPU-O": (10800 * 10**6, 0),
        "GPU-I": (10800 * 10**6, 10800 * 10**6),
    }
