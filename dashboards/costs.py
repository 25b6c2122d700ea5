"""The FinOps dashboard's cost rows (dashboards/finops.py): month to date with the month-end
forecast, the cost breakdown by team, project and stage, unallocated idle and allocated-but-idle
waste, efficiency."""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models import units

from dashboards.common import (
    USED_RATIO_STEPS,
    Panel,
    bargauge_panel,
    basic_bars,
    ratio,
    shown,
    stacked,
    stat_panel,
    table_panel,
    target,
    team_links,
    thresholds,
    timeseries_panel,
    value_columns,
)
from dashboards.selectors import (
    COST_LINES,
    CURRENCY,
    EFFICIENCY_LINES,
    PER_LINE,
    POD_COSTS,
    TEAM_MONEY,
    TEAMS_ONLY,
)

COST = f"costsvc_cost_month_to_date{{{COST_LINES}}}"
RATE = f"costsvc_cost_rate_per_hour{{{COST_LINES}}}"
WASTE = f"costsvc_waste_month_to_date{{{COST_LINES}}}"
EFFICIENCY = f"costsvc_efficiency_ratio{{{EFFICIENCY_LINES}}}"
TEAM_EFFICIENCY = f"costsvc_efficiency_ratio{{{EFFICIENCY_LINES}, {TEAMS_ONLY}}}"
# the cost service's month-end forecast per team (costsvc/costs/queries.py forecast)
FORECAST = f"costsvc_cost_forecast_month_end{{{TEAM_MONEY}}}"
LINE_LEGEND = "{{cluster}}: {{team}} / {{project}} / {{stage}}"  # PER_LINE
PROJECT_LEGEND = "{{team}} / {{project}}"


def month_to_date(money: str) -> list[Panel]:
    return [
        stat_panel(
            "Cost month to date",
            "Sum of costsvc_cost_month_to_date for the selection (idle lines included when "
            "the selection includes them).",
            target(f"sum({COST})"),
        )
        .unit(money)
        .decimals(0)
        .span(4)
        .height(4),
        stat_panel(
            "Attributed to teams",
            "Month-to-date cost of the selection without the __idle__ and __unallocated__ lines.",
            target(f"sum(costsvc_cost_month_to_date{{{COST_LINES}, {TEAMS_ONLY}}})"),
        )
        .unit(money)
        .decimals(0)
        .span(4)
        .height(4),
        stat_panel(
            "Unallocated idle",
            "costsvc_idle_cost_month_to_date: cost of GPU time nobody held, this month.",
            target(f"sum(costsvc_idle_cost_month_to_date{{{CURRENCY}}})"),
        )
        .unit(money)
        .decimals(0)
        .thresholds(thresholds((1, "orange")))
        .span(4)
        .height(4),
        stat_panel(
            "Allocated but idle (waste)",
            "costsvc_waste_month_to_date: held GPU cost not used (allocated x (1 - utilisation)).",
            target(f"sum({WASTE})"),
        )
        .unit(money)
        .decimals(0)
        .thresholds(thresholds((1, "orange")))
        .span(4)
        .height(4),
        stat_panel(
            "Spend rate",
            "costsvc_cost_rate_per_hour: cost of the last ingested hour (per hour).",
            target(f"sum({RATE})"),
        )
        .unit(money)
        .decimals(2)
        .span(4)
        .height(4),
        stat_panel(
            "Projected month end",
            "costsvc_cost_forecast_month_end of the selected teams: the cost service's forecast, "
            "the rule of its API and pages (month to date + the mean hourly cost over the last 7 "
            "days of ingested hours x the hours left in the UTC month). Per team: the project "
            "and stage selections do not narrow it.",
            target(f"sum({FORECAST})"),
        )
        .unit(money)
        .decimals(0)
        .span(4)
        .height(4),
    ]


def cost_breakdown(money: str) -> list[Panel]:
    return [
        stacked(
            timeseries_panel(
                "Cost month to date by team",
                "costsvc_cost_month_to_date per team (resets at the start of a month).",
                target(f"sum by (team) ({COST})", "{{team}}"),
            )
        )
        .unit(money)
        .data_links(team_links()),
        stacked(
            timeseries_panel(
                "Hourly cost by team",
                "costsvc_cost_rate_per_hour per team: cost of the last ingested hour (per hour).",
                target(f"sum by (team) ({RATE})", "{{team}}"),
            )
        )
        .unit(money)
        .data_links(team_links()),
        basic_bars(
            bargauge_panel(
                "Cost by project",
                "Month-to-date cost per team and project.",
                target(f"sum by (team, project) ({COST})", PROJECT_LEGEND, instant=True),
            )
        )
        .unit(money)
        .data_links(team_links())
        .decimals(0),
        basic_bars(
            bargauge_panel(
                "Cost by stage",
                "Month-to-date cost per stage (e.g. dev, staging, prod).",
                target(f"sum by (stage) ({COST})", "{{stage}}", instant=True),
            )
        )
        .unit(money)
        .decimals(0),
        table_panel(
            "Cost by cluster, team, project and stage",
            "Month to date: cost, waste (allocated but idle), last hour's cost and efficiency "
            "(used / allocated), per cluster the line ran in.",
            target(f"sum by ({PER_LINE}) ({COST})", table=True),
            target(f"sum by ({PER_LINE}) ({WASTE})", table=True),
            target(f"sum by ({PER_LINE}) ({RATE})", table=True),
            target(f"max by ({PER_LINE}) ({EFFICIENCY})", table=True),
            columns=value_columns("Cost MTD", "Waste MTD", "Last hour", "Efficiency"),
        )
        .unit(money)
        .decimals(2)
        .span(24),
    ]


