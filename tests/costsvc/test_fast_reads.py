"""Fast re-ingest (costsvc/ingest/steady.py): the ground-truth hours of history.py (whole,
time-sliced, MIG, a 20-minute scrape gap, a pod leaving, over-subscribed HAMi, DRA, a
driver upgrade, two clusters, hostile labels, a price change) and of history14.py (money at
sample resolution; dcgm-exporter + kube-state-metrics) give the same rows in every money,
energy and fact table whether steady series are synthesised from summaries or every sample is
read — and the fast path really serves most series."""

from __future__ import annotations

from datetime import timedelta

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
