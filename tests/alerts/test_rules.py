"""The Prometheus alert rules in alerts/: promtool accepts them, their promtool unit tests pass,
every alert is tested both firing and quiet, carries severity and runbook annotations, and
queries only series that exist (exporter, cost service, kube-state-metrics, `up`)."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import require_binary

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "alerts"
RULE_FILES = sorted(ALERTS.glob("*.rules.yml"))
TEST_FILES = sorted((ALERTS / "tests").glob("*.yml"))
README = ALERTS / "README.md"
METRICS_DOC = REPO / "docs" / "metrics.md"

SEVERITIES = {"critical", "warning", "info"}
REQUIRED_ANNOTATIONS = ("summary", "description", "runbook", "runbook_url")

# Series the rules may query. Exporter names must also be documented in docs/metrics.md
# (checked below), so a renamed exporter series fails here rather than in production.
EXPORTER_METRICS = frozenset(
    {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_FB_TOTAL",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "DCGM_FI_DEV_POWER_VIOLATION",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "gpu_device_up",
        "gpu_device_info",
        "gpu_mig_instance_info",
        "gpu_allocation_share",
        "gpu_allocation_oversubscribed",
        "gpu_exporter_dra_devices",
        "gpu_container_sm_utilization_ratio",
        "gpu_container_memory_used_bytes",
        "gpu_xid_errors_total",
        "gpu_clock_event_reason_active",
        "gpu_exporter_last_success_timestamp_seconds",
        "gpu_exporter_nvml_up",
        "gpu_exporter_errors_total",
    }
)
# Gauges and counters the cost service exports (job gpu-costsvc).
COSTSVC_METRICS = frozenset(
    {
        "costsvc_hourly_efficiency_ratio",
        "costsvc_budget_used_ratio",
        "costsvc_budget_forecast_ratio",
        "costsvc_budget_energy_used_ratio",
        "costsvc_pod_budget_share_ratio",
        "costsvc_ingest_lag_seconds",
        "costsvc_ingest_errors_total",
        "costsvc_ingest_failed_hours",
        "costsvc_recommendation_savings_monthly",
        "costsvc_quota_used_ratio",
        "costsvc_quota_held_units",
        "costsvc_quota_active_units",
        "costsvc_inference_weekly_cost_per_million_tokens",
    }
)
# The inference servers' token counters (docs/inference.md): vLLM's and SGLang's own names.
INFERENCE_SERVER_METRICS = frozenset(
    {
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
    }
)
KUBE_STATE_METRICS = frozenset(
    {
        "kube_pod_status_phase",
        "kube_pod_container_resource_requests",
        "kube_pod_info",
        "kube_node_status_allocatable",
    }
)
PROMETHEUS_METRICS = frozenset({"up"})
# Kueue's own (kubernetes-sigs/kueue pkg/metrics/metrics.go; docs/queues.md)
KUEUE_METRICS = frozenset(
    {
        "kueue_cluster_queue_nominal_quota",
        "kueue_cluster_queue_resource_usage",
        "kueue_pending_workloads",
    }
)
ALLOWED_METRICS = (
    KUEUE_METRICS
    | EXPORTER_METRICS
    | COSTSVC_METRICS
    | KUBE_STATE_METRICS
    | PROMETHEUS_METRICS
    | INFERENCE_SERVER_METRICS
)

PROMQL_KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "atan2",
        "inf",
        "nan",
    }
)
_STRING = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|`[^`]*`")
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
# An identifier not glued to a preceding word character, digit or dot (so 1e6 and 15m are
# numbers and durations, not names), optionally followed by "(" (then it is a function).
_IDENT = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """Metric names referenced by a PromQL expression (conservative: anything that is not a
    function call, keyword, label, string, duration or number counts as a metric name)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _LABEL_LISTS.sub(" ", text)
    names = set()
    for m in _IDENT.finditer(text):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in PROMQL_KEYWORDS:
            continue
        names.add(word)
    return names


@cache
def _rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            rules.extend(group["rules"])
    return rules


def _alerts() -> list[dict[str, Any]]:
    return [r for r in _rules() if "alert" in r]


