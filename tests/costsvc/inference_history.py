"""Synthetic Prometheus history for the inference ground-truth tests (test_inference.py),
loaded into its own real Prometheus. H100s at 2.50 per GPU-hour, idle policy ``separate``;
scrapes every 15 s. vLLM series as vLLM exposes them (costsvc/ingest/tokens.py: counters
``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
``vllm:request_success_total{finished_reason}``, the histograms' ``_sum`` of
``vllm:request_prefill_time_seconds`` / ``vllm:request_decode_time_seconds``, labels
``model_name`` and ``engine``) with the scrape's ``namespace``/``pod`` target labels.
The cost model's output:input weight: 3 for every model, 4 for ``Qwen/*``.

Hour I1 = 2026-11-20 14:00 (namespace llm is team chat, namespace search team search):

GPU-IA  whole, llm/llama-0, model L = meta-llama/Llama-3.1-8B-Instruct; utilisation 90 % then
        30 % (14:30): used 2.5 x 0.6 = 1.500000. Counters per second, first / second half:
        prompt 200 / 40, generation 100 / 20, requests 2 / 0.4 (stop 1.5 + length 0.5 / stop
        0.4), prefill 0.5 / 0.1 s, decode 1.5 / 0.3 s -> input 432 000, output 216 000,
        requests 4 320, prefill 1 080 s, decode 3 240 s: by time, input 1/4:
        allocation 2.5 -> 625 000 / 1 875 000; usage 1.5 -> 375 000 / 1 125 000
GPU-IR  whole, llm/llama-1, model L, utilisation 60 % (used 1.5); vLLM restarts at 14:29:50,
        its counters from 0: the 5 s before the restart are lost, 3 595 s counted of each:
        prompt 100/s -> 359 500, generation 50/s -> 179 750, requests 1/s -> 3 595, prefill
        0.2 s/s -> 719 s, decode 0.6 s/s -> 2 157 s: input 1/4 again ->
        allocation 625 000 / 1 875 000; usage 375 000 / 1 125 000
GPU-IT  time-sliced x2: llm/qwen-0 (model Q = Qwen/Qwen2.5-7B-Instruct, SM 40 %) and
        search/mistral-0 (model M = mistralai/Mistral-7B-Instruct-v0.3, SM 20 %), 1/2 each:
        allocated 1.25 each, used 1.25 x 1440/1800 = 1.000000 and 1.25 x 720/1800 = 0.500000.
        No histograms: the weight rule.
        Q: input 100/s = 360 000, output 50/s = 180 000, weight 4 -> 360 000 : 720 000:
           allocation 1 250 000 -> 416 666.67 / 833 333.33 -> 416 667 / 833 333;
           usage 1 000 000 -> 333 333.33 / 666 666.67 -> 333 333 / 666 667
        M: input 50/s = 180 000, output 30/s = 108 000, weight 3 -> 180 000 : 324 000:
           allocation 1 250 000 -> 446 428.57 / 803 571.43 -> 446 429 / 803 571;
           usage 500 000 -> 178 571.43 / 321 428.57 -> 178 571 / 321 429
GPU-IP  whole, llm/ds-prefill-0 (llm-d.ai/role prefill), model D =
        deepseek-ai/DeepSeek-R1-Distill-Llama-8B, utilisation 50 % (used 1.25): prompt 300/s
        -> input 1 080 000; its one-token answers (generation 2/s) and requests are not D's
        output; all its cost is input cost (the role rule, over its histograms)
GPU-ID  whole, llm/ds-decode-0 (role decode), model D, utilisation 80 % (used 2.0):
        generation 150/s -> output 540 000, requests 2/s -> 7 200; its prompt counter (the
        prompts again) is not counted; all its cost is output cost
GPU-IN  whole, llm/batch-0, utilisation 70 %: no token series: 2.50 of chat's chargeback,
        no inference row
and a stray vLLM series scraped without namespace/pod labels: never priced.

Hour I2 = 15:00: only GPU-IA, llm/llama-0 at 20 % (used 0.5): prompt 50/s = 180 000,
generation 25/s = 90 000, requests 0.5/s = 1 800, prefill 0.1 s/s = 360 s, decode 0.4 s/s =
1 440 s: input 1/5 -> allocation 500 000 / 2 000 000, usage 100 000 / 400 000.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from costsvc.rules.cost_model import CostModel, parse

I1 = datetime(2026, 11, 20, 14, tzinfo=UTC)
I2 = datetime(2026, 11, 20, 15, tzinfo=UTC)
T1, T2 = int(I1.timestamp()), int(I2.timestamp())
H100 = "NVIDIA H100 80GB HBM3"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
QWEN = "Qwen/Qwen2.5-7B-Instruct"
MISTRAL = "mistralai/Mistral-7B-Instruct-v0.3"
DEEPSEEK = "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"
WEIGHTS = [
    {"effective_from": "2026-11-01T00:00:00Z", "output_weight": "3"},
    {"effective_from": "2026-11-01T00:00:00Z", "model": "Qwen/*", "output_weight": "4"},
]


def inference_model(*weights: dict[str, str]) -> CostModel:
    return parse(
        {
            "versions": [
                {
                    "effective_from": "2026-11-01T00:00:00Z",
                    "prices": [{"model": H100, "hourly": "2.50"}],
                }
            ],
            "inference": [*WEIGHTS, *weights],
        },
        "inference model",
    )


MODEL = inference_model()
Rates = list[tuple[int, int, Decimal]]  # [since, until) unix seconds, per second


class _History:
    def __init__(self) -> None:
        self.fam: dict[str, list[str]] = {}

    def add(self, name: str, labels: dict[str, str], value: object, start: int, stop: int) -> None:
        text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        self.fam.setdefault(name, []).extend(
            f"{name}{{{text}}} {value} {t}" for t in range(start, stop, 15)
        )

    def counter(
        self,
        name: str,
        labels: dict[str, str],
        rates: Rates,
        start: int,
        stop: int,
        since: int,
        base: Decimal = Decimal(0),
    ) -> None:
        """A counter counting at ``rates`` since ``since`` (from ``base``), sampled in
        [start, stop): exact decimals."""
        text = ",".join(f'{k}="{v}"' for k, v in labels.items())

        def value(t: int) -> Decimal:
            total = base
            for a, b, rate in rates:
                lo, hi = max(a, since), min(b, t)
                if hi > lo:
                    total += rate * (hi - lo)
            return total

        self.fam.setdefault(name, []).extend(
            f"{name}{{{text}}} {value(t)} {t}" for t in range(start, stop, 15)
        )

    def text(self) -> str:
        out = []
        for name, lines in self.fam.items():
            out.append(f"# TYPE {name} gauge")
            out.extend(lines)
        out.append("# EOF")
        return "\n".join(out) + "\n"


def gpu(uuid: str) -> dict[str, str]:
    return {"gpu": "0", "UUID": uuid, "modelName": H100, "Hostname": "node-i"}


def _held(
    h: _History,
    uuid: str,
    ns: str,
    pod: str,
    team: str,
    until: int,
    util: list[tuple[int, int, int]],
) -> None:
    """A whole GPU held by ``ns/pod`` from before I1 until ``until``, utilisation in pieces."""
    g = gpu(uuid)
    h.add("gpu_device_up", g, 1, T1 - 60, until)
    holder = {**g, "namespace": ns, "pod": pod, "container": "vllm", "resource": "nvidia.com/gpu"}
    h.add("gpu_allocation_share", holder, 1, T1 - 60, until)
    for start, stop, pct in util:
        h.add("DCGM_FI_DEV_GPU_UTIL", g, pct, start, stop)


def _labels(h: _History, ns: str, pod: str, team: str, until: int, role: str = "") -> None:
    labels = {"namespace": ns, "pod": pod, "label_team": team}
    if role:
        labels["label_llm_d_ai_role"] = role
    h.add("kube_pod_labels", labels, 1, T1 - 60, until)


def _vllm(
    h: _History,
    ns: str,
    pod: str,
    model: str,
    rates: dict[str, Rates],
    until: int,
    restart: int | None = None,
) -> None:
    """A vLLM pod's counters (``rates`` per series name; a request_success entry per
    finished_reason as ``request_success_total:<reason>``), sampled from before I1 to
    ``until`` (the sample at ``until`` included); ``restart``: the server restarts then and
    its counters start again from 0."""
    base = {"model_name": model, "engine": "0", "namespace": ns, "pod": pod}
    for key, pieces in rates.items():
        name, _, reason = key.partition(":")
        labels = {**base, "finished_reason": reason} if reason else base
        series = f"vllm:{name}"
        begin = T1 - 3600  # the server started an hour before I1
        if restart is None:
            h.counter(series, labels, pieces, T1 - 60, until + 15, since=begin)
        else:
            cut = restart - restart % 15 + 15  # the first scrape after the restart
            h.counter(series, labels, pieces, T1 - 60, cut, since=begin, base=Decimal(10**9))
            h.counter(series, labels, pieces, cut, until + 15, since=restart)


def d(text: str) -> Decimal:
    return Decimal(text)


def history() -> str:
    h = _History()
    half, end1, end2 = T1 + 1800, T1 + 3600, T2 + 3600

    # one model on a whole H100, varying load, two hours
    _held(
        h,
        "GPU-IA",
        "llm",
        "llama-0",
        "chat",
        end2,
        [(T1 - 60, half, 90), (half, end1, 30), (T2, end2, 20)],
    )
    _labels(h, "llm", "llama-0", "chat", end2)

    def two(a: str, b: str, c: str) -> Rates:  # I1's halves, then I2
        return [(0, half, d(a)), (half, T2, d(b)), (T2, end2, d(c))]

    _vllm(
        h,
        "llm",
        "llama-0",
        LLAMA,
        {
            "prompt_tokens_total": two("200", "40", "50"),
            "generation_tokens_total": two("100", "20", "25"),
            "request_success_total:stop": two("1.5", "0.4", "0.5"),
            "request_success_total:length": two("0.5", "0", "0"),
            "request_prefill_time_seconds_sum": two("0.5", "0.1", "0.1"),
            "request_decode_time_seconds_sum": two("1.5", "0.3", "0.4"),
        },
        end2,
    )

    # the same model on another GPU, with a restart at 14:29:50
    _held(h, "GPU-IR", "llm", "llama-1", "chat", end1, [(T1 - 60, end1, 60)])
    _labels(h, "llm", "llama-1", "chat", end1)

    def flat(rate: str) -> Rates:
        return [(0, end2, d(rate))]

    _vllm(
        h,
        "llm",
        "llama-1",
        LLAMA,
        {
            "prompt_tokens_total": flat("100"),
            "generation_tokens_total": flat("50"),
            "request_success_total:stop": flat("1"),
            "request_prefill_time_seconds_sum": flat("0.2"),
            "request_decode_time_seconds_sum": flat("0.6"),
        },
        end1,
        restart=T1 + 1790,
    )

    # two models time-sliced on one GPU (2 replicas)
    t = gpu("GPU-IT")
    h.add("gpu_device_up", t, 1, T1 - 60, end1)
    for ns, pod, team, sm in (
        ("llm", "qwen-0", "chat", 0.4),
        ("search", "mistral-0", "search", 0.2),
    ):
        holder = {**t, "namespace": ns, "pod": pod, "container": "vllm"}
        share = {**holder, "resource": "nvidia.com/gpu.shared"}
        h.add("gpu_allocation_share", share, 0.5, T1 - 60, end1)
        h.add("gpu_container_sm_utilization_ratio", holder, sm, T1 - 60, end1)
        _labels(h, ns, pod, team, end1)
    _vllm(
        h,
        "llm",
        "qwen-0",
        QWEN,
        {
            "prompt_tokens_total": flat("100"),
            "generation_tokens_total": flat("50"),
            "request_success_total:stop": flat("1"),
        },
        end1,
    )
    _vllm(
        h,
        "search",
        "mistral-0",
        MISTRAL,
        {
            "prompt_tokens_total": flat("50"),
            "generation_tokens_total": flat("30"),
            "request_success_total:stop": flat("0.5"),
        },
        end1,
    )

    # disaggregated prefill / decode pods of one model (llm-d)
    _held(h, "GPU-IP", "llm", "ds-prefill-0", "chat", end1, [(T1 - 60, end1, 50)])
    _labels(h, "llm", "ds-prefill-0", "chat", end1, role="prefill")
    _vllm(
        h,
        "llm",
        "ds-prefill-0",
        DEEPSEEK,
        {
            "prompt_tokens_total": flat("300"),
            "generation_tokens_total": flat("2"),
            "request_success_total:length": flat("2"),
            "request_prefill_time_seconds_sum": flat("0.9"),
            "request_decode_time_seconds_sum": flat("0.01"),
        },
        end1,
    )
    _held(h, "GPU-ID", "llm", "ds-decode-0", "chat", end1, [(T1 - 60, end1, 80)])
    _labels(h, "llm", "ds-decode-0", "chat", end1, role="decode")
    _vllm(
        h,
        "llm",
        "ds-decode-0",
        DEEPSEEK,
        {
            "prompt_tokens_total": flat("300"),
            "generation_tokens_total": flat("150"),
            "request_success_total:stop": flat("2"),
        },
        end1,
    )

    # a pod with no token series
    _held(h, "GPU-IN", "llm", "batch-0", "chat", end1, [(T1 - 60, end1, 70)])
    _labels(h, "llm", "batch-0", "chat", end1)

    # a stray vLLM series scraped without the pod's labels
    stray = {"model_name": "stray", "engine": "0"}
    h.counter("vllm:prompt_tokens_total", stray, flat("1000"), T1 - 60, end1 + 15, since=T1 - 60)
    return h.text()
