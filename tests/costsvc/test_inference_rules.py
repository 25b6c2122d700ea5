"""The pure inference rules (costsvc/inference/split.py), the weight in force
(costsvc/rules/cost_model.py) and rightsizing of served models (costsvc/advice/rightsizing.py), on
small tables computed by hand."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal as D

import pytest

from costsvc.advice.rightsizing import Fleet, Rules, Serving, advise_serving
from costsvc.inference.split import PodMoney, Served, Totals, per_million, price_served, split_rule
from costsvc.rules.attribution import Owner
from costsvc.rules.cost_model import CostModelError, parse

H = datetime(2026, 11, 20, 14, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"
CHAT = Owner("chat", "p", "s")


def served(pod: str, model: str, role: str = "", i: int = 0, o: int = 0, **kw: D) -> Served:
    return Served("c", "ns", pod, model, "vllm", role, i, o, 0, kw.get("pre"), kw.get("dec"))


@pytest.mark.parametrize(
    ("s", "rule", "weights"),
    [
        (served("a", "m", "prefill", 10, 5), "role", [D(1), D(0)]),
        (served("a", "m", "encode-prefill", 10, 5), "role", [D(1), D(0)]),
        (served("a", "m", "decode", 10, 5), "role", [D(0), D(1)]),
        (served("a", "m", "prefill-decode", 10, 5, pre=D(3), dec=D(9)), "time", [D(3), D(9)]),
        (served("a", "m", "", 10, 5, pre=D(0), dec=D(0)), "weight", [D(10), D(15)]),
        (served("a", "m", "", 10, 5), "weight", [D(10), D(15)]),
        (served("a", "m", "", 0, 0), "weight", [D(1), D(3)]),  # no tokens: 1 : weight
    ],
)
def test_split_rule(s: Served, rule: str, weights: list[D]) -> None:
    assert split_rule(s, D(3)) == (rule, weights)


def test_a_pod_serving_two_models_splits_its_money_by_weighted_tokens() -> None:
    """Pod a: 1 000 000 allocated + 1 idle, 600 000 used, GPU-hours 1 000 000; model x 100
    input + 100 output (weight 3: 400), y 200 + 0 (200): x gets 2/3 of each amount, each
    split on its own: allocated 666 666.67 / 333 333.33 -> 666 667 / 333 333, the idle unit
    to x (0.67 > 0.33) -> x 666 668, y 333 333; then x splits 100 : 300 -> 166 667 /
    500 001."""
    rows = price_served(
        H,
        [served("a", "y", "", 200, 0), served("a", "x", "", 100, 100)],
        {("c", "ns", "a"): PodMoney(CHAT, 1_000_000, 600_000, 400_000, 1, 1_000_000)},
        lambda hour, model: D(3),
        lambda *pod: None,
    )
    got = {r.served.model: r for r in rows}
    assert (got["x"].allocated + got["x"].idle, got["y"].allocated + got["y"].idle) == (
        666_668,
        333_333,
    )
    assert (got["x"].input_cost, got["x"].output_cost) == (166_667, 500_001)
    assert (got["x"].used, got["y"].used) == (400_000, 200_000)
    assert (got["x"].input_used, got["x"].output_used) == (100_000, 300_000)
    assert (got["y"].input_cost, got["y"].output_cost) == (333_333, 0)
    assert sum(r.input_cost + r.output_cost for r in rows) == 1_000_001
    assert sum(r.gpu_hours for r in rows) == 1_000_000


def test_a_pod_without_chargeback_costs_nothing_and_keeps_its_owner() -> None:
    rows = price_served(H, [served("cpu", "m", "", 5, 5)], {}, lambda h, m: D(2), lambda *pod: CHAT)
    assert [(r.owner, r.allocated, r.input_cost, r.output_cost) for r in rows] == [(CHAT, 0, 0, 0)]


def test_decode_pods_prompt_tokens_and_prefill_pods_answers_are_not_counted() -> None:
    rows = price_served(
        H,
        [served("p", "m", "prefill", 1000, 10), served("d", "m", "decode", 1000, 500)],
        {},
        lambda h, m: D(2),
        lambda *pod: CHAT,
    )
    got = {r.served.pod: (r.served.input_tokens, r.served.output_tokens) for r in rows}
    assert got == {"p": (1000, 0), "d": (0, 500)}


def test_rates_and_the_unknown_usage_basis() -> None:
    assert per_million(2_500_000, 1_080_000) == 2_314_815  # 2 314 814.81
    assert per_million(1, 2_000_000) == 0  # 0.5 -> half to even
    assert per_million(3, 2_000_000) == 2  # 1.5 -> 2
    assert per_million(5, 0) is None
    t = Totals(input_tokens=10, output_tokens=0, allocated=100, used=40, waste=30)
    t.input_cost, t.input_used = 100, 40
    figures = t.figures()
    assert figures["unmeasured_cost"] == "0.000030"  # 100 - 40 - 30: no utilisation series
    assert figures["usage_cost"] is None and figures["usage_cost_per_1m_input_tokens"] is None
    assert figures["cost_per_1m_input_tokens"] == "10.000000"
    assert figures["cost_per_1m_output_tokens"] is None  # no output tokens
    t.waste = 60
    assert t.figures()["usage_cost_per_1m_input_tokens"] == "4.000000"


def test_the_weight_in_force() -> None:
    def model(*weights: dict[str, str]) -> object:
        return parse(
            {
                "versions": [
                    {
                        "effective_from": "2026-11-01T00:00:00Z",
                        "prices": [{"model": H100, "hourly": "2.5"}],
                    }
                ],
                "inference": list(weights),
            }
        )

    plain = model()
    assert plain.output_weight_at(H, "any") == D("2.5")  # OpenCost's default multiplier
    m = model(
        {"effective_from": "2026-11-01T00:00:00Z", "output_weight": "3"},
        {"effective_from": "2026-11-01T00:00:00Z", "model": "Qwen/*", "output_weight": "4"},
        {"effective_from": "2026-11-20T15:00:00Z", "model": "Qwen/*", "output_weight": "5"},
        {"effective_from": "2026-11-01T00:00:00Z", "model": "Qwen/Q-1", "output_weight": "6"},
    )
    assert m.output_weight_at(H, "Llama") == 3
    assert m.output_weight_at(H, "Qwen/Q-2") == 4
    assert m.output_weight_at(datetime(2026, 11, 20, 15, tzinfo=UTC), "Qwen/Q-2") == 5
    assert m.output_weight_at(H, "Qwen/Q-1") == 6  # an exact name over a glob
    assert m.output_weight_at(datetime(2026, 10, 1, tzinfo=UTC), "Qwen/Q-2") == D("2.5")
    for bad, where in (
        ({"effective_from": "2026-11-01T00:30:00Z", "output_weight": "3"}, "inference[0]"),
        ({"effective_from": "2026-11-01T00:00:00Z", "output_weight": "0"}, "output_weight"),
        ({"effective_from": "2026-11-01T00:00:00Z", "output_weight": "1.0000001"}, "output"),
    ):
        with pytest.raises(CostModelError, match=where.replace("[", r"\[")):
            model(bad)


FLEET = Fleet({H100: 2_500_000}, {H100: 80 * 10**9})
RULES = Rules()
GIB = 1 << 30


def serving(**kw: object) -> Serving:
    base: dict[str, object] = {
        "model_name": "m",
        "gpu_model": H100,
        "hours": D(168),
        "pod_hours": D(672),
        "gpu_hours": D(672),
        "busy_gpu_hours": D(168),
        "tokens": 168_000_000,
        "peak_tokens": 1_200_000,
        "memory_peak_bytes": 30 * GIB,
    }
    return Serving(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ev", "action", "target", "saving"),
    [
        # 4 whole-GPU replicas 25 % busy: 1 000 000 tokens per busy GPU-hour, the peak hour
        # 1 200 000 x 1.15 needs 1.38 GPUs -> 2 replicas; 672 GPU-h x 2.5 x 730 / 168 =
        # 7 300 a month now, 3 650 with 2 (no MIG profile of < 1 GPU holds 1.38 / 2 = 0.69)
        (serving(), "replicas", "2 replicas", 3_650_000_000),
        # one replica 10 % busy: 1 000 000 per busy GPU-hour, peak 150 000 x 1.15 -> 0.1725 of
        # a GPU, 15 GiB x 1.1: 2g.20gb (2/7 of the compute, 19 968 MiB) ->
        # 1 825 - 1 825 x 2/7 = 1 303.571428.57 a month
        (
            serving(
                pod_hours=D(168),
                gpu_hours=D(168),
                busy_gpu_hours=D("16.8"),
                tokens=16_800_000,
                peak_tokens=150_000,
                memory_peak_bytes=15 * GIB,
            ),
            "mig",
            "2g.20gb x 1",
            1_303_571_429,
        ),
        (serving(tokens=0), "release", "", 7_300_000_000),
        (serving(hours=D(10)), "insufficient", "", 0),
        (serving(busy_gpu_hours=None), "insufficient", "", 0),
        (serving(gpu_model="unpriced"), "insufficient", "", 0),
        (serving(peak_tokens=3_000_000), "keep", "", 0),  # 3.45 GPUs: all 4 replicas
        (serving(memory_peak_bytes=None, pod_hours=D(168), gpu_hours=D(168)), "keep", "", 0),
    ],
)
def test_rightsizing_served_models(ev: Serving, action: str, target: str, saving: int) -> None:
    advice = advise_serving(ev, FLEET, RULES, D(168))
    assert (advice.action, advice.target, advice.saving_monthly) == (action, target, saving)
    assert advice.current_monthly - advice.recommended_monthly == advice.saving_monthly
