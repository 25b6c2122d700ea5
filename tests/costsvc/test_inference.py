"""Cost per million tokens through a real Prometheus into SQLite and PostgreSQL: the
hand-computed hours of inference_history.py (one model on a whole H100 with varying load, two
models time-sliced on one GPU, disaggregated prefill/decode pods, a counter reset, a pod with
no token series), checked against the chargeback and ``/v1/costs`` for the same pods, over
the API (``/v1/inference``, its CSV, OpenCost's ``/inferenceCost/total``) and after a
reprice of the output:input weight."""

from __future__ import annotations

import csv
import io
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, func, select

from costsvc.advice.rightsizing import Rules
from costsvc.advice.run import Options, compute
from costsvc.db.models import Chargeback, InferenceHour
from costsvc.ingest.prom import PrometheusReader
from costsvc.ingest.reprice import reprice, stale_hours
from tests.conftest import require_binary
from tests.costsvc.apiserver import Api, Clock, serve
from tests.costsvc.conftest import fresh_database
from tests.costsvc.history import ingest_with
from tests.costsvc.history_checks import assert_every_hour_adds_up
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
    inference_model,
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
            (r.pod, r.model): {c.name: getattr(r, c.name) for c in t.__table__.c}
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


# per 10^6 tokens, from the sums of inference_history.py (micro-units, half to even):
# L at I1: input 625 000 x 2 / (432 000 + 359 500) -> 1 250 000e6 / 791 500 = 1 579 279.85,
# output 3 750 000e6 / 395 750 = 9 475 679.09; usage 750 000e6 / 791 500 = 947 567.91,
# 2 250 000e6 / 395 750 = 5 685 407.45
BY_MODEL_I1 = {
    LLAMA: ("1.579280", "9.475679", "0.947568", "5.685407"),
    # 416 667e6 / 360 000 = 1 157 408.33; 833 333e6 / 180 000 = 4 629 627.78;
    # 333 333e6 / 360 000 = 925 925.00; 666 667e6 / 180 000 = 3 703 705.56
    QWEN: ("1.157408", "4.629628", "0.925925", "3.703706"),
    # 446 429e6 / 180 000 = 2 480 161.11; 803 571e6 / 108 000 = 7 440 472.22;
    # 178 571e6 / 180 000 = 992 061.11; 321 429e6 / 108 000 = 2 976 194.44
    MISTRAL: ("2.480161", "7.440472", "0.992061", "2.976194"),
    # 2 500 000e6 / 1 080 000 = 2 314 814.81; 2 500 000e6 / 540 000 = 4 629 629.63;
    # 1 250 000e6 / 1 080 000 = 1 157 407.41; 2 000 000e6 / 540 000 = 3 703 703.70
    DEEPSEEK: ("2.314815", "4.629630", "1.157407", "3.703704"),
}
RATES = (
    "cost_per_1m_input_tokens",
    "cost_per_1m_output_tokens",
    "usage_cost_per_1m_input_tokens",
    "usage_cost_per_1m_output_tokens",
)


def by(api: Api, who: str = "finance", **params: Any) -> dict[str, dict[str, Any]]:
    r = api.get("/v1/inference", who, **params)
    assert r.status_code == 200, r.text
    return {"/".join(row["group"].values()): row for row in r.json()["rows"]}


def test_cost_per_million_tokens_by_model(api: Api) -> None:
    got = by(api, start=WINDOW["start"], end="2026-11-20T15:00:00Z")
    assert {m: tuple(got[m][f] for f in RATES) for m in got} == BY_MODEL_I1
    llama = got[LLAMA]
    assert (llama["input_tokens"], llama["output_tokens"], llama["requests"]) == (
        791_500,
        395_750,
        7_915,
    )
    assert llama["tokens_per_gpu_hour"] == "593625.000"  # 1 187 250 tokens over 2 GPU-hours
    assert llama["split_rules"] == ["time"]
    assert got[DEEPSEEK]["split_rules"] == ["role"]
    # both hours of L: 1 750 000e6 / 971 500 = 1 801 338.14; 5 750 000e6 / 485 750
    # = 11 837 364.90; usage 850 000e6 / 971 500 = 874 935.67, 2 650 000e6 / 485 750
    # = 5 455 481.22
    two = by(api, **WINDOW, model=LLAMA)[LLAMA]
    assert tuple(two[f] for f in RATES) == ("1.801338", "11.837365", "0.874936", "5.455481")
    hourly = by(api, **WINDOW, model=LLAMA, step="hour")
    assert len(hourly) == 1  # one group; the rows are per step
    r = api.get("/v1/inference", **WINDOW, model=LLAMA, step="hour")
    starts = [row["start"] for row in r.json()["rows"]]
    assert starts == ["2026-11-20T14:00:00Z", "2026-11-20T15:00:00Z"]
    # a week's row (2026-11-20 is a Friday: its week began on Monday the 16th) is the two hours'
    weekly = api.get("/v1/inference", **WINDOW, model=LLAMA, step="week").json()["rows"]
    assert [(w["start"], w["allocation_cost"]) for w in weekly] == [
        ("2026-11-16T00:00:00Z", two["allocation_cost"])
    ]


