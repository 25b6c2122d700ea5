"""An hour read from our exporter's integrals (costsvc/ingest/integrals.py), where the data
decides it (costsvc/ingest/collect.py), on a real Prometheus, on SQLite and PostgreSQL.

The histories carry what our exporter publishes — gauges and, collected at every scrape, their
integrals by the exporter's rule (exporter/integrals.py: an instant's reading holds until the
next collection, an ended series stays at its final total for 600 s, a restart starts again at
0) — in the form Prometheus stores scraped data.

- Scraped on the minute, with holders that come and go, a lost GPU, utilisation changing at
  every scrape and time-sliced holders, the integrals bill what the gauges bill: every row of
  every money and fact table is the same.
- Scraped off the minute, an hour ends at its last scrape: the worked example of
  docs/cost-model.md ("The hour read from the exporter's integrals"), figures derived by hand;
  an exporter restart loses the minute it did not see, and the hours on either side still add
  up.
- A scrape gap: what the exporter saw through it is billed after it, money and all.
- A rolling upgrade: each GPU by its own rule, and the first hour of the integrals after one of
  the gauges starts at its edge (nothing billed twice or lost), by hand.
- A history without integrals (the ground truth's) is read from the gauges, row for row.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from costsvc.db.models import Chargeback, GpuPresence, UsageFact
from costsvc.fleet.usage import gpu_use
from costsvc.ingest.integral_deltas import reset_expr
from costsvc.ingest.integrals import share_of
from costsvc.rules.energy import ENERGY
from exporter.integrals import KEEP, SHARE_LABEL, STARTED
from exporter.render.exposition import format_value
from tests.costsvc.conftest import _loaded_prometheus
from tests.costsvc.history import (
    ELEVENTH,
    FIFTEENTH,
    H100,
    HOUR,
    HOUR2,
    HOUR3,
    MODEL,
    TWELFTH,
    ingest_with,
    model,
)
from tests.costsvc.history_checks import assert_every_hour_adds_up, tables
from tests.costsvc.scraped import Families, exporter_gpu
from tests.prom import Prometheus

T0 = int(datetime(2026, 11, 20, 14, tzinfo=UTC).timestamp())  # an hour the cost model prices
HOURS = [datetime.fromtimestamp(T0 + 3600 * h, UTC) for h in range(2)]
BIG = 3 * 2**40  # mJ: an energy counter since boot of a GPU up for weeks (exact in a float64)
SHARE_S = "gpu_allocation_share_seconds_total"
UNMEASURED_S = "gpu_allocation_unmeasured_share_seconds_total"
MEASURED_S = "gpu_allocation_measured_share_seconds_total"  # (an exporter's before started)
COUNTERS = frozenset(
    {
        "gpu_device_seconds_total",
        SHARE_S,
        "gpu_allocation_memory_share_seconds_total",
        "gpu_allocation_busy_share_seconds_total",
        UNMEASURED_S,
        MEASURED_S,
        "gpu_container_sm_seconds_total",
    }
)


class Node:
    """One node's exporter, collected at each scrape: its gauges, and its integrals."""

    def __init__(self, history: Families, name: str, uuid: str, started: bool = True) -> None:
        self.history, self.name, self.uuid = history, name, uuid
        self.started = started  # its series tell their start (exporters before: not)
        self.counters = True  # it publishes its integrals (exporters before them: not)
        self.since: dict[tuple[str, str], int] = {}  # when each total started at 0
        self.totals: dict[tuple[str, str], float] = {}
        self.seen: dict[tuple[str, str], int] = {}
        self.ahead: dict[tuple[str, str], float] = {}
        self.last: int | None = None

    def labels(self, extra: str = "") -> str:
        return exporter_gpu(self.uuid, self.name, H100, extra)

    def scrape(
        self,
        t: int,
        up: bool,
        holders: dict[str, float],
        util: float | None,
        sm: dict[str, float] | None = None,
        restarted: bool = False,
        scraped: bool = True,
        energy: int | None = None,
    ) -> None:
        """A scrape at ``t`` of a collection at ``t``: the GPU ``up``, held by ``holders``
        (pod -> share) at ``util`` (0..1), the pods' SM use ``sm`` since the last one. Not
        ``scraped``: the collection happens, the scrape fails (``up`` 0, nothing else).
        ``energy``: the GPU's energy counter (mJ), read at the collection."""
        target = f'job="gpu-exporter",instance="{self.name}:9400"'
        self.history.add("up", target, 1 if scraped else 0, t)
        add = self.history.add if scraped else lambda *_: None
        if restarted:  # a new exporter process: every total from 0
            self.totals, self.seen, self.ahead, self.last, self.since = {}, {}, {}, None, {}
        held = 60 if self.last is not None else 0  # every collection 60 s after the last
        for key, rate in self.ahead.items():
            self.totals[key] += rate * held
        ahead: dict[tuple[str, str], float] = {}
        add("gpu_device_up", self.labels(), 1 if up else 0, t)
        if energy is not None:
            add(ENERGY, self.labels(',DCGM_FI_DRIVER_VERSION="580.95"'), energy, t)
        ahead[("gpu_device_seconds_total", self.labels(',state="up"'))] = 1.0 if up else 0.0
        ahead[("gpu_device_seconds_total", self.labels(',state="down"'))] = 0.0 if up else 1.0
        if up and util is not None:
            add("DCGM_FI_DEV_GPU_UTIL", self.labels(), round(util * 100), t)
        for pod, share in holders.items():
            lab = self.labels(f',namespace="ml",pod="{pod}",container="main",resource="r"')
            add("gpu_allocation_share", lab, share, t)
            add("gpu_allocation_memory_share", lab, share, t)
            on = share if up else 0.0
            measured = on if up and util is not None else 0.0
            ahead[("gpu_allocation_memory_share_seconds_total", lab)] = on
            if self.started:  # the share in the labels; the unmeasured part from its first
                ahead[(SHARE_S, f'{lab},{SHARE_LABEL}="{format_value(share)}"')] = on
                if on - measured or (UNMEASURED_S, lab) in self.totals:
                    ahead[(UNMEASURED_S, lab)] = on - measured
            else:  # an exporter before: the measured part, and the share only in the gauge
                ahead[(SHARE_S, lab)] = on
                ahead[(MEASURED_S, lab)] = measured
            busy = measured * round(util * 100) / 100 if util is not None else 0.0
            ahead[("gpu_allocation_busy_share_seconds_total", lab)] = busy
        for pod, used in (sm or {}).items():
            lab = self.labels(f',namespace="ml",pod="{pod}",container="main"')
            add("gpu_container_sm_utilization_ratio", lab, used, t)
            key = ("gpu_container_sm_seconds_total", lab)
            self.totals[key] = self.totals.get(key, 0.0) + used * held
            self.seen[key] = t
        for key in ahead:
            self.totals.setdefault(key, 0.0)
            self.seen[key] = t
        for key in [k for k, at in self.seen.items() if t - at > KEEP]:
            del self.totals[key], self.seen[key]
            self.since.pop(key, None)
        for (name, lab), total in self.totals.items() if self.counters else ():
            since = self.since.setdefault((name, lab), t)
            start = f'{lab},{STARTED}="{since}.000"'
            add(name, start if self.started else lab, repr(total), t)
        self.ahead, self.last = ahead, t