@cache
def _rule_tests() -> list[tuple[str, str, bool]]:
    """(test file, alertname, fires?) for every alert_rule_test case."""
    cases = []
    for path in TEST_FILES:
        doc = yaml.safe_load(path.read_text())
        for test in doc.get("tests") or []:
            for case in test.get("alert_rule_test") or []:
                cases.append((path.name, case["alertname"], bool(case.get("exp_alerts"))))
    return cases


def _github_anchors(markdown: str) -> set[str]:
    anchors = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            anchors.add(slug)
    return anchors


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)


def test_rule_and_test_files_exist() -> None:
    assert RULE_FILES, "no alerts/*.rules.yml"
    assert TEST_FILES, "no alerts/tests/*.yml"
    assert _alerts()


def test_promtool_check_rules_clean() -> None:
    promtool = require_binary("promtool")
    proc = _run(promtool, "check", "rules", *map(str, RULE_FILES))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "warn" not in output.lower(), output
    assert output.count("SUCCESS") == len(RULE_FILES), output


def test_promtool_unit_tests_pass() -> None:
    promtool = require_binary("promtool")
    proc = _run(promtool, "test", "rules", *map(str, TEST_FILES))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_alert_names_are_unique() -> None:
    names = [r["alert"] for r in _alerts()]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("fires", [True, False], ids=["firing", "quiet"])
def test_every_alert_is_tested(fires: bool) -> None:
    tested = {name for _, name, f in _rule_tests() if f is fires}
    missing = sorted({r["alert"] for r in _alerts()} - tested)
    state = "firing (non-empty exp_alerts)" if fires else "quiet (empty exp_alerts)"
    assert not missing, f"alerts without a promtool test case where they are {state}: {missing}"


def test_tests_name_only_defined_alerts() -> None:
    defined = {r["alert"] for r in _alerts()}
    unknown = sorted({(f, n) for f, n, _ in _rule_tests() if n not in defined})
    assert not unknown, f"promtool tests for alerts that do not exist: {unknown}"


def test_every_alert_has_severity_and_runbook() -> None:
    anchors = _github_anchors(README.read_text())
    for rule in _alerts():
        name = rule["alert"]
        assert rule.get("labels", {}).get("severity") in SEVERITIES, name
        annotations = rule.get("annotations", {})
        for key in REQUIRED_ANNOTATIONS:
            assert str(annotations.get(key, "")).strip(), f"{name}: annotation {key} missing"
        url = annotations["runbook_url"]
        assert url == f"alerts/README.md#{name.lower()}", f"{name}: runbook_url {url}"
        assert name.lower() in anchors, f"{name}: no README section with anchor #{name.lower()}"


def test_readme_table_lists_every_alert() -> None:
    text = README.read_text()
    for rule in _alerts():
        name, severity = rule["alert"], rule["labels"]["severity"]
        cell = rf"\[?`?{name}`?\]?(?:\(#{name.lower()}\))?"
        row = re.search(rf"^\|\s*{cell}\s*\|\s*{severity}\s*\|", text, re.MULTILINE)
        assert row, f"{name} ({severity}) missing from the table in alerts/README.md"


def test_metric_name_parser() -> None:
    expr = (
        'max by (Hostname, UUID) (rate(foo_total{a="b(c)"}[5m] offset 15m)) * 1e6 > 0.5 '
        "+ on (Hostname) group_left () bar and time() - baz > 60 unless absent(up)"
        ' or label_replace(qux, "x", "$1", "y", "(.*)")'
    )
    assert metric_names(expr) == {"foo_total", "bar", "baz", "up", "qux"}


def test_rules_query_only_known_series() -> None:
    for rule in _rules():
        unknown = metric_names(str(rule["expr"])) - ALLOWED_METRICS
        assert not unknown, f"{rule.get('alert', rule.get('record'))}: unknown series {unknown}"


def test_allowed_exporter_series_are_documented() -> None:
    documented = set(re.findall(r"`([A-Za-z_:][\w:]*)`", METRICS_DOC.read_text()))
    assert not sorted(EXPORTER_METRICS - documented)


def test_exporter_and_costsvc_job_names() -> None:
    jobs = set()
    for rule in _rules():
        jobs |= set(re.findall(r'job\s*=\s*"([^"]+)"', str(rule["expr"])))
    assert jobs <= {"gpu-exporter", "gpu-costsvc"}
