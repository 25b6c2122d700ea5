"""The FinOps dashboard's inference row: cost per million tokens by served model over time,
allocation vs usage basis, tokens per GPU-hour (docs/inference.md). The cost service's
per-model series of each ingested hour (docs/costsvc-metrics.md)."""

from __future__ import annotations

from dashboards.common import Panel, target, timeseries_panel
from dashboards.selectors import PER_SERVED_MODEL, SERVED_MODEL_TEAMS, SERVED_MODELS

RATE = "costsvc_inference_cost_per_million_tokens"
MODEL_LEGEND = "{{cluster}}/{{namespace}} / {{model}}"  # PER_SERVED_MODEL


def _rate(direction: str, basis: str) -> str:
    selector = f'{SERVED_MODELS}, direction="{direction}", basis="{basis}"'
    return f"max by ({PER_SERVED_MODEL}) ({RATE}{{{selector}}})"


def inference(money: str) -> list[Panel]:
    """Cost per 1M output and input tokens by model, allocation vs usage, tokens per GPU-hour."""
    return [
        timeseries_panel(
            "Cost per 1M output tokens by model",
            "costsvc_inference_cost_per_million_tokens, output tokens, allocation basis (what "
            "the serving pods held) and, dashed in the legend as usage, what they measurably "
            "used; each point an ingested hour.",
            target(_rate("output", "allocation"), MODEL_LEGEND),
            target(_rate("output", "usage"), MODEL_LEGEND + " (usage)"),
        )
        .unit(money)
        .decimals(3)
        .span(12),
        timeseries_panel(
            "Cost per 1M input tokens by model",
            "costsvc_inference_cost_per_million_tokens, input (prompt) tokens, allocation and "
            "usage basis.",
            target(_rate("input", "allocation"), MODEL_LEGEND),
            target(_rate("input", "usage"), MODEL_LEGEND + " (usage)"),
        )
        .unit(money)
        .decimals(3)
        .span(12),
        timeseries_panel(
            "Allocation vs usage cost per hour",
            "costsvc_inference_cost_per_hour by model and basis: the gap between the two is the "
            "serving pods' measured idle GPU cost.",
            target(
                f"sum by (model, basis) (costsvc_inference_cost_per_hour{{{SERVED_MODELS}}})",
                "{{model}} {{basis}}",
            ),
        )
        .unit(money)
        .decimals(2)
        .span(12),
        timeseries_panel(
            "Tokens per GPU-hour by model",
            "costsvc_inference_tokens_per_gpu_hour: input + output tokens a model delivered per "
            "GPU-hour its pods held; falling at the same cost means idle capacity "
            "(GET /v1/recommendations: replicas, mig).",
            target(
                f"max by ({PER_SERVED_MODEL}) "
                f"(costsvc_inference_tokens_per_gpu_hour{{{SERVED_MODEL_TEAMS}}})",
                MODEL_LEGEND,
            ),
        )
        .unit("short")
        .decimals(0)
        .span(12),
    ]
