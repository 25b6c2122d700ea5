"""The demo's inference deployment: simulated vLLM and SGLang ``/metrics`` for serving pods
of the demo's fleet (examples/fleet-dra.yaml: ``ml-serving/chat-a`` and ``chat-b``, two vLLM
replicas of one chat model sharing a GPU through a DRA claim, and ``ml-serving/summarizer``,
an SGLang server of another model on the same GPU).

The series are the ones the servers expose (costsvc/ingest/tokens.py cites the sources):
vLLM's ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
``vllm:request_success_total{finished_reason}`` and the histograms
``vllm:request_prefill_time_seconds`` / ``vllm:request_decode_time_seconds`` (vLLM's request
latency buckets), labels ``model_name`` and ``engine``; SGLang's
``sglang:prompt_tokens_total``, ``sglang:generation_tokens_total``,
``sglang:num_requests_total`` with ``model_name`` and ``engine_type``. Each counter is the
exact integral of a load curve (a mean rate swinging by ``swing`` over ``period`` seconds),
so the history (:func:`scrapes`, kept with the exporters' expositions) and the live server
(:class:`ServedMetrics`, one port, a path per pod) count on without a break. Prometheus
scrapes each pod as its own target with the ``namespace`` and ``pod`` labels a Kubernetes
scrape config relabels from ``__meta_kubernetes_namespace`` / ``__meta_kubernetes_pod_name``
(:func:`scrape_config`; docs/inference.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from demo.stack import MetricsServer
from exporter.simulate.spec import FleetSpec, load

JOB = "vllm"
# vLLM's request_latency_buckets (vllm/v1/metrics/loggers.py), and the share of requests
# at or under each in this simulation
BUCKETS: tuple[float, ...] = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0)
BUCKETS += (40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


@dataclass(frozen=True, slots=True)
class ServedPod:
    namespace: str
    pod: str
    model: str
    engine: str  # vllm | sglang
    prompt_rate: float  # mean tokens per second
    output_rate: float
    request_rate: float
    prefill_s: float  # seconds of prefill per request (vLLM's histogram)
    decode_s: float
    period: float = 5400.0
    phase: float = 0.0
    swing: float = 0.6  # the load swings +-60 % around the mean

    def counted(self, mean: float, t: float) -> float:
        """∫ mean x (1 + swing x sin(2π (u + phase) / period)) du over [0, t]."""
        w = 2 * math.pi / self.period
        wave = (math.cos(w * self.phase) - math.cos(w * (t + self.phase))) / w
        return mean * (t + self.swing * wave)


SERVED = (
    ServedPod(
        "ml-serving", "chat-a", "meta-llama/Llama-3.1-8B-Instruct", "vllm",
        prompt_rate=220.0, output_rate=90.0, request_rate=0.8, prefill_s=0.35, decode_s=2.8,
    ),
    ServedPod(
        "ml-serving", "chat-b", "meta-llama/Llama-3.1-8B-Instruct", "vllm",
        prompt_rate=160.0, output_rate=70.0, request_rate=0.6, prefill_s=0.35, decode_s=2.8,
        phase=2700.0,
    ),
    ServedPod(
        "ml-serving", "summarizer", "Qwen/Qwen2.5-7B-Instruct", "sglang",
        prompt_rate=600.0, output_rate=45.0, request_rate=0.2, prefill_s=0.0, decode_s=0.0,
        period=7200.0,
    ),
)  # fmt: skip


def _number(value: float) -> str:
    return repr(float(value))


def _counter(name: str, help_text: str, samples: list[tuple[str, float]], om: bool) -> list[str]:
    """A counter family: text 0.0.4 names it ``<name>`` (``_total`` included), as
    prometheus_client writes it; OpenMetrics names the family without ``_total``."""
    family = name.removesuffix("_total") if om else name
    return [
        f"# HELP {family} {help_text}",
        f"# TYPE {family} counter",
        *(f"{name}{{{labels}}} {_number(value)}" for labels, value in samples),
    ]


def exposition(pod: ServedPod, t: float, om: bool = False) -> str:
    """The pod's ``/metrics`` at ``t`` seconds since the fleet's epoch: the text format
    0.0.4, or (``om``) OpenMetrics for the history (without its ``# EOF``)."""
    base = f'model_name="{pod.model}"'
    # whole tokens and requests, as the servers count them
    prompt = math.floor(pod.counted(pod.prompt_rate, t))
    output = math.floor(pod.counted(pod.output_rate, t))
    requests = math.floor(pod.counted(pod.request_rate, t))
    stop = math.floor(requests * 0.9)
    sglang = pod.engine == "sglang"
    labels = f'{base},engine_type="unified"' if sglang else f'{base},engine="0"'
    lines: list[str] = []
    for name, text, value in (  # both engines count tokens alike, under their own prefix
        ("prompt_tokens_total", "Number of prefill tokens processed.", prompt),
        ("generation_tokens_total", "Number of generation tokens processed.", output),
    ):
        lines += _counter(f"{'sglang' if sglang else 'vllm'}:{name}", text, [(labels, value)], om)
    if sglang:
        text = "Number of requests processed."
        lines += _counter("sglang:num_requests_total", text, [(labels, requests)], om)
        return "\n".join(lines) + "\n"
    ended: list[tuple[str, float]] = [
        (f'{labels},finished_reason="stop"', stop),
        (f'{labels},finished_reason="length"', requests - stop),
    ]
    text = "Count of successfully processed requests."
    lines += _counter("vllm:request_success_total", text, ended, om)
    for phase, per_request in (("prefill", pod.prefill_s), ("decode", pod.decode_s)):
        name = f"vllm:request_{phase}_time_seconds"
        lines += [
            f"# HELP {name} Histogram of time spent in {phase.upper()} phase for request.",
            f"# TYPE {name} histogram",
        ]
        for le in BUCKETS:  # requests spread evenly up to twice the mean time
            share = min(1.0, le / (2 * per_request))
            count = math.floor(requests * share)
            lines.append(f'{name}_bucket{{{labels},le="{le}"}} {_number(count)}')
        lines += [
            f'{name}_bucket{{{labels},le="+Inf"}} {_number(requests)}',
            f"{name}_count{{{labels}}} {_number(requests)}",
            f"{name}_sum{{{labels}}} {_number(requests * per_request)}",
        ]
    return "\n".join(lines) + "\n"


def _alive(fleets: list[FleetSpec], pod: ServedPod, t: float) -> bool:
    return any(
        p.namespace == pod.namespace and p.name == pod.pod and p.alive(t)
        for f in fleets
        for p in f.pods
    )


def target_labels(pod: ServedPod, port: int) -> str:
    """The labels Prometheus puts on the pod's series as :func:`scrape_config` scrapes it from
    ``127.0.0.1:port`` (job, instance, namespace, pod): history and live are one series."""
    return f'job="{JOB}",instance="127.0.0.1:{port}",namespace="{pod.namespace}",pod="{pod.pod}"'


def scrapes(fleets: list[FleetSpec], t: float, port: int) -> list[tuple[str, str]]:
    """(exposition, target labels) of every served pod alive at ``t`` (seconds since the
    epoch of ``fleets``): what Prometheus would have scraped then."""
    return [
        (exposition(p, t, om=True), target_labels(p, port)) for p in SERVED if _alive(fleets, p, t)
    ]


def path(pod: ServedPod) -> str:
    return f"/pods/{pod.namespace}/{pod.pod}/metrics"


def scrape_config(port: int) -> str:
    """A Prometheus job scraping each served pod at its path, with its namespace and pod as
    target labels (YAML text of one ``scrape_configs`` entry)."""
    groups = "".join(
        f'      - targets: ["127.0.0.1:{port}"]\n'
        f"        labels: {{namespace: {p.namespace}, pod: {p.pod}, "
        f"__metrics_path__: {path(p)}}}\n"
        for p in SERVED
    )
    return f"  - job_name: {JOB}\n    static_configs:\n{groups}"


class ServedMetrics(MetricsServer):
    """The served pods' ``/metrics`` live (t = now - ``epoch``), one path per pod; a pod not
    alive now (its spec's times) answers 404, as a pod that is gone would not answer."""

    def __init__(self, specs: list[Path], epoch: datetime, port: int) -> None:
        fleets = [load(p) for p in specs]
        start = epoch.timestamp()
        by_path = {path(p): p for p in SERVED}

        def answer(at: str) -> str | None:
            pod, t = by_path.get(at), time.time() - start
            return None if pod is None or not _alive(fleets, pod, t) else exposition(pod, t)

        super().__init__(port, answer)
