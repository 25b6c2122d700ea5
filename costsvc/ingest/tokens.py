"""Each serving pod's tokens in one hour, from vLLM's and SGLang's counters.

The series, their types and labels, as the servers expose them (both register with
prometheus_client, which writes a counter as ``<name>_total`` and a histogram as
``_bucket``/``_sum``/``_count``):

- vLLM (vllm-project/vllm ``vllm/v1/metrics/loggers.py``, ``PrometheusStatLogger``): the
  counters ``vllm:prompt_tokens`` and ``vllm:generation_tokens`` (-> ``_total``),
  ``vllm:request_success`` (-> ``_total``, one series per ``finished_reason``) and the
  histograms ``vllm:request_prefill_time_seconds`` and ``vllm:request_decode_time_seconds``
  (each request's time in its PREFILL and DECODE phase: their ``_sum`` is a counter of
  seconds); labels ``model_name`` (the served model name) and ``engine`` (one series per
  data-parallel engine: they add up).
- SGLang (sgl-project/sglang ``python/sglang/srt/metrics/collector.py``,
  ``TokenizerMetricsCollector``): ``sglang:prompt_tokens_total``,
  ``sglang:generation_tokens_total``, ``sglang:num_requests_total``; labels ``model_name``
  and, in its disaggregated mode, ``engine_type`` (``prefill``, ``decode``, ``unified``).
  No prefill/decode time histogram: SGLang pods are split by role or weight.

The pod a series belongs to is the scrape's ``namespace`` and ``pod`` target labels (a
Kubernetes scrape config relabels ``__meta_kubernetes_namespace`` and
``__meta_kubernetes_pod_name`` into them: docs/inference.md); a series without them cannot
be joined to any pod's cost and is left out (logged). Label values are untrusted text:
stored without NUL and cut to the columns' size (253 characters, a role 64). Each series'
increase over the hour follows the one counter rule (:func:`costsvc.ingest.gauges.sampled.increase`:
resets count the new value; what a counter counted across a scrape gap is still the pod's,
it served it). A series
counts in an hour when it has a sample in it (a pod gone at the hour's start does not serve
in it; a pod up and serving nothing does, with 0 tokens). The series of one (pod, model) add
up; tokens and requests are rounded half to even once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal

from costsvc.inference.split import Served
from costsvc.ingest.gauges.sampled import increase, max_gap_for
from costsvc.ingest.hour import MAX_GAP, SCRAPE_GAP, cluster_label, us
from costsvc.ingest.prom import PrometheusReader
from costsvc.kit.money import round_micro
from kube.label_names import sanitize_label

log = logging.getLogger(__name__)

# (engine, what) -> the exposed series name
SERIES = {
    ("vllm", "input"): "vllm:prompt_tokens_total",
    ("vllm", "output"): "vllm:generation_tokens_total",
    ("vllm", "requests"): "vllm:request_success_total",
    ("vllm", "prefill"): "vllm:request_prefill_time_seconds_sum",
    ("vllm", "decode"): "vllm:request_decode_time_seconds_sum",
    ("sglang", "input"): "sglang:prompt_tokens_total",
    ("sglang", "output"): "sglang:generation_tokens_total",
    ("sglang", "requests"): "sglang:num_requests_total",
}
WHAT = {name: key for key, name in SERIES.items()}
# every series above in one range selector: one read per hour
SELECTOR = '{__name__=~"' + "|".join(SERIES.values()) + '"}'
SGLANG_ROLES = ("prefill", "decode")  # SGLang's engine_type values that are roles
Key = tuple[str, str, str, str, str]  # cluster, namespace, pod, model, engine


def collect_served(
    prom: PrometheusReader,
    start: datetime,
    default_cluster: str,
    pod_labels: Mapping[tuple[str, str, str], Mapping[str, str]],
    role_keys: Sequence[str],
) -> list[Served]:
    """The hour's :class:`Served` facts, one per (pod, model, engine) with a counter series
    in the hour (its counts raw: the role rule is applied when priced, costsvc/inference/split.py).
    ``pod_labels``: the hour's pod labels, keys sanitised (kube-state-metrics' form), for
    the role (``role_keys``: the cost model's ``labels.role``)."""
    at = start + timedelta(hours=1) - timedelta(microseconds=1)
    t0 = Decimal(str(start.timestamp()))
    t1 = t0 + 3600
    sums: dict[Key, dict[str, Decimal]] = {}
    engine_type: dict[Key, str] = {}
    unjoined = 0
    for s in prom.raw(SELECTOR, at, 3600 + int(MAX_GAP)):
        lab = s.labels
        engine, what = WHAT[lab["__name__"]]
        namespace, pod = stored_text(lab.get("namespace", "")), stored_text(lab.get("pod", ""))
        model = stored_text(lab.get("model_name", ""))
        if not namespace or not pod or not model:
            unjoined += 1
            continue
        if not any(t0 < t <= t1 for t, _ in s.samples):
            continue  # it ended at the hour's start (the look-back): not serving in this hour
        key = (cluster_label(lab, default_cluster), namespace, pod, model, engine)
        gap = max_gap_for(s.samples, SCRAPE_GAP, MAX_GAP)
        found = sums.setdefault(key, {})
        found[what] = found.get(what, Decimal(0)) + increase(s.samples, t0, t1, gap).total
        if lab.get("engine_type") in SGLANG_ROLES:
            engine_type[key] = lab["engine_type"]
    if unjoined:
        log.warning(
            "%s: %d token series without namespace, pod or model_name labels: not priced "
            "(docs/inference.md: the scrape's relabelling)",
            start.isoformat(),
            unjoined,
        )
    keys = [sanitize_label(k) for k in role_keys]
    out = []
    for key, found in sorted(sums.items()):
        cluster, namespace, pod, model, engine = key
        labels = pod_labels.get((cluster, namespace, pod), {})
        role = next((labels[k] for k in keys if labels.get(k)), engine_type.get(key, ""))
        role = stored_text(role, 64)
        out.append(
            Served(
                cluster,
                namespace,
                pod,
                model,
                engine,
                role,
                _count(found.get("input")),
                _count(found.get("output")),
                _count(found.get("requests")),
                _seconds(found.get("prefill")),
                _seconds(found.get("decode")),
            )
        )
    return out


def stored_text(value: str, limit: int = 253) -> str:
    """A label value as stored: untrusted text, so no NUL (PostgreSQL text cannot hold it)
    and at most ``limit`` characters (the columns' size)."""
    return value.replace("\x00", "\N{REPLACEMENT CHARACTER}")[:limit]


def _count(value: Decimal | None) -> int:
    if value is None:
        return 0
    return round_micro(value)


def _seconds(value: Decimal | None) -> Decimal | None:
    return None if value is None else us(value)
