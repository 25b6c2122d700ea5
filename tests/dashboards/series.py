"""The series the dashboards may use (our exporter's, the cost service's, kube-state-metrics'),
and the series names a PromQL expression reads (tests/dashboards/test_dashboards.py,
tests/costsvc/test_e2e.py)."""

from __future__ import annotations

import re

# ------------------------------------------------------------------ series the dashboards may use

NVLINK_COUNTERS = ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")
EXPORTER_METRICS = frozenset(
    {
        # DCGM-compatible (docs/metrics.md)
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_FB_TOTAL",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "DCGM_FI_DEV_POWER_VIOLATION",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",
        "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
        "DCGM_FI_DEV_LOW_UTIL_VIOLATION",
        "DCGM_FI_DEV_RELIABILITY_VIOLATION",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        *(f"DCGM_FI_DEV_NVLINK_{k}_ERROR_COUNT_TOTAL" for k in NVLINK_COUNTERS),
        # our own per-GPU series
        "gpu_device_up",
        "gpu_device_info",
        "gpu_mig_instance_info",
        "gpu_allocation_share",
        "gpu_container_sm_utilization_ratio",
        "gpu_container_memory_used_bytes",
        "gpu_unattributed_processes",
        "gpu_xid_errors_total",
        "gpu_clock_event_reason_active",
        # exporter self-metrics
        "gpu_exporter_build_info",
        "gpu_exporter_collections_total",
        "gpu_exporter_collection_duration_seconds",
        "gpu_exporter_last_collection_duration_seconds",
        "gpu_exporter_last_render_duration_seconds",
        "gpu_exporter_last_success_timestamp_seconds",
        "gpu_exporter_nvml_up",
        "gpu_exporter_gpus",
        "gpu_exporter_unknown_device_ids",
        "gpu_exporter_errors_total",
    }
)
# per-link NVLink counters (collector nvlink_links), documented as L0 … L17
NVLINK_LINK_METRICS = frozenset(
    f"DCGM_FI_DEV_NVLINK_{k}_ERROR_COUNT_L{i}" for k in NVLINK_COUNTERS for i in range(18)
)
COSTSVC_METRICS = frozenset(
    {
        "costsvc_cost_month_to_date",
        "costsvc_cost_rate_per_hour",
        "costsvc_waste_month_to_date",
        "costsvc_idle_cost_month_to_date",
        "costsvc_efficiency_ratio",
        "costsvc_hourly_efficiency_ratio",
        "costsvc_budget_amount",
        "costsvc_budget_used_ratio",
        "costsvc_budget_forecast_ratio",
        "costsvc_cost_forecast_month_end",
        "costsvc_pod_cost_month_to_date",
        "costsvc_pod_waste_month_to_date",
        "costsvc_ingest_lag_seconds",
        "costsvc_last_ingest_success_timestamp_seconds",
        "costsvc_energy_month_to_date_joules",
        "costsvc_carbon_month_to_date_grams",
        "costsvc_idle_energy_month_to_date_joules",
        "costsvc_gpu_model_energy_month_to_date_joules",
        "costsvc_gpu_model_carbon_month_to_date_grams",
        "costsvc_budget_energy_used_ratio",
        "costsvc_recommendation_savings_monthly",
        "costsvc_workload_savings_monthly",
        "costsvc_quota_hard_units",
        "costsvc_quota_held_units",
        "costsvc_quota_active_units",
        "costsvc_quota_used_ratio",
        "costsvc_quota_unused_cost_monthly",
        "costsvc_quota_held_idle_cost_monthly",
        "costsvc_inference_cost_per_million_tokens",
        "costsvc_inference_cost_per_hour",
        "costsvc_inference_tokens_per_gpu_hour",
    }
)
KUBE_STATE_METRICS = frozenset(
    {
        "kube_pod_labels",
        "kube_namespace_labels",
        "kube_pod_info",
        "kube_node_labels",
    }
)
# Kueue's own (kubernetes-sigs/kueue pkg/metrics/metrics.go; docs/queues.md)
KUEUE_METRICS = frozenset(
    {
        "kueue_cluster_queue_nominal_quota",
        "kueue_cluster_queue_resource_usage",
        "kueue_pending_workloads",
    }
)
ALLOWED_METRICS = (
    EXPORTER_METRICS
    | NVLINK_LINK_METRICS
    | COSTSVC_METRICS
    | KUBE_STATE_METRICS
    | KUEUE_METRICS
    | {"up"}
)

# Words in PromQL that are not series names when not followed by "(".
_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "and",
    "or",
    "unless",
    "atan2",
    "inf",
    "nan",
    "Inf",
    "NaN",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_WORD = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """Series names in a PromQL expression: every bare identifier that is not a function,
    keyword, label (inside {}, by/on/... lists or strings) or duration (inside [])."""
    s = _STRING.sub('""', expr)
    s = re.sub(r"\{[^{}]*\}", " ", s)
    s = re.sub(r"\[[^\[\]]*\]", " ", s)
    s = _GROUPING.sub(r"\1", s)
    return {
        word
        for word, call in _WORD.findall(s)
        if not call and word not in _KEYWORDS and not re.fullmatch(r"\d.*", word)
    }


_BRACES = re.compile(r'\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\}')


def vector_selectors(expr: str) -> list[tuple[str, str]]:
    """(series name, its matchers' text: "" when bare) of every vector selector in a PromQL
    expression, in order; the same names as :func:`metric_names`."""
    braces: list[str] = []

    def hide(m: re.Match[str]) -> str:
        braces.append(m.group(0)[1:-1])
        return f" \x00{len(braces) - 1}\x00"

    s = _BRACES.sub(hide, expr)
    s = _STRING.sub('""', s)
    s = re.sub(r"\[[^\[\]]*\]", " ", s)
    s = _GROUPING.sub(r"\1", s)
    out = []
    for m in re.finditer(r"(?<![\w.:$\x00])([A-Za-z_:][\w:]*)(\s*\()?(\s*\x00(\d+)\x00)?", s):
        word, call, _, brace = m.groups()
        if call or word in _KEYWORDS or re.fullmatch(r"\d.*", word):
            continue
        out.append((word, braces[int(brace)] if brace is not None else ""))
    return out
