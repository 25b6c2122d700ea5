"""GPU FinOps: what does GPU time cost per team, project and stage, and which budgets overrun?"""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models import units

from dashboards.common import (
    USED_RATIO_STEPS,
    Panel,
    add_row,
    bargauge_panel,
    basic_bars,
    board,
    collapsed_row,
    finish,
    query_variable,
    ratio,
    shown,
    stacked,
    stat_panel,
    table_panel,
    target,
    thresholds,
    timeseries_panel,
    up_panel,
    value_columns,
)
from dashboards.inference import inference
from dashboards.selectors import (
    BUDGETS,
    COST_LINES,
    CURRENCY,
    EFFICIENCY_LINES,
    ENERGY_LINES,
    PER_LINE,
    POD_COSTS,
    TEAMS_ONLY,
)

COST = f"costsvc_cost_month_to_date{{{COST_LINES}}}"
RATE = f"costsvc_cost_rate_per_hour{{{COST_LINES}}}"
WASTE = f"costsvc_waste_month_to_date{{{COST_LINES}}}"
EFFICIENCY = f"costsvc_efficiency_ratio{{{EFFICIENCY_LINES}}}"
TEAM_EFFICIENCY = f"costsvc_efficiency_ratio{{{EFFICIENCY_LINES}, {TEAMS_ONLY}}}"
# hours left in the current (UTC) month
HOURS_LEFT = "scalar((days_in_month() - day_of_month()) * 24 + 24 - hour() - minute() / 60)"
LINE_LEGEND = "{{team}} / {{project}} / {{stage}}"
PROJECT_LEGEND = "{{team}} / {{project}}"


def per_budget(metric: str) -> str:
    return f"max by (team, project) ({metric}{{{BUDGETS}}})"


