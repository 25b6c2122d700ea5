"""Held time counted exactly (costsvc/advice/evidence.py): a GPU held all week — a sample at the
window's very start and end, back-filled with no staleness markers — is 168 hours, on
Prometheus 2.x's closed ranges (the installed server) and on 3.x's left-open ones (the same
query with every range a millisecond shorter: what a left-open range keeps of the same data).
Its savings are price x 730 x the fraction freed. Real Prometheus; SQLite and PostgreSQL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import Engine

from costsvc.advice.evidence import EvidenceReader
from costsvc.advice.run import compute
from costsvc.ingest.prom import PrometheusReader
from costsvc.kit.money import round_micro
from costsvc.rules.cost_model import parse
from tests.costsvc.conftest import prometheus_over
from tests.prom import Prometheus

END = datetime(2026, 11, 22, tzinfo=UTC)
START = END - timedelta(days=7)
H100 = "NVIDIA H100 80GB HBM3"
MODEL = parse(
    {
        "versions": [
            {
                "effective_from": "2026-11-01T00:00:00Z",
                "prices": [{"model": H100, "hourly": "2.50"}],
            }
        ]
    }
)
GPU = 'gpu="0",UUID="GPU-W",modelName="NVIDIA H100 80GB HBM3",Hostname="node-w"'
HOLDER = f'{GPU},namespace="infer",pod="chat-0",container="main"'
SERIES = {
    "gpu_device_up": (GPU, 1),
    "gpu_allocation_share": (f'{HOLDER},resource="nvidia.com/gpu"', 1),
    "gpu_container_memory_used_bytes": (HOLDER, 9 * 10**9),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": (HOLDER, 0.12),
    "DCGM_FI_DEV_FB_USED": (HOLDER, 8583),
    "DCGM_FI_DEV_FB_FREE": (HOLDER, 72976),
}


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """Every 30 s from the window's first instant to its last, both included."""
    work = tmp_path_factory.mktemp("week")
    t0, t1 = int(START.timestamp()), int(END.timestamp())
    lines = []
    for name, (labels, value) in SERIES.items():
        lines.append(f"# TYPE {name} gauge")
        lines.extend(f"{name}{{{labels}}} {value} {t}" for t in range(t0, t1 + 1, 30))
    lines.append("# EOF")
    (work / "history.om").write_text("\n".join(lines) + "\n")
    yield from prometheus_over(work, t1 - 60)


def _left_open(query: str) -> str:
    """The query as a left-open range (Prometheus 3.0) keeps the data: each range a
    millisecond shorter (timestamps are whole milliseconds)."""

    def shorter(m: re.Match[str]) -> str:
        value, unit, rest = int(m[1]), m[2], m[3] or ""
        ms = value * (1000 if unit == "s" else 1) - 1
        return f"[{ms}ms{rest}]"

    return re.sub(r"\[(\d+)(ms|s)(:[^\]]+)?\]", shorter, query)


def test_a_week_held_is_168_hours_on_both_range_semantics(week: Prometheus) -> None:
    reader = PrometheusReader(week.url)
    try:
        evidence = EvidenceReader(reader, END, 7 * 86400)
        closed = reader.vector(evidence.held_query(), evidence.end)
        left_open = reader.vector(_left_open(evidence.held_query()), evidence.end)
        pods = evidence.pods(Decimal("0.05"))
    finally:
        reader.close()
    assert [v for _, v in closed] == [Decimal(336)]  # 2.x: not 337
    assert [v for _, v in left_open] == [Decimal(336)]  # 3.x: the same
    assert pods[("infer", "chat-0", H100)].device_hours == 168


def test_the_savings_are_price_x_730_x_the_fraction_freed(engine: Engine, week: Prometheus) -> None:
    reader = PrometheusReader(week.url)
    try:
        outcome = compute(engine, reader, MODEL, "c1", END)
    finally:
        reader.close()
    [rec] = [r for r in outcome.recommendations if r["workload"].startswith("chat")]
    price = 2_500_000
    assert rec["device_hours"] == 168 * 10**6  # ppm
    assert rec["current_monthly"] == price * 730  # 1825.000000: never more than the GPU costs
    assert rec["target"] == "1g.10gb"
    freed = 1 - Decimal(1) / 7
    assert rec["saving_monthly"] == round_micro(price * 730 * freed)
