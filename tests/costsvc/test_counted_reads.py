"""The energy counter read as its edge values (costsvc/ingest/gauges/counted.py ``Counter``): the
same
increase, and the same rows in every money, energy and fact table, as from its samples, on a
history made to test the edges — scrapes off the hour and exactly on it, one 1 ms before the
hour, a reset, missed scrapes, a NaN, a driver upgrade (two series of one GPU), a GPU that
appears mid-hour, counters past 2^40 mJ — on SQLite and PostgreSQL, on a real Prometheus."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from costsvc.ingest.gauges import counted
from costsvc.ingest.gauges.power import counter_readings
from costsvc.ingest.hour import MAX_GAP, SCRAPE_GAP
from costsvc.ingest.prom import PrometheusReader
from costsvc.ingest.reader import RunReader
from costsvc.rules.energy import ENERGY
from tests.costsvc.conftest import _loaded_prometheus
from tests.costsvc.history import H100, assert_fast_is_raw, model, unreachable_after_ingest
from tests.costsvc.scraped import Families, exporter_gpu
from tests.prom import Prometheus

T0 = int(datetime(2026, 11, 20, 14, tzinfo=UTC).timestamp())  # an hour the cost model prices
HOURS = [datetime.fromtimestamp(T0 + 3600 * h, UTC) for h in range(2)]
# node -> (its GPU, the scrape offset in s within each minute, what happens to its counter)
NODES = {
    "n1": ("GPU-A", 17, "regular"),
    "n2": ("GPU-C", 0, "regular, a scrape exactly at each hour edge"),
    "n3": ("GPU-M", 59.999, "a scrape 1 ms before each hour: the samples tell"),
    "n4": ("GPU-R", 5, "the driver reloads 20 minutes into the first hour: a reset"),
    "n5": ("GPU-G", 29, "three scrapes missed in the second hour: a gap"),
    "n6": ("GPU-N", 11, "one NaN in the second hour"),
    "n7": ("GPU-U", 23, "the driver upgraded 30 minutes into the first hour: two series"),
    "n8": ("GPU-S", 47, "appears 25 minutes into the first hour"),
}
BIG = 3 * 2**40  # mJ: a counter since boot of a GPU up for weeks (exact in a float64)


def _history() -> str:
    """Two hours (and 10 minutes of look-back) of eight nodes, each its own exporter target
    scraped every 60 s (:data:`NODES`), written as Prometheus stores scraped data: ``up`` at
    each scrape's timestamp (0 where the scrape failed), the series' samples at the same. Each
    GPU is held whole by one pod; its energy counter rises by 300-700 W x 60 s a scrape."""
    rng = random.Random(29)
    history = Families()
    add = history.add

    def gpu(uuid: str, node: str, extra: str = "") -> str:
        return exporter_gpu(uuid, node, H100, extra)

    start, end = T0 - 600, T0 + 7200 + 120
    for node, (uuid, offset, _) in NODES.items():
        energy = BIG + rng.randrange(10**9)
        for minute in range(start, end, 60):
            t = minute + offset
            missed = node == "n5" and T0 + 4000 <= t < T0 + 4180
            add("up", f'job="gpu-exporter",instance="{node}:9400"', 0 if missed else 1, t)
            if missed or (node == "n8" and t < T0 + 1500):
                continue
            energy += rng.randrange(300, 701) * 60_000
            if node == "n4" and minute == T0 + 1200:
                energy = rng.randrange(60_000)  # the counter restarts
            add("gpu_device_up", gpu(uuid, node), 1, t)
            holder = f',namespace="{uuid[-1].lower()}",pod="p",container="main"'
            add("gpu_allocation_share", gpu(uuid, node, holder), 1, t)
            value: object = energy
            if node == "n6" and minute == T0 + 5400:
                value = "NaN"
            driver = ',DCGM_FI_DRIVER_VERSION="580.95"'
            if node == "n7" and t >= T0 + 1800:
                driver = ',DCGM_FI_DRIVER_VERSION="580.105"'
            add(ENERGY, gpu(uuid, node, driver), value, t)
    return history.text(counters=frozenset({ENERGY}))


@pytest.fixture(scope="module")
def counted_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    yield from _loaded_prometheus(tmp_path_factory, "counted", _history(), T0, scraped=False)


def test_edge_values_give_the_increase_samples_give(counted_prometheus: Prometheus) -> None:
    reader = PrometheusReader(counted_prometheus.url)
    by_edges: set[str] = set()
    try:
        with RunReader(reader) as reads:
            reads.plan(HOURS)
            for hour in HOURS:
                at = hour + timedelta(hours=1) - timedelta(microseconds=1)
                t0, t1 = Decimal(int(hour.timestamp())), Decimal(int(hour.timestamp()) + 3600)
                fast = reads.read(ENERGY, at, 3900)
                raw = reader.raw(ENERGY, at, 3900)
                assert [s.labels for s in fast] == [s.labels for s in raw]
                limits = (t0, t1, lambda _: "c1", SCRAPE_GAP, MAX_GAP)
                found = counter_readings(fast, *limits)  # first: before anything iterates
                for s in fast:
                    if isinstance(s.samples, counted.Counter) and s.samples._samples is None:
                        by_edges.add(f"{s.labels['UUID']} {hour:%H}")
                assert found == counter_readings(raw, *limits)
                assert set(found) == {("c1", uuid) for uuid, _, _ in NODES.values()}
                assert fast == raw  # iterated, a counter's samples are its raw samples
    finally:
        reader.close()
    # the regular counters in both hours; GPU-G before its gap, GPU-N before its NaN, GPU-R
    # after its reset, GPU-U after its upgrade, GPU-S once there all hour; never GPU-M
    assert by_edges == {
        "GPU-A 14",
        "GPU-A 15",
        "GPU-C 14",
        "GPU-C 15",
        "GPU-G 14",
        "GPU-N 14",
        "GPU-R 15",
        "GPU-S 15",
        "GPU-U 15",
    }, by_edges


def test_counters_read_as_edges_give_the_rows_samples_give(
    counted_prometheus: Prometheus, three_dbs: tuple[str, str, str]
) -> None:
    fast, raw = assert_fast_is_raw(counted_prometheus.url, three_dbs, model(), [(HOURS, "auto")])
    assert fast.fast + fast.raw == raw.raw  # the same series, whichever way they were read
    assert fast.summed >= 7 and fast.loaded >= 1, fast  # (the edges served, some loaded)


def test_counters_read_as_edges_are_freed_with_the_hour(
    counted_prometheus: Prometheus, tmp_path: Path
) -> None:
    assert unreachable_after_ingest(counted_prometheus.url, tmp_path, HOURS, counted.Counter) == 0
