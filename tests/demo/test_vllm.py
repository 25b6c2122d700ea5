"""The demo's simulated vLLM/SGLang metrics (demo/vllm.py): the servers' series names, types
and labels, counters that only go up, the OpenMetrics form of the history, the live server
one path per pod, and the scrape job with the pods' namespace and pod labels."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import yaml
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from demo.history import ROOT
from demo.vllm import SERVED, ServedMetrics, exposition, path, scrape_config, scrapes
from exporter.simulate.spec import load
from tests.prom import free_port

VLLM = {
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
}
SGLANG = {
    "sglang:prompt_tokens": "counter",
    "sglang:generation_tokens": "counter",
    "sglang:num_requests": "counter",
}


def _values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_the_servers_series_and_counters_that_only_go_up() -> None:
    for pod in SERVED:
        text = exposition(pod, 3600.0)
        types = {f.name: f.type for f in text_string_to_metric_families(text)}
        assert types == (VLLM if pod.engine == "vllm" else SGLANG)
        earlier, later = _values(exposition(pod, 3000.0)), _values(text)
        assert set(earlier) == set(later)
        assert all(later[k] >= earlier[k] for k in later), pod
        assert all(dict(k[1])["model_name"] == pod.model for k in later)
        if pod.engine == "vllm":
            labels = (("engine", "0"), ("model_name", pod.model))
            prompt = later[("vllm:prompt_tokens_total", labels)]
            # the mean rate over the first hour is within the swing of the curve's mean
            assert 0.3 * pod.prompt_rate * 3600 < prompt < 1.7 * pod.prompt_rate * 3600
            count = later[("vllm:request_prefill_time_seconds_count", labels)]
            assert later[("vllm:request_prefill_time_seconds_sum", labels)] == (
                count * pod.prefill_s
            )


def test_the_history_form_is_openmetrics_for_the_pods_alive() -> None:
    fleets = [load(ROOT / "examples" / "fleet-dra.yaml")]
    found = scrapes(fleets, 600.0, 9405)
    assert [extra for _, extra in found] == [
        f'job="vllm",instance="127.0.0.1:9405",namespace="{p.namespace}",pod="{p.pod}"'
        for p in SERVED
    ]
    for body, _ in found:
        families = list(openmetrics_families(body + "# EOF\n"))
        assert {f.name for f in families} <= set(VLLM) | set(SGLANG)
    assert scrapes([], 600.0, 9405) == []  # no fleet holds the pods: no series


def test_the_live_server_and_its_scrape_job() -> None:
    port = free_port()
    spec = ROOT / "examples" / "fleet-dra.yaml"
    server = ServedMetrics([spec], datetime.now(UTC) - timedelta(hours=1), port)
    try:
        for pod in SERVED:
            r = httpx.get(f"http://127.0.0.1:{port}{path(pod)}", timeout=10)
            assert r.status_code == 200 and pod.model in r.text
        assert httpx.get(f"http://127.0.0.1:{port}/pods/x/y/metrics", timeout=10).status_code == 404
    finally:
        server.stop()
    job = yaml.safe_load("scrape_configs:\n" + scrape_config(port))["scrape_configs"][0]
    assert [g["labels"] for g in job["static_configs"]] == [
        {"namespace": p.namespace, "pod": p.pod, "__metrics_path__": path(p)} for p in SERVED
    ]
