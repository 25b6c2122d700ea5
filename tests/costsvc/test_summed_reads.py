"""Series whose values change at every scrape (utilisation, SM time) read as sums
(costsvc/ingest/gauges/regular.py ``Regular``, costsvc/ingest/gauges/holding_hour.py
``GaugeHour.integral``): the
same rows in every money and fact table as from their samples, on a history made to test the
edges — random values at every scrape, scrapes off the hour and on it, a holder arriving
mid-hour, a value above 100 %, a scrape 3 ms late, a NaN — on SQLite and PostgreSQL; and
the integral from sums against the integral from samples, on random series."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from costsvc.ingest.gauges import regular, steady
from costsvc.ingest.gauges.exporter import _figures
from costsvc.ingest.gauges.holding_hour import GaugeHour
from costsvc.ingest.gauges.sampled import interval, max_gap_for, pieces, total
from costsvc.ingest.hour import MAX_GAP, SCRAPE_GAP
from tests.costsvc.conftest import _loaded_prometheus
from tests.costsvc.history import H100, assert_fast_is_raw, model, unreachable_after_ingest
from tests.costsvc.scraped import Families, exporter_gpu
from tests.prom import Prometheus

T0 = int(datetime(2026, 11, 20, 8, tzinfo=UTC).timestamp())  # an hour the cost model prices
HOURS = [datetime.fromtimestamp(T0 + 3600 * h, UTC) for h in range(2)]


def _history() -> str:
    """Two hours (and 10 minutes of look-back) of four nodes, each its own exporter target,
    scraped every 60 s, written as Prometheus stores scraped data (``up`` at each scrape's
    timestamp, the series' samples at the same):

    n1 (scrapes at :17 s) GPU-A whole, a/a all hours; GPU-B time-sliced x 3: b/b1, b/b2 all
       hours, b/b3 from 20 minutes into the first hour; utilisation (integer %) and every
       container's SM time (4 decimals) random at every scrape
    n2 (scrapes on the minute: one at each hour edge) GPU-C MIG 3g.40gb held by c/c,
       DCGM_FI_PROF_GR_ENGINE_ACTIVE random (3 decimals); GPU-D whole, d/d, utilisation
       random but 117 % once (capped sample by sample: read raw)
    n3 (scrapes at :41 s, one of them 3 ms late: not evenly spaced, read raw) GPU-E whole, e/e
    n4 (scrapes at :05 s) GPU-F whole, f/f, utilisation NaN at one look-back scrape
    """
    rng = random.Random(29)
    history = Families()
    add = history.add

    def gpu(uuid: str, node: str, extra: str = "") -> str:
        return exporter_gpu(uuid, node, H100, extra)

    start, end = T0 - 600, T0 + 7200 + 120
    for node, offset in (("n1", 17), ("n2", 0), ("n3", 41), ("n4", 5)):
        for k, t0 in enumerate(range(start + offset, end, 60)):
            t = t0 + (0.003 if node == "n3" and k == 40 else 0)
            add("up", f'job="gpu-exporter",instance="{node}:9400"', 1, t)
            if node == "n1":
                add("gpu_device_up", gpu("GPU-A", node), 1, t)
                add("DCGM_FI_DEV_GPU_UTIL", gpu("GPU-A", node), rng.randrange(101), t)
                holder = ',namespace="a",pod="a",container="main"'
                add("gpu_allocation_share", gpu("GPU-A", node, holder), 1, t)
                add(
                    "gpu_container_sm_utilization_ratio",
                    gpu("GPU-A", node, holder),
                    round(rng.random(), 4),
                    t,
                )
                add("gpu_device_up", gpu("GPU-B", node), 1, t)
                add("DCGM_FI_DEV_GPU_UTIL", gpu("GPU-B", node), rng.randrange(101), t)
                for pod in ("b1", "b2", "b3"):
                    if pod == "b3" and t < T0 + 1200:
                        continue
                    holder = f',namespace="b",pod="{pod}",container="main"'
                    add("gpu_allocation_share", gpu("GPU-B", node, holder), 1 / 3, t)
                    add(
                        "gpu_container_sm_utilization_ratio",
                        gpu("GPU-B", node, holder),
                        round(rng.random() / 3, 4),
                        t,
                    )
            elif node == "n2":
                mig = ',GPU_I_ID="1",GPU_I_PROFILE="3g.40gb"'
                add("gpu_device_up", gpu("GPU-C", node), 1, t)
                add(
                    "gpu_mig_instance_info",
                    gpu("GPU-C", node, mig + ',compute_slices="3",memory_slices="4"'),
                    1,
                    t,
                )
                add(
                    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                    gpu("GPU-C", node, mig),
                    round(rng.random(), 3),
                    t,
                )
                holder = mig + ',namespace="c",pod="c",container="main"'
                add("gpu_allocation_share", gpu("GPU-C", node, holder), 3 / 7, t)
                add("gpu_device_up", gpu("GPU-D", node), 1, t)
                add(
                    "DCGM_FI_DEV_GPU_UTIL",
                    gpu("GPU-D", node),
                    117 if k == 50 else rng.randrange(101),
                    t,
                )
                holder = ',namespace="d",pod="d",container="main"'
                add("gpu_allocation_share", gpu("GPU-D", node, holder), 1, t)
            else:
                uuid = "GPU-E" if node == "n3" else "GPU-F"
                nan = node == "n4" and t0 == T0 - 115  # the look-back of the first hour
                add("gpu_device_up", gpu(uuid, node), 1, t)
                add(
                    "DCGM_FI_DEV_GPU_UTIL", gpu(uuid, node), "NaN" if nan else rng.randrange(101), t
                )
                holder = f',namespace="{uuid[-1].lower()}",pod="p",container="main"'
                add("gpu_allocation_share", gpu(uuid, node, holder), 1, t)
    return history.text()


@pytest.fixture(scope="module")
def summed_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    yield from _loaded_prometheus(tmp_path_factory, "summed", _history(), T0, scraped=False)


def test_sums_give_the_rows_samples_give(
    summed_prometheus: Prometheus, three_dbs: tuple[str, str, str]
) -> None:
    fast, raw = assert_fast_is_raw(summed_prometheus.url, three_dbs, model(), [(HOURS, "auto")])
    assert fast.fast + fast.raw == raw.raw  # the same series, whichever way they were read
    # utilisation of A, B, C (and D's, E's, F's: read as sums, then raw where they must
    # be), SM time of a, b1, b2 over two hours; with the feature missing, none
    assert fast.summed >= 10, fast
    # D's 117 % and the holder that arrived mid-hour need samples; n3's late scrape and n4's
    # NaN are no regular series at all (read raw)
    assert 1 <= fast.loaded < fast.summed, fast


def _summed(samples: list[tuple[Decimal, Decimal]], t0: Decimal, t1: Decimal) -> regular.Regular:
    """What the engine's sums say of ``samples`` for the hour [t0, t1) (exact sums: the
    rounding of the engine's floats is what ``error`` bounds)."""
    before = [v for t, v in samples if t0 - 300 < t < t0]
    inside = [v for t, v in samples if t0 <= t < t1]
    peak = max(abs(v) for _, v in samples)
    return regular.Regular(
        [t for t, _ in samples],
        sum(inside, Decimal(0)),
        Decimal("1e-12"),
        peak,
        before[-1] if before else None,
        inside[-1] if inside else None,
        (),
        None,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("seed", range(40))
def test_integral_from_sums_is_the_integral_of_the_samples(seed: int) -> None:
    """Random scrape intervals, offsets, look-backs and hour coverage; evenly spaced or one
    scrape late: the integral from sums is the samples' (within its error) or None (not
    evenly spaced: the samples must tell), never another figure."""
    rng = random.Random(seed)
    t0, t1 = Decimal(T0), Decimal(T0 + 3600)
    step = rng.choice([15, 30, 60, 90, 150, 400])
    first = T0 - rng.randrange(0, 600) + rng.choice([0, 0.5, 0.123])
    last = T0 + 3600 + rng.randrange(-1200, 600)
    times = [Decimal(str(round(first + k * step, 3))) for k in range(int((last - first) // step))]
    late = rng.random() < 0.3 and len(times) > 4
    if late:
        k = rng.randrange(1, len(times) - 1)
        times[k] += Decimal("0.003")
    samples = [(t, Decimal(rng.randrange(0, 10_001)) / 100) for t in times]
    w = GaugeHour(None, datetime.fromtimestamp(T0, UTC), "c1")  # type: ignore[arg-type]
    ones = [(t, Decimal(1)) for t in times]
    step_of = interval(ones)
    exact = total(pieces(samples, t0, t1, max_gap_for(ones, SCRAPE_GAP, MAX_GAP, step_of)))
    found = w.integral(_summed(samples, t0, t1))
    spacings = {b - a for (a, _), (b, _) in itertools.pairwise(samples)}
    if found is None:
        assert late or len(spacings) > 1 or step > MAX_GAP, (step, first, last)
        return
    value, error = found
    assert abs(value - exact) <= error, (value, exact, error)
    assert error < Decimal("1e-6")


def test_bounds_that_round_apart_leave_it_to_the_samples() -> None:
    share = Decimal("1542.857143")
    half = Decimal("0.0000005")  # share x ratio lands on a half micro-second ...
    ratio = (Decimal("771.4285715")) / share
    assert _figures((share, (ratio, ratio), None), False) is not None  # the control
    wide = (ratio - half / share, ratio + half / share)  # ... within the sums' error
    assert _figures((share, wide, None), False) is None
    own = (Decimal("12.3456785"), Decimal("12.3456786"))
    assert _figures((share, None, own), True) is None
    assert _figures((share, None, (Decimal(12), Decimal(12))), True) == (
        share,
        Decimal(12),
        Decimal(12),
    )


def test_a_series_read_as_sums_reads_its_samples_when_iterated() -> None:
    """Anything that iterates a series read as sums gets its samples (read then, with the
    rest of its read still unread)."""

    class Loader:
        calls: list[object] = []

        def load(self, keys: object) -> None:
            self.calls.append(keys)
            series.fill([(Decimal(1), Decimal(5))])

    loader = Loader()
    series = regular.Regular(
        [Decimal(1)],
        Decimal(5),
        Decimal(0),
        Decimal(5),
        None,
        Decimal(5),
        (),
        loader,  # type: ignore[arg-type]
    )
    assert not series.loaded and len(series) == 1
    assert list(series) == [(Decimal(1), Decimal(5))]
    assert loader.calls == [None] and series.loaded
    assert series[0] == (Decimal(1), Decimal(5))
    assert loader.calls == [None]  # read once


def test_holders_in_turn_are_no_over_subscription() -> None:
    """A replica's holder leaving and another arriving within the hour: their highest shares
    add past 1 but no instant does — the samples stay as they are; two holding at once past 1
    are scaled at those instants (costsvc/ingest/gauges/exporter.py ``_within_gpu``)."""
    from costsvc.ingest.gauges.exporter import _within_gpu
    from costsvc.ingest.prom import Series

    times = [Decimal(T0 + 60 * k) for k in range(60)]
    half = Decimal("0.5")
    stay = Series({"pod": "stay"}, steady.Steady(times, half))
    left = Series({"pod": "left"}, [(t, half) for t in times[:30]])
    came = Series({"pod": "came"}, [(t, half) for t in times[30:]])
    groups = {("c", "G", "", "ns", p, "c"): [s] for p, s in (("stay", stay), ("left", left))}
    groups[("c", "G", "", "ns", "came", "c")] = [came]
    out = _within_gpu(groups)
    assert out[("c", "G", "", "ns", "came", "c")] == [came.samples]  # untouched
    assert out[("c", "G", "", "ns", "stay", "c")][0] is stay.samples
    both = Series({"pod": "both"}, [(t, half) for t in times[10:20]])
    groups[("c", "G", "", "ns", "both", "c")] = [both]  # 1.5 from 10 to 20 minutes
    scaled = _within_gpu(groups)[("c", "G", "", "ns", "stay", "c")][0]
    third = half / Decimal("1.5")
    assert [v for _, v in scaled] == [half] * 10 + [third] * 10 + [half] * 40


def test_series_read_as_sums_are_freed_with_the_hour(
    summed_prometheus: Prometheus, tmp_path: Path
) -> None:
    """No series read as sums is left for the cyclic garbage collector (paused while hours
    are ingested: its reference cycles would pile up, 2.4 s of a 10,000-GPU hour to collect)."""
    assert unreachable_after_ingest(summed_prometheus.url, tmp_path, HOURS, regular.Regular) == 0