def idle_and_waste(money: str) -> list[Panel]:
    return [
        timeseries_panel(
            "Idle share of fleet cost",
            "Unallocated idle cost over total fleet cost, month to date (all teams).",
            target(
                f"sum(costsvc_idle_cost_month_to_date{{{CURRENCY}}}) "
                f"/ sum(costsvc_cost_month_to_date{{{CURRENCY}}})",
                "idle share",
            ),
        )
        .unit(units.PercentUnit)
        .min(0)
        .span(8),
        stacked(
            timeseries_panel(
                "Waste by team",
                "costsvc_waste_month_to_date per team: allocated-but-idle cost this month.",
                target(f"sum by (team) ({WASTE})", "{{team}}"),
            )
        )
        .unit(money)
        .data_links(team_links())
        .span(16),
        bargauge_panel(
            "Top wasting pods",
            "The ten pods with the most allocated-but-idle cost this month "
            "(costsvc_pod_waste_month_to_date).",
            target(
                "topk(10, sum by (cluster, team, namespace, pod) "
                f"(costsvc_pod_waste_month_to_date{{{POD_COSTS}}}))",
                "{{team}}: {{cluster}}/{{namespace}}/{{pod}}",
                instant=True,
            ),
        )
        .unit(money)
        .data_links(team_links())
        .decimals(0)
        .thresholds(thresholds((100, "orange"), (1000, "red"))),
        bargauge_panel(
            "Top wasting projects",
            "The ten team/project pairs with the most allocated-but-idle cost this month.",
            target(f"topk(10, sum by (team, project) ({WASTE}))", PROJECT_LEGEND, instant=True),
        )
        .unit(money)
        .data_links(team_links())
        .decimals(0)
        .thresholds(thresholds((100, "orange"), (1000, "red"))),
        table_panel(
            "Top pods by cost",
            "The twenty most expensive pods this month (costsvc_pod_cost_month_to_date), with "
            "their waste.",
            target(
                "topk(20, sum by (cluster, team, project, namespace, pod) "
                f"(costsvc_pod_cost_month_to_date{{{POD_COSTS}}}))",
                table=True,
            ),
            target(
                "sum by (cluster, team, project, namespace, pod) "
                f"(costsvc_pod_waste_month_to_date{{{POD_COSTS}}})",
                table=True,
            ),
            columns=value_columns("Cost MTD", "Waste MTD"),
        )
        .with_transformation(
            models.DataTransformerConfig(
                id_val="filterByValue",
                options={
                    "filters": [
                        {"config": {"id": "isNull", "options": {}}, "fieldName": "Cost MTD"}
                    ],
                    "match": "any",
                    "type": "exclude",
                },
            )
        )
        .with_transformation(
            models.DataTransformerConfig(
                id_val="sortBy", options={"sort": [{"desc": True, "field": "Cost MTD"}]}
            )
        )
        .unit(money)
        .decimals(2)
        .span(24),
    ]


def efficiency() -> list[Panel]:
    return [
        ratio(
            stat_panel(
                "Cost-weighted efficiency",
                "costsvc_efficiency_ratio (used / allocated, month to date) averaged over the "
                "selection, weighted by month-to-date cost.",
                target(
                    shown(
                        f"sum({EFFICIENCY} * on ({PER_LINE}) sum by ({PER_LINE}) ({COST})) "
                        f"/ sum(sum by ({PER_LINE}) ({COST}) and on ({PER_LINE}) {EFFICIENCY})"
                    )
                ),
            )
            .thresholds(thresholds(*USED_RATIO_STEPS))
            .span(6)
        ),
        ratio(
            timeseries_panel(
                "Efficiency month to date",
                "costsvc_efficiency_ratio per team/project/stage: used / allocated cost this "
                "month.",
                target(shown(TEAM_EFFICIENCY), LINE_LEGEND),
            ).span(9)
        ),
        ratio(
            timeseries_panel(
                "Hourly efficiency",
                "costsvc_hourly_efficiency_ratio: used / allocated in the last ingested hour.",
                target(
                    shown(f"costsvc_hourly_efficiency_ratio{{{EFFICIENCY_LINES}, {TEAMS_ONLY}}}"),
                    LINE_LEGEND,
                ),
            ).span(9)
        ),
        ratio(
            bargauge_panel(
                "Least efficient",
                "The ten team/project/stage lines with the lowest month-to-date efficiency.",
                target(shown(f"bottomk(10, {TEAM_EFFICIENCY})"), LINE_LEGEND, instant=True),
            )
            .thresholds(thresholds(*USED_RATIO_STEPS))
            .span(24)
        ),
    ]