def test_checked_against_v1_costs_for_the_same_pods(api: Api) -> None:
    """Per pod, the allocation basis is the pod's /v1/costs total, the usage basis its used
    cost, and allocation - usage is exactly its measured idle (allocated_idle_cost): not the
    < 1 % of OpenCost #3900."""
    served = by(api, **WINDOW, group_by="namespace,pod")
    r = api.get("/v1/costs", **WINDOW, group_by="namespace,pod")
    assert r.status_code == 200, r.text
    costs = {f"{x['group']['namespace']}/{x['group']['pod']}": x for x in r.json()["rows"]}
    assert set(costs) - set(served) == {"llm/batch-0"}  # no token series: not inference
    for pod, row in served.items():
        c = costs[pod]
        assert row["allocation_cost"] == c["total_cost"], pod
        assert row["usage_cost"] == c["used_cost"], pod
        assert row["idle_cost"] == c["allocated_idle_cost"], pod
        assert money_of(row["allocation_cost"]) - money_of(row["usage_cost"]) == money_of(
            c["allocated_idle_cost"]
        )
    # team chat: what the inference rows cost + batch-0 = the team's chargeback
    team = {
        x["group"]["team"]: x
        for x in api.get("/v1/costs", **WINDOW, group_by="team").json()["rows"]
    }
    inference = by(api, **WINDOW, group_by="team")
    assert money_of(team["chat"]["total_cost"]) == money_of(
        inference["chat"]["allocation_cost"]
    ) + money_of(costs["llm/batch-0"]["total_cost"])
    assert costs["llm/batch-0"]["total_cost"] == "2.500000"
    # measured idle by model: L I1 + I2 = (2.5 - 1.5) + (2.5 - 1.5) + (2.5 - 0.5) = 4.0
    llama = by(api, **WINDOW, model=LLAMA)[LLAMA]
    assert (llama["allocation_cost"], llama["usage_cost"], llama["idle_cost"]) == (
        "7.500000",
        "3.500000",
        "4.000000",
    )


def money_of(text: str) -> int:
    units, _, frac = text.partition(".")
    return int(units) * 1_000_000 + int(frac)


def test_team_tokens_see_their_own_team(api: Api) -> None:
    mine = by(api, "team:search", **WINDOW)
    assert set(mine) == {MISTRAL}
    assert api.get("/v1/inference", "team:search", **WINDOW, team="chat").status_code == 403
    assert api.get("/v1/inference", "metrics", **WINDOW).status_code == 403
    assert api.get("/v1/inference", None, **WINDOW).status_code == 401
    body = api.get(
        "/inferenceCost/total", "team:search", window="2026-11-20T14:00:00Z,2026-11-20T16:00:00Z"
    ).json()
    assert set(body["data"]["inferenceCosts"]) == {f"{MISTRAL}:search"}
    csv_text = api.get("/v1/inference.csv", "team:search", **WINDOW).text
    assert LLAMA not in csv_text and MISTRAL in csv_text
    for bad in ({"group_by": "gpu"}, {"step": "fortnight"}, {"start": "2026-11-20T14:30:00Z"}):
        assert api.get("/v1/inference", **{**WINDOW, **bad}).status_code in (400, 422), bad