def finops(currency: str) -> models.Dashboard:
    """The FinOps dashboard, money in `currency` (an ISO code, e.g. USD)."""
    money = f"currency{currency}"
    b = board(
        "gpu-finops-cost",
        "GPU FinOps",
        "GPU cost by team, project and stage from gpu-costsvc: month to date, hourly rate, "
        "unallocated idle and allocated-but-idle (waste), efficiency, budgets with their "
        "forecast, top wasters, and the cost service's ingest health.",
        ["finops", "cost"],
        [
            query_variable(
                "currency",
                "Currency",
                "label_values(costsvc_cost_month_to_date, currency)",
                multi=False,
                include_all=False,
            ),
            query_variable(
                "team",
                "Team",
                'label_values(costsvc_cost_month_to_date{currency=~"$currency"}, team)',
            ),
            query_variable(
                "project",
                "Project",
                "label_values(costsvc_cost_month_to_date"
                '{currency=~"$currency", team=~"$team"}, project)',
            ),
            query_variable(
                "stage",
                "Stage",
                "label_values(costsvc_cost_month_to_date"
                '{currency=~"$currency", team=~"$team", project=~"$project"}, stage)',
            ),
            query_variable(
                "cluster", "Cluster", "label_values(costsvc_ingest_lag_seconds, cluster)"
            ),
            query_variable(
                "job", "Cost service job", "label_values(costsvc_ingest_lag_seconds, job)"
            ),
        ],
    )
    add_row(b, "Month to date", month_to_date(money))
    add_row(b, "Cost breakdown", cost_breakdown(money))
    add_row(b, "Idle and waste", idle_and_waste(money))
    add_row(b, "Efficiency", efficiency())
    add_row(b, "Budgets", budgets(money))
    add_row(b, "Energy and carbon", energy())
    add_row(b, "Inference: cost per million tokens", inference(money))
    b.with_row(collapsed_row("Cost service health", health()))
    return finish(b)


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
            "Month to date plus the last hour's rate for every hour left in the (UTC) month.",
            target(f"sum({COST}) + sum({RATE}) * {HOURS_LEFT}"),
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
        ).unit(money),
        stacked(
            timeseries_panel(
                "Hourly cost by team",
                "costsvc_cost_rate_per_hour per team: cost of the last ingested hour (per hour).",
                target(f"sum by (team) ({RATE})", "{{team}}"),
            )
        ).unit(money),
        basic_bars(
            bargauge_panel(
                "Cost by project",
                "Month-to-date cost per team and project.",
                target(f"sum by (team, project) ({COST})", PROJECT_LEGEND, instant=True),
            )
        )
        .unit(money)
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
            "Cost by team, project and stage",
            "Month to date: cost, waste (allocated but idle), last hour's cost and efficiency "
            "(used / allocated).",
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
        .span(16),
        bargauge_panel(
            "Top wasting pods",
            "The ten pods with the most allocated-but-idle cost this month "
            "(costsvc_pod_waste_month_to_date).",
            target(
                "topk(10, sum by (team, namespace, pod) "
                f"(costsvc_pod_waste_month_to_date{{{POD_COSTS}}}))",
                "{{team}}: {{namespace}}/{{pod}}",
                instant=True,
            ),
        )
        .unit(money)
        .decimals(0)
        .thresholds(thresholds((100, "orange"), (1000, "red"))),
        bargauge_panel(
            "Top wasting projects",
            "The ten team/project pairs with the most allocated-but-idle cost this month.",
            target(f"topk(10, sum by (team, project) ({WASTE}))", PROJECT_LEGEND, instant=True),
        )
        .unit(money)
        .decimals(0)
        .thresholds(thresholds((100, "orange"), (1000, "red"))),
        table_panel(
            "Top pods by cost",
            "The twenty most expensive pods this month (costsvc_pod_cost_month_to_date), with "
            "their waste.",
            target(
                "topk(20, sum by (team, project, namespace, pod) "
                f"(costsvc_pod_cost_month_to_date{{{POD_COSTS}}}))",
                table=True,
            ),
            target(
                "sum by (team, project, namespace, pod) "
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


ENERGY = f"costsvc_energy_month_to_date_joules{{{ENERGY_LINES}}}"
CARBON = f"costsvc_carbon_month_to_date_grams{{{ENERGY_LINES}}}"
J_PER_KWH = "3600000"


def energy() -> list[Panel]:
    """kWh and CO2e per team and GPU model, idle energy, energy budgets
    (costsvc/rules/energy.py)."""
    return [
        stat_panel(
            "Energy month to date",
            "costsvc_energy_month_to_date_joules of the selection, in kWh: what the GPUs drew "
            "for it, idle energy spread onto it included.",
            target(f"sum({ENERGY}) / {J_PER_KWH}"),
        )
        .unit(units.KiloWattHour)
        .decimals(1)
        .span(6)
        .height(4),
        stat_panel(
            "CO2e month to date",
            "costsvc_carbon_month_to_date_grams of the selection, in kg: energy x PUE x the "
            "grid carbon intensity in force.",
            target(f"sum({CARBON}) / 1000"),
        )
        .unit(units.Kilogram)
        .decimals(1)
        .span(6)
        .height(4),
        stat_panel(
            "Idle energy",
            "costsvc_idle_energy_month_to_date_joules in kWh: energy of GPUs and slices nobody "
            "held, and drawn during scrape gaps, this month (all teams).",
            target(f"sum(costsvc_idle_energy_month_to_date_joules) / {J_PER_KWH}"),
        )
        .unit(units.KiloWattHour)
        .decimals(1)
        .thresholds(thresholds((1, "orange")))
        .span(6)
        .height(4),
        stat_panel(
            "Energy budgets exceeded",
            "Energy budgets whose month to date (costsvc_budget_energy_used_ratio) is past 100 %.",
            target(f"count(costsvc_budget_energy_used_ratio{{{BUDGETS}}} >= 1) or vector(0)"),
        )
        .thresholds(thresholds((1, "red")))
        .span(6)
        .height(4),
        basic_bars(
            bargauge_panel(
                "Energy by team",
                "Month-to-date kWh per team (costsvc_energy_month_to_date_joules).",
                target(f"sum by (team) ({ENERGY}) / {J_PER_KWH}", "{{team}}", instant=True),
            )
        )
        .unit(units.KiloWattHour)
        .decimals(2)
        .span(6),
        basic_bars(
            bargauge_panel(
                "CO2e by team",
                "Month-to-date kg CO2e per team (costsvc_carbon_month_to_date_grams).",
                target(f"sum by (team) ({CARBON}) / 1000", "{{team}}", instant=True),
            )
        )
        .unit(units.Kilogram)
        .decimals(2)
        .span(6),
        basic_bars(
            bargauge_panel(
                "Energy by GPU model",
                "Month-to-date kWh the fleet's GPUs of each model drew "
                "(costsvc_gpu_model_energy_month_to_date_joules).",
                target(
                    "sum by (gpu_model) (costsvc_gpu_model_energy_month_to_date_joules) "
                    f"/ {J_PER_KWH}",
                    "{{gpu_model}}",
                    instant=True,
                ),
            )
        )
        .unit(units.KiloWattHour)
        .decimals(2)
        .span(6),
        basic_bars(
            bargauge_panel(
                "CO2e by GPU model",
                "Month-to-date kg CO2e per GPU model "
                "(costsvc_gpu_model_carbon_month_to_date_grams).",
                target(
                    "sum by (gpu_model) (costsvc_gpu_model_carbon_month_to_date_grams) / 1000",
                    "{{gpu_model}}",
                    instant=True,
                ),
            )
        )
        .unit(units.Kilogram)
        .decimals(2)
        .span(6),
        bargauge_panel(
            "Energy budget used",
            "costsvc_budget_energy_used_ratio: month-to-date energy over the monthly energy "
            "budget (budgets with an energy amount).",
            target(per_budget("costsvc_budget_energy_used_ratio"), PROJECT_LEGEND, instant=True),
        )
        .unit(units.PercentUnit)
        .min(0)
        .max(1.2)
        .thresholds(thresholds((0.8, "orange"), (1, "red")))
        .span(24),
    ]


def budgets(money: str) -> list[Panel]:
    used, forecast = "costsvc_budget_used_ratio", "costsvc_budget_forecast_ratio"
    amount = f"max by (team, project) (costsvc_budget_amount{{{BUDGETS}, {CURRENCY}}})"
    return [
        stat_panel(
            "Budgets forecast to overrun",
            "Budgets whose month-end forecast (costsvc_budget_forecast_ratio) exceeds 100 %.",
            target(f"count({shown(f'{forecast}{{{BUDGETS}}}')} > 1) or vector(0)"),
        )
        .thresholds(thresholds((1, "red")))
        .span(6),
        bargauge_panel(
            "Budget used",
            "costsvc_budget_used_ratio: month-to-date cost over the monthly budget.",
            target(shown(per_budget(used)), PROJECT_LEGEND, instant=True),
        )
        .unit(units.PercentUnit)
        .decimals(2)
        .min(0)
        .max(1.2)
        .thresholds(thresholds((0.8, "orange"), (1, "red")))
        .span(9),
        bargauge_panel(
            "Budget forecast (month end)",
            "costsvc_budget_forecast_ratio: forecast month-end cost over the budget.",
            target(shown(per_budget(forecast)), PROJECT_LEGEND, instant=True),
        )
        .unit(units.PercentUnit)
        .decimals(2)
        .min(0)
        .max(1.2)
        .thresholds(thresholds((0.9, "orange"), (1, "red")))
        .span(9),
        timeseries_panel(
            "Budget burn",
            "costsvc_budget_used_ratio over time (solid) and the month-end forecast (dashed "
            "legend suffix 'forecast').",
            target(per_budget(used), PROJECT_LEGEND + " used"),
            target(per_budget(forecast), PROJECT_LEGEND + " forecast"),
        )
        .unit(units.PercentUnit)
        .min(0)
        .thresholds(thresholds((1, "red"))),
        table_panel(
            "Budgets",
            "Per budget: monthly amount, spent so far (amount x used ratio), used and forecast "
            "ratios.",
            target(amount, table=True),
            target(f"{amount} * on (team, project) {per_budget(used)}", table=True),
            target(per_budget(used), table=True),
            target(per_budget(forecast), table=True),
            columns=value_columns("Budget", "Spent", "Used", "Forecast"),
        )
        .unit(money)
        .decimals(0),
    ]


def health() -> list[Panel]:
    return [
        timeseries_panel(
            "Ingest lag",
            "costsvc_ingest_lag_seconds: how far the cost service's watermark trails now, "
            "per cluster.",
            target(
                'max by (cluster) (costsvc_ingest_lag_seconds{cluster=~"$cluster"})',
                "{{cluster}}",
            ),
        )
        .unit(units.Seconds)
        .thresholds(thresholds((7200, "orange"), (14400, "red")))
        .span(8),
        stat_panel(
            "Since last successful ingest",
            "time() - costsvc_last_ingest_success_timestamp_seconds per cluster.",
            target(
                "time() - max by (cluster) "
                '(costsvc_last_ingest_success_timestamp_seconds{cluster=~"$cluster"})',
                "{{cluster}}",
            ),
        )
        .unit(units.Seconds)
        .thresholds(thresholds((7200, "orange"), (14400, "red")))
        .span(8),
        up_panel(
            "Cost service scrape up",
            "Prometheus `up` for the cost service targets.",
            target('up{job=~"$job"}', "{{instance}}"),
        ).span(8),
    ]