def _on_the_minute(started: bool, gauges_only: bool = False) -> str:
    """Two hours and 10 minutes before, five nodes scraped on the minute: a GPU held whole
    by pod a, its utilisation changing at every scrape; a GPU time-sliced (4 replicas) by b
    (two) and c, their SM use steady; a GPU lost for 10 minutes while d holds it; a GPU held
    by e from 14:25 to 14:45, by f until 15:00 exactly, by g from 15:30 on; a GPU held by m, its
    utilisation not read from 14:10 to 14:30 and after 15:40. ``started``: as
    :func:`_off_the_minute`."""
    rng = random.Random(29)
    history = Families()
    nodes = [Node(history, f"n{i}", f"GPU-{x}", started) for i, x in enumerate("ATLSM", 1)]
    for t in range(T0 - 600, T0 + 7200 + 60, 60):
        nodes[0].scrape(t, True, {"a": 1.0}, rng.randrange(101) / 100)
        nodes[1].scrape(t, True, {"b": 0.5, "c": 0.25}, 0.4, {"b": 0.3, "c": 0.05})
        lost = T0 + 1200 <= t < T0 + 1800
        nodes[2].scrape(t, not lost, {"d": 1.0}, rng.randrange(101) / 100)
        holders = {}
        if T0 + 1500 <= t < T0 + 2700:
            holders["e"] = 1.0
        elif t < T0 + 3600 and not T0 + 1500 <= t < T0 + 2700:
            holders["f"] = 1.0
        if t >= T0 + 5400:
            holders["g"] = 1.0
        nodes[3].scrape(t, True, holders, 0.5)
        unread = T0 + 600 <= t < T0 + 1800 or t >= T0 + 6000
        nodes[4].scrape(t, True, {"m": 1.0}, None if unread else rng.randrange(101) / 100)
    return history.text(counters=COUNTERS, gauges_only=gauges_only)