def test_the_csv_is_the_json(api: Api) -> None:
    rows = api.get("/v1/inference", **WINDOW, group_by="model,pod").json()["rows"]
    r = api.get("/v1/inference.csv", **WINDOW, group_by="model,pod")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    lines = list(csv.DictReader(io.StringIO(r.text)))
    assert len(lines) == len(rows) == 6
    for line, row in zip(lines, rows, strict=True):
        assert (line["model"], line["pod"]) == (row["group"]["model"], row["group"]["pod"])
        for name in ("input_tokens", "allocation_cost", "cost_per_1m_output_tokens"):
            assert line[name] == ("" if row[name] is None else str(row[name]))


OC_WINDOW = "2026-11-20T14:00:00Z,2026-11-20T15:00:00Z"


def test_opencost_inference_cost_total(api: Api) -> None:
    r = api.get("/inferenceCost/total", window=OC_WINDOW)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["code"] == 200
    data = body["data"]
    assert data["window"] == {"start": "2026-11-20T14:00:00Z", "end": "2026-11-20T15:00:00Z"}
    costs = data["inferenceCosts"]
    assert set(costs) == {f"{LLAMA}:llm", f"{QWEN}:llm", f"{MISTRAL}:search", f"{DEEPSEEK}:llm"}
    llama = costs[f"{LLAMA}:llm"]
    assert llama["properties"] == {"modelName": LLAMA, "namespace": "llm"}
    assert llama["costBasis"] == "allocation"
    assert (llama["totalCost"], llama["promptTokens"], llama["generationTokens"]) == (
        5.0,
        791_500,
        395_750,
    )
    assert (llama["inputCostPerMillionTokens"], llama["outputCostPerMillionTokens"]) == (
        1.57928,
        9.475679,
    )
    assert llama["allocationMethod"] == "compute_time"
    assert costs[f"{QWEN}:llm"]["allocationMethod"] == "multiplier"
    usage = api.get("/inferenceCost/total", window=OC_WINDOW, costBasis="usage").json()
    u = usage["data"]["inferenceCosts"][f"{DEEPSEEK}:llm"]
    assert (u["costBasis"], u["totalCost"], u["inputCost"], u["outputCost"]) == (
        "usage",
        3.25,
        1.25,
        2.0,
    )
    assert (u["inputCostPerMillionTokens"], u["outputCostPerMillionTokens"]) == (
        1.157407,
        3.703704,
    )
    by_ns = api.get("/inferenceCost/total", window=OC_WINDOW, aggregate="namespace").json()
    ns = by_ns["data"]["inferenceCosts"]
    assert set(ns) == {"llm", "search"}
    assert ns["llm"]["properties"] == {"modelName": "", "namespace": "llm"}
    assert ns["llm"]["totalCost"] == 5.0 + 1.25 + 5.0
    one = api.get("/inferenceCost/total", window=OC_WINDOW, filter=f'model_name:"{QWEN}"').json()[
        "data"
    ]["inferenceCosts"]
    assert set(one) == {f"{QWEN}:llm"}
    for params, message in (
        ({}, "missing required 'window' parameter"),
        ({"window": "nope"}, "invalid 'window' parameter: illegal window: nope"),
        ({"window": OC_WINDOW, "costBasis": "x"}, "invalid 'costBasis' parameter"),
        ({"window": OC_WINDOW, "aggregate": "node"}, "unsupported 'aggregate' dimension"),
        ({"window": OC_WINDOW, "filter": "team:x"}, "unsupported filter property"),
    ):
        bad = api.get("/inferenceCost/total", **params)
        assert bad.status_code == 400, params
        assert bad.json()["code"] == 400 and message in bad.json()["message"], bad.json()


