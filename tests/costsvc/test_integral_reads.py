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
- A history without integrals (the ground truth's) is read from the gauges, row for row.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from sqlalchemy import create_engine, select

from costsvc.db.models import Chargeback, GpuPresence
from costsvc.ingest.integral_deltas import reset_expr
from costsvc.ingest.integrals import share_of
from costsvc.rules.energy import ENERGY
from exporter.integrals import STARTED
from tests.costsvc.conftest import _loaded_prometheus
from tests.costsvc.history import (
    ELEVENTH,
    FIFTEENTH,
    HOUR,
    HOUR2,
    HOUR3,
    MODEL,
    TWELFTH,
    ingest_with,
    model,
)
from tests.costsvc.history_checks import assert_every_hour_adds_up, tables
from tests.costsvc.integral_history import (
    BIG,
    COUNTERS,
    HOURS,
    SHARE_S,
    T0,
    Node,
    per_gpu,
    pod_money,
    pod_seconds,
    utc,
)
from tests.costsvc.scraped import Families
from tests.prom import Prometheus


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
    # one is the gauges', and the next starts at its edge: tests/costsvc/test_integral_upgrade.py)
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
    shares = pod_seconds(integrals)
    assert shares[("d", HOURS[0])] == 3000  # the lost 10 minutes cut out
    assert shares[("e", HOURS[0])] == 1200 and shares[("f", HOURS[0])] == 2400
    assert ("f", HOURS[1]) not in shares and shares[("g", HOURS[1])] == 1800


def test_off_the_minute_an_hour_ends_at_its_last_scrape(
    off_the_minute: Prometheus, db_url: str
) -> None:
    read = ingest_with(off_the_minute.url, db_url, model(), HOURS)
    assert read.integral_hours == 2
    money = pod_money(db_url)
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
    assert per_gpu(db_url, GpuPresence.energy_mj) == {
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
    shares = pod_seconds(db_url)
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
    assert pod_money(db_url) == {
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
        fleet[utc(hour)] = fleet.get(utc(hour), Decimal(0)) + round(
            Decimal("2.50") * us / 3600 / 10**6, 6
        )
    total: dict[datetime, Decimal] = {}
    for hour, micro in charged:
        total[utc(hour)] = total.get(utc(hour), Decimal(0)) + Decimal(micro) / 10**6
    assert total == fleet
    # GPU-Q's 16:00: 7560 s present, GPU-U's 3600 s: 5.250000 + 2.500000
    assert fleet[hours[2]] == Decimal("7.750000")


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