def _off_the_minute(started: bool) -> str:
    """The worked example: a target scraped at :17 of every minute; pod p holds its GPU from
    14:30:00 to 15:30:00 (seen by the collections from 14:30:17 to 15:29:17). A node whose
    exporter restarts at 14:20: its GPU held all along by pod r. And a node that joins at 15:20,
    its GPU's energy counter since its driver loaded days before (500 W). ``started``: the
    series tell their start (else as exporters before: a restart's totals are the same series,
    reset)."""
    history = Families()
    n1 = Node(history, "n1", "GPU-P", started)
    n2 = Node(history, "n2", "GPU-R", started)
    n3 = Node(history, "n3", "GPU-N", started)
    # (from 70 minutes before: the counters cover 14:00, which is not their first hour — that
    # one is the gauges', and the next starts at its edge: test_an_upgrade_to_the_integrals...)
    for minute in range(T0 - 4200, T0 + 7200 + 60, 60):
        t = minute + 17
        drawn = BIG + 300 * 1000 * (t - T0)  # 300 W: 300,000 mJ a second
        n1.scrape(t, True, {"p": 1.0} if T0 + 1800 <= t < T0 + 5400 else {}, 0.5, energy=drawn)
        # the driver reloads with the exporter at 14:20: the counter from 0, 400 W
        drawn = 400 * 1000 * (minute - T0 - 1200) if minute >= T0 + 1200 else BIG
        n2.scrape(minute, True, {"r": 1.0}, 0.5, restarted=minute == T0 + 1200, energy=drawn)
        if minute >= T0 + 4800:
            n3.scrape(minute, True, {}, 0.5, energy=BIG + 500 * 1000 * (minute - T0))
    return history.text(counters=COUNTERS | {ENERGY})


def _silent() -> str:
    """Three hours (and 10 minutes before) of a node whose scrapes fail from 14:55 to 16:05
    while its exporter goes on: pod s holds its GPU all along. And a node scraped all along
    whose GPU pod u holds from before 14:00 to 14:10 and, the same pod again (a StatefulSet's),
    from 16:20 to 16:50: its exporter dropped u's series 10 minutes after 14:10, so they
    start again from 0."""
    history = Families()
    node = Node(history, "n1", "GPU-Q")
    other = Node(history, "n2", "GPU-U")
    for t in range(T0 - 600, T0 + 10800 + 60, 60):
        node.scrape(t, True, {"s": 1.0}, 0.5, scraped=not T0 + 3300 <= t < T0 + 7500)
        back = T0 + 8400 <= t < T0 + 10200
        other.scrape(t, True, {"u": 1.0} if t < T0 + 600 or back else {}, 0.5)
    return history.text(counters=COUNTERS)


def _both_forms(
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
    name: str,
    history: Callable[[bool], str],
) -> Iterator[Prometheus]:
    """``history`` in the form ``request.param`` says (True: the series tell their start and
    share; False: as an exporter before), loaded."""
    started = request.param
    name = name if started else f"{name}-unstarted"
    yield from _loaded_prometheus(tmp_path_factory, name, history(started), T0, False)


FORMS = {"params": [True, False], "ids": ["started", "before-started"]}


