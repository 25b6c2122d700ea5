"""GPU rightsizing and quotas: what could each team save, and how do GPU quotas compare with
the GPUs held and used? Reads the cost service's advice series (docs/costsvc-metrics.md)."""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as models

from dashboards.common import (
    MONEY,
    Panel,
    add_row,
    bargauge_panel,
    basic_bars,
    board,
    finish,
    query_variable,
    ratio,
    stat_panel,
    table_panel,
    target,
    team_links,
    thresholds,
    timeseries_panel,
    value_columns,
)
from dashboards.selectors import (
    PER_RECOMMENDATION,
    PER_TEAM_RESOURCE,
    QUOTAS,
    SAVINGS,
)

TEAM_SAVINGS = f"costsvc_recommendation_savings_monthly{{{SAVINGS}}}"
WORKLOAD_SAVINGS = f"costsvc_workload_savings_monthly{{{SAVINGS}}}"
HARD = f"costsvc_quota_hard_units{{{QUOTAS}}}"
HELD = f"costsvc_quota_held_units{{{QUOTAS}}}"
ACTIVE = f"costsvc_quota_active_units{{{QUOTAS}}}"
USED_RATIO = f"costsvc_quota_used_ratio{{{QUOTAS}}}"
UNUSED_COST = f'costsvc_quota_unused_cost_monthly{{{QUOTAS}, currency=~"$currency"}}'
IDLE_COST = f'costsvc_quota_held_idle_cost_monthly{{{QUOTAS}, currency=~"$currency"}}'
# the top-savings table, by itself (the end-to-end test reads it against the API)
TOP_SAVINGS = f"topk(20, sum by ({PER_RECOMMENDATION}) ({WORKLOAD_SAVINGS}))"
# quota, held and used per team and resource
QUOTA_BY_TEAM = f"sum by ({PER_TEAM_RESOURCE}) ({HARD})"
HELD_BY_TEAM = f"sum by ({PER_TEAM_RESOURCE}) ({HELD})"
ACTIVE_BY_TEAM = f"sum by ({PER_TEAM_RESOURCE}) ({ACTIVE})"


def rightsizing() -> models.Dashboard:
    """The rightsizing and quota dashboard, money in the currency of the `currency` variable."""
    money = MONEY
    b = board(
        "gpu-finops-rightsizing",
        "GPU rightsizing and quotas",
        "What each team could save by moving workloads to a MIG profile, a time-slice, a "
        "cheaper GPU model or by releasing idle GPUs (gpu-costsvc recommendations), and GPU "
        "ResourceQuotas against the GPUs held and in use, with the cost of quota nobody used.",
        ["finops", "rightsizing", "quota"],
        [
            query_variable(
                "currency",
                "Currency",
                "label_values(costsvc_recommendation_savings_monthly"
                '{cluster=~"$cluster"}, currency)',
                multi=False,
                include_all=False,
            ),
            query_variable(
                "team",
                "Team",
                "label_values(costsvc_recommendation_savings_monthly"
                '{cluster=~"$cluster", currency=~"$currency"}, team)',
            ),
            query_variable(
                "namespace",
                "Namespace",
                "label_values(costsvc_quota_held_units"
                '{cluster=~"$cluster", team=~"$team"}, namespace)',
            ),
        ],
        "costsvc_recommendation_savings_monthly",
    )
    add_row(b, "Savings", savings(money))
    add_row(b, "Quotas", quotas(money))
    return finish(b)


def savings(money: str) -> list[Panel]:
    return [
        stat_panel(
            "Savings available per month",
            "Sum of costsvc_recommendation_savings_monthly: every recommendation of the "
            "selected teams applied, the monthly saving at the cost model's prices.",
            target(f"sum({TEAM_SAVINGS})"),
        )
        .unit(money)
        .decimals(0)
        .thresholds(thresholds((1000, "orange")))
        .span(6)
        .height(6),
        basic_bars(
            bargauge_panel(
                "Savings by team",
                "Monthly saving available per team.",
                target(f"sum by (team) ({TEAM_SAVINGS})", "{{team}}", instant=True),
            )
        )
        .unit(money)
        .data_links(team_links())
        .decimals(0)
        .span(9)
        .height(6),
        timeseries_panel(
            "Savings available over time",
            "Monthly saving available per team, as recomputed every hour over the last 7 days.",
            target(f"sum by (team) ({TEAM_SAVINGS})", "{{team}}"),
        )
        .unit(money)
        .data_links(team_links())
        .span(9)
        .height(6),
        table_panel(
            "Top savings",
            "The biggest recommendations (each team's ten biggest are exported): workload, GPU "
            "model, action (release, mig, timeslice, model), target and monthly saving. "
            "Details and evidence: GET /v1/recommendations.",
            target(TOP_SAVINGS, table=True),
            columns=value_columns("Saving / month"),
        )
        .with_transformation(
            models.DataTransformerConfig(
                id_val="sortBy", options={"sort": [{"desc": True, "field": "Saving / month"}]}
            )
        )
        .unit(money)
        .decimals(2)
        .span(24),
    ]


def quotas(money: str) -> list[Panel]:
    return [
        table_panel(
            "Quota vs held vs used per team",
            "Per team and GPU resource: ResourceQuota hard limit (summed over its namespaces), "
            "mean units held and mean units in use over the last 7 days.",
            target(QUOTA_BY_TEAM, table=True),
            target(HELD_BY_TEAM, table=True),
            target(ACTIVE_BY_TEAM, table=True),
            columns=value_columns("Quota", "Held", "In use"),
        )
        .decimals(2)
        .span(12),
        ratio(
            basic_bars(
                bargauge_panel(
                    "Quota used",
                    "costsvc_quota_used_ratio: ResourceQuota used / hard per namespace and "
                    "resource (alert at 90 %).",
                    target(
                        f"max by (cluster, namespace, resource) ({USED_RATIO})",
                        "{{cluster}}/{{namespace}} {{resource}}",
                        instant=True,
                    ),
                )
            ).thresholds(thresholds((0.8, "orange"), (0.9, "red")))
        ).span(12),
        stat_panel(
            "Unused quota per month",
            "Monthly cost of the quota nobody held (hard - held) at the resource's unit price.",
            target(f"sum({UNUSED_COST})"),
        )
        .unit(money)
        .decimals(0)
        .span(6)
        .height(5),
        stat_panel(
            "Held but idle per month",
            "Monthly cost of the GPU units held against quotas but idle.",
            target(f"sum({IDLE_COST})"),
        )
        .unit(money)
        .decimals(0)
        .thresholds(thresholds((1, "orange")))
        .span(6)
        .height(5),
        timeseries_panel(
            "Held and in use by team",
            "Mean units held and in use over the last 7 days, per team and resource.",
            target(HELD_BY_TEAM, "{{team}} {{resource}} held"),
            target(ACTIVE_BY_TEAM, "{{team}} {{resource}} in use"),
        ).span(12),
    ]
