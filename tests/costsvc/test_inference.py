"""Cost per million tokens through a real Prometheus into SQLite and PostgreSQL: the
hand-computed hours of inference_history.py (one model on a whole H100 with varying load, two
models time-sliced on one GPU, disaggregated prefill/decode pods, a counter reset, a pod with
no token series), checked against the chargeback and ``/v1/costs`` for the same pods, over
the API (``/v1/inference``, its CSV, OpenCost's ``/inferenceCost/total``) and after a
reprice of the output:input weight."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select

from costsvc.db.models import Chargeback, InferenceHour
from tests.conftest import require_binary
from tests.costsvc.apiserver import Api, Clock, serve
from tests.costsvc.conftest import fresh_database
from tests.costsvc.history import assert_every_hour_adds_up, ingest_with
from tests.costsvc.inference_history import (
    DEEPSEEK,
    I1,
    I2,
    LLAMA,
    MISTRAL,
    MODEL,
    QWEN,
    T2,
    history,
)
from tests.costsvc.scraped import as_scraped
from tests.prom import Prometheus

HOURS = [I1, I2]
WINDOW = {"start": "2026-11-20T14:00:00Z", "end": "2026-11-20T16:00:00Z"}


@pytest.fixture(scope="module")
def inference_prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    promtool, binary = require_binary("promtool"), require_binary("prometheus")
    work = tmp_path_factory.mktemp("inference")
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
        prom.until(lambda: prom.query(f"gpu_device_up @ {T2 + 60}"), 30, "blocks loaded")
        yield prom
    finally:
        prom.stop()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def ingested(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    inference_prom: Prometheus,
) -> Iterator[str]:
    with fresh_database(request.param, request, tmp_path_factory.mktemp("inf")) as url:
        ingest_with(inference_prom.url, url, MODEL, HOURS)
        yield url


@pytest.fixture(scope="module")
def api(ingested: str) -> Iterator[Api]:
    with serve(ingested, Clock(datetime(2026, 11, 21, tzinfo=UTC)), ["chat", "search"]) as running:
        yield running


def rows(url: str, hour: datetime | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    """The inference rows by (pod, model)."""
    engine = create_engine(url)
    t = InferenceHour
    q = select(t)
    if hour is not None:
        q = q.where(t.hour == hour)
    with engine.connect() as conn:
        found = {
            (r.pod, r.model): {c: getattr(r, c) for c in t.__table__.c}
            for r in conn.execute(q)
        }
    engine.dispose()
    return found


def chargeback_by_pod(url: str, hour: datetime) -> dict[str, tuple[int, int]]:
    """(allocated + idle, used) per pod of the hour, from the chargeback."""
    engine = create_engine(url)
    c = Chargeback
    q = (
        select(c.pod, func.sum(c.allocated + c.idle), func.sum(c.used))
        .where(c.hour == hour, c.pod != "")
        .group_by(c.pod)
    )
    with engine.connect() as conn:
        found = {r[0]: (int(r[1]), int(r[2])) for r in conn.execute(q)}
    engine.dispose()
    return found


SPLIT = ("input_tokens", "output_tokens", "requests", "rule", "input_cost", "output_cost")
USAGE = ("used", "input_used", "output_used")


def test_every_pod_and_model_by_hand(ingested: str) -> None:
    got = rows(ingested, I1)
    assert set(got) == {
        ("llama-0", LLAMA),
        ("llama-1", LLAMA),
        ("qwen-0", QWEN),
        ("mistral-0", MISTRAL),
        ("ds-prefill-0", DEEPSEEK),
        ("ds-decode-0", DEEPSEEK),
    }  # batch-0 has no token series; the stray series has no pod
    split = {k: tuple(v[c] for c in SPLIT) for k, v in got.items()}
    assert split == {
        ("llama-0", LLAMA): (432_000, 216_000, 4_320, "time", 625_000, 1_875_000),
        ("llama-1", LLAMA): (359_500, 179_750, 3_595, "time", 625_000, 1_875_000),  # the reset
        ("qwen-0", QWEN): (360_000, 180_000, 3_600, "weight", 416_667, 833_333),
        ("mistral-0", MISTRAL): (180_000, 108_000, 1_800, "weight", 446_429, 803_571),
        ("ds-prefill-0", DEEPSEEK): (1_080_000, 0, 0, "role", 2_500_000, 0),
        ("ds-decode-0", DEEPSEEK): (0, 540_000, 7_200, "role", 0, 2_500_000),
    }
    usage = {k: tuple(v[c] for c in USAGE) for k, v in got.items()}
    assert usage == {
        ("llama-0", LLAMA): (1_500_000, 375_000, 1_125_000),
        ("llama-1", LLAMA): (1_500_000, 375_000, 1_125_000),
        ("qwen-0", QWEN): (1_000_000, 333_333, 666_667),
        ("mistral-0", MISTRAL): (500_000, 178_571, 321_429),
        ("ds-prefill-0", DEEPSEEK): (1_250_000, 1_250_000, 0),
        ("ds-decode-0", DEEPSEEK): (2_000_000, 0, 2_000_000),
    }
    assert got[("llama-0", LLAMA)]["prefill_us"] == 1080 * 10**6
    assert got[("llama-1", LLAMA)]["decode_us"] == 2157 * 10**6
    assert got[("qwen-0", QWEN)]["prefill_us"] is None
    assert {v["team"] for v in got.values()} == {"chat", "search"}
    assert got[("ds-prefill-0", DEEPSEEK)]["role"] == "prefill"
    assert got[("qwen-0", QWEN)]["weight_ppm"] == 4_000_000
    assert got[("mistral-0", MISTRAL)]["weight_ppm"] == 3_000_000

    i2 = rows(ingested, I2)
    assert {k: tuple(v[c] for c in SPLIT + USAGE) for k, v in i2.items()} == {
        ("llama-0", LLAMA): (
            *(180_000, 90_000, 1_800, "time", 500_000, 2_000_000),
            *(500_000, 100_000, 400_000),
        )
    }


@pytest.mark.parametrize("hour", HOURS)
def test_rows_add_up_to_the_pods_chargeback(ingested: str, hour: datetime) -> None:
    """Σ of a pod's rows = its chargeback, on both bases, to the micro-unit; the pod with no
    token series keeps its cost in the chargeback (never dropped)."""
    charged = chargeback_by_pod(ingested, hour)
    served: dict[str, list[int]] = {}
    for (pod, _), r in rows(ingested, hour).items():
        assert r["input_cost"] + r["output_cost"] == r["allocated"] + r["idle"]
        assert r["input_used"] + r["output_used"] == r["used"]
        mine = served.setdefault(pod, [0, 0])
        mine[0] += r["input_cost"] + r["output_cost"]
        mine[1] += r["input_used"] + r["output_used"]
    assert {p: tuple(v) for p, v in served.items()} == {
        p: v for p, v in charged.items() if p in served
    }
    if hour == I1:
        assert set(charged) - set(served) == {"batch-0"}
        assert charged["batch-0"] == (2_500_000, 1_750_000)
    assert_every_hour_adds_up(ingested)