@pytest.fixture(scope="module", **FORMS)
def on_the_minute(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Prometheus]:
    yield from _both_forms(tmp_path_factory, request, "integrals", _on_the_minute)


@pytest.fixture(scope="module")
def on_the_minute_gauges(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """The same history as an exporter before its integrals publishes it: the gauges only."""
    history = _on_the_minute(True, gauges_only=True)
    yield from _loaded_prometheus(tmp_path_factory, "gauges", history, T0, False)


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


@pytest.fixture(scope="module")
def silent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    yield from _loaded_prometheus(tmp_path_factory, "silent", _silent(), T0, False)


@pytest.fixture(scope="module", **FORMS)
def off_the_minute(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Prometheus]:
    yield from _both_forms(tmp_path_factory, request, "offset", _off_the_minute)


def test_on_the_minute_the_integrals_bill_what_the_gauges_bill(
    on_the_minute: Prometheus, on_the_minute_gauges: Prometheus, three_dbs: tuple[str, str, str]
) -> None:
    gauges, integrals, hourly = three_dbs
    read = ingest_with(on_the_minute_gauges.url, gauges, model(), HOURS)
    assert read.integral_hours == read.integral_gpus == 0 and read.gauge_gpus == 2 * 5
    read = ingest_with(on_the_minute.url, integrals, model(), HOURS)
    assert read.integral_hours == 2 and read.fast == read.raw == 0  # no gauge read
    assert read.integral_gpus == 2 * 5 and read.gauge_gpus == 0
    for hour in HOURS:  # hour by hour: each hour's block alone
        read = ingest_with(on_the_minute.url, hourly, model(), [hour])
        assert read.integral_hours == 1
    expected = tables(gauges)
    assert all(expected), expected
    assert tables(integrals) == expected
    assert tables(hourly) == expected
    shares = _shares(integrals)
    assert shares[("d", HOURS[0])] == 3000  # the lost 10 minutes cut out
    assert shares[("e", HOURS[0])] == 1200 and shares[("f", HOURS[0])] == 2400
    assert ("f", HOURS[1]) not in shares and shares[("g", HOURS[1])] == 1800


def _shares(url: str) -> dict[tuple[str, datetime], int]:
    """Each pod's GPU-seconds held, per hour."""
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(UsageFact.pod, UsageFact.hour, UsageFact.share_us)).all()
    engine.dispose()
    return {(pod, _utc(hour)): share // 10**6 for pod, hour, share in rows}


def _utc(hour: datetime) -> datetime:
    return hour.replace(tzinfo=UTC) if hour.tzinfo is None else hour.astimezone(UTC)


def test_off_the_minute_an_hour_ends_at_its_last_scrape(
    off_the_minute: Prometheus, db_url: str
) -> None:
    read = ingest_with(off_the_minute.url, db_url, model(), HOURS)
    assert read.integral_hours == 2
    money = _money(db_url)
    # p: first collected 14:30:17, last 15:29:17 (its share then held to 15:30:17): the scrape
    # at 14:59:17 reads 29 minutes held, 1740 s (2.50 x 1740 / 3600); the last before 16:00,
    # 15:39:17 (kept 600 s after 15:29:17), reads 3600: 1860 s in the second hour
    assert money[("p", HOURS[0])] == Decimal("1.208333")
    assert money[("p", HOURS[1])] == Decimal("1.291667")
    # r: the exporter restarted at 14:20: the minute before (14:19-14:20) was held by a
    # collection whose total no scrape saw; the rest of both hours is billed
    assert money[("r", HOURS[0])] == Decimal("2.458333")  # 3540 s
    assert money[("r", HOURS[1])] == Decimal("2.500000")
    assert assert_every_hour_adds_up(db_url) == 2
    # energy: what each counter grew between the same scrapes as the GPU's seconds — 300 W x
    # 3600 s; across the restart (a reset: the samples read) 0 before it (BIG all along), then
    # 400 W from 14:20 to 15:00 (2400 s); the node that joined, from its first sample, 15:20,
    # to 16:00 (2400 s at 500 W), not its counter's BIG since the driver loaded
    assert _per_gpu(db_url, GpuPresence.energy_mj) == {
        ("GPU-P", HOURS[0]): 300 * 3600 * 1000,
        ("GPU-P", HOURS[1]): 300 * 3600 * 1000,
        ("GPU-R", HOURS[0]): 400 * 2400 * 1000,
        ("GPU-R", HOURS[1]): 400 * 3600 * 1000,
        ("GPU-N", HOURS[1]): 500 * 2400 * 1000,
    }


def test_what_the_exporter_saw_through_a_scrape_gap_is_billed_after_it_and_a_series_back_from_0(
    silent: Prometheus, db_url: str
) -> None:
    hours = [*HOURS, datetime.fromtimestamp(T0 + 7200, UTC)]
    read = ingest_with(silent.url, db_url, model(), hours)
    assert read.integral_hours == 3
    shares = _shares(db_url)
    # s: 14:00: up to its last scrape before the gap, 14:54: 3240 s; 15:00: none; 16:00: from
    # 14:54 to its last scrape of the hour, 17:00, the gap's 70 minutes in it: 7560 s (its
    # last value before the hour, 14:54's, found over a month). u: 14:00 to 14:10, 600 s; at
    # 16:00 its total from 0 (not less the 1200 s it had reached at 14:10: its target was
    # scraped in the hour before without it), 1800 s
    assert shares == {
        ("s", hours[0]): 3240,
        ("s", hours[2]): 7560,
        ("u", hours[0]): 600,
        ("u", hours[2]): 1800,
    }
    assert assert_every_hour_adds_up(db_url) == 3
    # the money follows the GPU-seconds, the gap's beyond the hour included (docs/cost-model.md,
    # the worked example): s at 2.50 an hour, 14:00 2.50 x 3240 / 3600 = 2.250000, 16:00
    # 2.50 x 7560 / 3600 = 5.250000 (not the hour's 2.500000, the rest billed to nobody); u
    # 2.50 x 600 / 3600 = 0.416667 and 2.50 x 1800 / 3600 = 1.250000
    assert _money(db_url) == {
        ("s", hours[0]): Decimal("2.250000"),
        ("s", hours[2]): Decimal("5.250000"),
        ("u", hours[0]): Decimal("0.416667"),
        ("u", hours[2]): Decimal("1.250000"),
    }
    # every hour: Σ attributed + idle = Σ price x GPU-hours present, each GPU rounded once
    engine = create_engine(db_url)
    with engine.connect() as conn:
        present = conn.execute(
            select(GpuPresence.hour, GpuPresence.gpu_uuid, GpuPresence.present_us)
        ).all()
        charged = conn.execute(
            select(Chargeback.hour, Chargeback.allocated + Chargeback.idle)
        ).all()
    engine.dispose()
    fleet: dict[datetime, Decimal] = {}
    for hour, _, us in present:
        fleet[_utc(hour)] = fleet.get(_utc(hour), Decimal(0)) + round(
            Decimal("2.50") * us / 3600 / 10**6, 6
        )
    total: dict[datetime, Decimal] = {}
    for hour, micro in charged:
        total[_utc(hour)] = total.get(_utc(hour), Decimal(0)) + Decimal(micro) / 10**6
    assert total == fleet
    # GPU-Q's 16:00: 7560 s present, GPU-U's 3600 s: 5.250000 + 2.500000
    assert fleet[hours[2]] == Decimal("7.750000")


def _per_gpu(url: str, column: Any) -> dict[tuple[str, datetime], Any]:
    """Each GPU's ``column`` of gpu_hours, per hour."""
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(GpuPresence.gpu_uuid, GpuPresence.hour, column)).all()
    engine.dispose()
    return {(uuid, _utc(hour)): value for uuid, hour, value in rows}