def test_a_weight_change_reprices_exactly_the_hours_it_covers(
    inference_prom: Prometheus, db_url: str
) -> None:
    """Qwen's output:input weight 4 -> 2 from I1: stale is I1 only (I2 served no Qwen), the
    reprice splits Qwen's 1 250 000 as 360 000 : 360 000 -> 625 000 each and changes no
    chargeback row; per 10^6: 625 000e6 / 360 000 = 1 736 111.11, / 180 000 = 3 472 222.22."""
    ingest_with(inference_prom.url, db_url, MODEL, HOURS)
    engine = create_engine(db_url)
    before = chargeback_by_pod(db_url, I1)
    changed = inference_model(
        {"effective_from": "2026-11-20T14:00:00Z", "model": "Qwen/*", "output_weight": "2"}
    )
    assert stale_hours(engine, MODEL) == []
    assert stale_hours(engine, changed) == [I1]
    assert reprice(engine, changed, "c1", [I1]).done == [I1]
    assert stale_hours(engine, changed) == []
    engine.dispose()
    qwen = rows(db_url, I1)[("qwen-0", QWEN)]
    assert (qwen["input_cost"], qwen["output_cost"], qwen["weight_ppm"]) == (
        625_000,
        625_000,
        2_000_000,
    )
    assert (qwen["input_used"], qwen["output_used"]) == (500_000, 500_000)
    assert chargeback_by_pod(db_url, I1) == before
    with serve(db_url, Clock(datetime(2026, 11, 21, tzinfo=UTC))) as running:
        got = by(running, start=WINDOW["start"], end="2026-11-20T15:00:00Z", model=QWEN)[QWEN]
    assert (got["cost_per_1m_input_tokens"], got["cost_per_1m_output_tokens"]) == (
        "1.736111",
        "3.472222",
    )


def test_metrics_per_served_model(api: Api) -> None:
    """The last ingested hour is I2: llama-0 alone, output 2 000 000e6 / 90 000 =
    22 222 222.22 per 10^6; the 7 days up to it hold I1 and I2: 11 837 364.90 (above); no
    previous week. Tokens per GPU-hour: 270 000 over 1 GPU-hour."""
    text = api.get("/metrics", "metrics").text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name.startswith("costsvc_inference")
    }
    base = {"cluster": "c1", "team": "chat", "namespace": "llm", "model": LLAMA}

    def value(name: str, **labels: str) -> float | None:
        return samples.get((name, tuple(sorted({**base, **labels}.items()))))

    rate = "costsvc_inference_cost_per_million_tokens"
    weekly = "costsvc_inference_weekly_cost_per_million_tokens"
    out = {"direction": "output", "currency": "USD"}
    assert value(rate, **out, basis="allocation") == 22.222222
    assert value(rate, **out, basis="usage") == 4.444444  # 400 000e6 / 90 000
    assert value(weekly, **out, basis="allocation", week="current") == 11.837365
    assert value(weekly, **out, basis="allocation", week="previous") is None
    assert value("costsvc_inference_tokens_per_gpu_hour") == 270_000
    hour = "costsvc_inference_cost_per_hour"
    assert value(hour, basis="allocation", currency="USD") == 2.5
    assert value(hour, basis="usage", currency="USD") == 0.5
    assert {dict(k[1])["model"] for k in samples if k[0] == weekly} == {
        LLAMA,
        QWEN,
        MISTRAL,
        DEEPSEEK,
    }
    mine = api.get("/metrics", "team:search").text
    assert MISTRAL in mine and LLAMA not in mine


def test_rightsizing_sizes_served_models_by_their_tokens(
    inference_prom: Prometheus, ingested: str
) -> None:
    """Each served model gets a recommendation of kind Model from its tokens (all of them
    hold their peak here: keep), and its pods are not sized again as workloads; batch-0,
    which serves nothing, is."""
    engine = create_engine(ingested)
    reader = PrometheusReader(inference_prom.url)
    opts = Options(window=timedelta(hours=2), rules=Rules(min_hours=Decimal(1)))
    try:
        out = compute(engine, reader, MODEL, "c1", I2 + timedelta(hours=1), opts)
    finally:
        reader.close()
        engine.dispose()
    served = {
        (r["namespace"], r["workload"]): r
        for r in out.recommendations
        if r["workload_kind"] == "Model"
    }
    assert set(served) == {("llm", LLAMA), ("llm", QWEN), ("search", MISTRAL), ("llm", DEEPSEEK)}
    llama = served[("llm", LLAMA)]
    # 1 457 250 tokens over 1.4 busy GPU-hours; the peak hour 1 187 250 x 1.15 needs 1.31
    # GPUs: both replicas
    assert (llama["action"], llama["pods"], llama["gpu_hours"]) == ("keep", 2, 3_000_000)
    assert "1040893 tokens per busy GPU-hour" in llama["reason"]
    assert served[("llm", DEEPSEEK)]["pods"] == 2
    workloads = {r["workload"] for r in out.recommendations if r["workload_kind"] != "Model"}
    assert workloads == {"batch"}  # StatefulSet batch, from the pod name batch-0
