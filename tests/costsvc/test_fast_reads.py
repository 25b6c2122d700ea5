"""Fast re-ingest (costsvc/ingest/gauges/steady.py): the ground-truth hours of history.py (whole,
time-sliced, MIG, a 20-minute scrape gap, a pod leaving, over-subscribed HAMi, DRA, a
driver upgrade, two clusters, hostile labels, a price change) and of history14.py (money at
sample resolution; dcgm-exporter + kube-state-metrics) give the same rows in every money,
energy and fact table whether steady series are synthesised from summaries or every sample is
read — and the fast path really serves most series."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from costsvc.ingest.gauges import steady
from costsvc.ingest.prom import PrometheusReader
from costsvc.ingest.reader import RunReader
from tests.costsvc.conftest import _loaded_prometheus
from tests.costsvc.history import (
    ELEVENTH,
    FIFTEENTH,
    HOUR,
    HOUR2,
    HOUR3,
    MODEL,
    TWELFTH,
    assert_fast_is_raw,
    model,
)
from tests.costsvc.history14 import DCGM_HOUR, SAMPLE_HOUR
from tests.costsvc.history_fractional import SIXTEENTH
from tests.prom import Prometheus


def test_history_fast_is_raw(prometheus: Prometheus, three_dbs: tuple[str, str, str]) -> None:
    hours = [
        HOUR,
        HOUR2,
        HOUR3,
        ELEVENTH,
        TWELFTH,
        FIFTEENTH,
        FIFTEENTH + timedelta(hours=1),
        SIXTEENTH,
    ]
    fast, raw = assert_fast_is_raw(prometheus.url, three_dbs, MODEL, [(hours, "auto")])
    # most series synthesised; the pods that left, the driver upgrade, the over-subscribed
    # HAMi shares' changes read raw (and with the feature missing, nothing is fast)
    assert fast.fast > 2 * fast.raw, fast
    assert fast.raw > 0, fast
    assert fast.fast + fast.raw == raw.raw  # the same series, whichever way they were read


def test_history14_fast_is_raw(prometheus14: Prometheus, three_dbs: tuple[str, str, str]) -> None:
    fast, raw = assert_fast_is_raw(
        prometheus14.url,
        three_dbs,
        model(),
        [([SAMPLE_HOUR], "gpu-exporter"), ([DCGM_HOUR], "dcgm-exporter")],
    )
    # the hour at sample resolution is churn by design (pods leaving, values changing), and
    # dcgm-exporter's hour reads mostly series that are not steady selectors: fewer fast
    assert fast.fast >= 10 and fast.raw > 0, fast
    assert fast.fast + fast.raw == raw.raw


NAN_T0 = 1_790_000_000 - 1_790_000_000 % 3600  # an hour boundary


@pytest.fixture(scope="module")
def nan_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """Two hours of two allocation shares scraped every 60 s from one node: one stays 1
    throughout, the other is 1 except for one NaN sample in the second hour."""
    lines = ["# TYPE gpu_allocation_share gauge"]
    for pod in ("steady", "nan"):
        labels = f'UUID="GPU-1",Hostname="n1",namespace="a",pod="{pod}",container="c"'
        for t in range(NAN_T0 - 3600, NAN_T0 + 3600, 60):
            value = "NaN" if pod == "nan" and t == NAN_T0 + 1800 else "1"
            lines.append(f"gpu_allocation_share{{{labels}}} {value} {t}")
    lines.append("# EOF")
    yield from _loaded_prometheus(tmp_path_factory, "nan", "\n".join(lines) + "\n", NAN_T0)


def test_a_nan_sample_is_no_steady_series(nan_prometheus: Prometheus) -> None:
    """Prometheus' max/min_over_time skip a NaN sample (the value looks constant); the raw
    read drops it (a scrape with no reading): such a series must be read raw, never
    synthesised with a sample where the raw read has none."""
    hour = datetime.fromtimestamp(NAN_T0, UTC)
    at = hour + timedelta(hours=1) - timedelta(microseconds=1)
    reader = PrometheusReader(nan_prometheus.url)
    try:
        with RunReader(reader) as reads:
            reads.plan([hour])
            fast = reads.read("gpu_allocation_share", at, 3900)
            counts = reads.counts
        raw = reader.raw("gpu_allocation_share", at, 3900)
    finally:
        reader.close()
    assert fast == raw
    by_pod = {s.labels["pod"]: s.samples for s in fast}
    assert isinstance(by_pod["steady"], steady.Steady)  # the control: synthesised
    assert not isinstance(by_pod["nan"], steady.Steady)
    assert len(by_pod["nan"]) == len(by_pod["steady"]) - 1  # the NaN is no sample
    assert (counts.fast, counts.raw) == (1, 1)