def _money(url: str) -> dict[tuple[str, datetime], Decimal]:
    """Each pod's allocated money, per hour."""
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(Chargeback.pod, Chargeback.hour, Chargeback.allocated)).all()
    engine.dispose()
    return {(pod, _utc(hour)): Decimal(allocated) / 10**6 for pod, hour, allocated in rows if pod}


def test_an_upgrade_to_the_integrals_loses_and_doubles_nothing_and_each_gpu_has_its_rule(
    upgrade: Prometheus, db_url: str
) -> None:
    hours = [*HOURS, datetime.fromtimestamp(T0 + 7200, UTC)]
    read = ingest_with(upgrade.url, db_url, model(), hours)
    # GPU-U from the gauges in the hour of its upgrade (its counters start in it, from 0), from
    # the integrals after; GPU-O from the gauges throughout; GPU-I from the integrals
    assert read.integral_gpus == 5 and read.gauge_gpus == 4
    assert _per_gpu(db_url, GpuPresence.reads) == {
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
    shares = _shares(db_url)
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
    money = _money(db_url)
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
    assert {(node, _utc(hour)): micro for node, hour, micro in idle if micro} == {
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


def test_a_history_without_integrals_is_read_from_the_gauges(
    prometheus: Prometheus, three_dbs: tuple[str, str, str]
) -> None:
    """The ground truth's hours (tests/costsvc/history.py: gauges only, as dcgm-exporter and
    exporters before the integrals publish) bill the same with integrals asked for."""
    gauges, integrals, _ = three_dbs
    hours = [HOUR, HOUR2, HOUR3, ELEVENTH, TWELFTH, FIFTEENTH]
    ingest_with(prometheus.url, gauges, MODEL, hours)
    read = ingest_with(prometheus.url, integrals, MODEL, hours)
    assert read.integral_hours == 0 and read.fast > 0
    expected = tables(gauges)
    assert all(expected), expected
    assert tables(integrals) == expected


def test_a_series_that_tells_its_start_is_never_read_for_its_resets(
    off_the_minute: Prometheus,
) -> None:
    """The hour's resets read (costsvc/ingest/integral_deltas.py ``reset_expr``) of the holdings'
    share-seconds, over the first hour (n2's exporter restarts at 14:20): where the series tell
    their start, Prometheus reads none of their samples for it and finds no reset (the restart
    made new series); an exporter's before it, every sample of the hour, and the reset."""
    started = bool(off_the_minute.label_values(STARTED))
    answer = off_the_minute.get(
        "/api/v1/query", query=reset_expr(SHARE_S), time=str(T0 + 3600), stats="all"
    )
    read = answer["data"]["stats"]["samples"]["totalQueryableSamples"]
    reset = {s["metric"]["pod"] for s in answer["data"]["result"]}
    lives = off_the_minute.get(
        "/api/v1/query", query=f'last_over_time({SHARE_S}{{pod="r"}}[3600s])', time=str(T0 + 3600)
    )
    if started:
        assert (read, reset) == (0, set())
        assert len(lives["data"]["result"]) == 2  # r's series before the restart, and after
    else:
        assert read > 65 and reset == {"r"}  # (r's alone: a sample a minute, 65 minutes)
        assert len(lives["data"]["result"]) == 1


@pytest.mark.parametrize(
    ("text", "share"),
    [
        ("1", Decimal(1)),
        ("0.25", Decimal("0.25")),
        ("0.3333333333333333", Decimal("0.3333333333333333")),
        ("abc", None),
        ("", None),
        ("NaN", None),
        ("Infinity", None),
        ("-1", None),
        ("1e999999999", None),
        ("1.5", None),
        ("1" * 33, None),
        ("0.5\x00", None),
    ],
)
def test_a_share_label_that_is_not_a_share_is_none(text: str, share: Decimal | None) -> None:
    """A label is untrusted text: a share-seconds series whose ``share`` is not a share is read
    as an exporter's before the label (its largest share from the gauge), never an error."""
    assert share_of({"share": text}) == share
    assert share_of({}) is None


def test_the_cost_service_reads_the_names_the_exporter_publishes() -> None:
    """The two meet only through Prometheus, each naming the labels and families itself: the
    names must be the same (a rename on one side alone would read every hour as an exporter's
    before the labels, or not at all)."""
    from costsvc.ingest import integral_deltas as reads
    from exporter import catalogue as cat
    from exporter import integrals as published

    assert (reads.STARTED, reads.SHARE_LABEL) == (published.STARTED, published.SHARE_LABEL)
    ours = {s.name for s in cat.INTEGRALS}
    assert set(reads.FROM_ZERO) - {reads.MEASURED} == ours
    assert reads.UNMEASURED in cat.SPARSE_INTEGRALS
