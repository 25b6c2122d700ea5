"""GPU FinOps: what does GPU time cost per team, project and stage, and which budgets overrun?"""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models import units

from dashboards.common import (
    MONEY,
    Panel,
    add_row,
    bargauge_panel,
    basic_bars,
    board,
    collapsed_row,
    finish,
    query_variable,
    shown,
    stat_panel,
    table_panel,
    target,
    thresholds,
    timeseries_panel,
    up_panel,
    value_columns,
)
from dashboards.costs import (
    PROJECT_LEGEND,
    cost_breakdown,
    efficiency,
    idle_and_waste,
    month_to_date,
)
from dashboards.inference import inference
from dashboards.queues import queues
from dashboards.selectors import BUDGETS, CLUSTER, CURRENCY, ENERGY_LINES


def per_budget(metric: str) -> str:
    return f"max by (team, project) ({metric}{{{BUDGETS}}})"


def finops() -> models.Dashboard:
    """The FinOps dashboard, money in the currency of the `currency` variable."""
    money = MONEY
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
                'label_values(costsvc_cost_month_to_date{cluster=~"$cluster"}, currency)',
                multi=False,
                include_all=False,
            ),
            query_variable(
                "team",
                "Team",
                "label_values(costsvc_cost_month_to_date"
                '{cluster=~"$cluster", currency=~"$currency"}, team)',
            ),
            query_variable(
                "project",
                "Project",
                "label_values(costsvc_cost_month_to_date"
                '{cluster=~"$cluster", currency=~"$currency", team=~"$team"}, project)',
            ),
            query_variable(
                "stage",
                "Stage",
                'label_values(costsvc_cost_month_to_date{cluster=~"$cluster", '
                'currency=~"$currency", team=~"$team", project=~"$project"}, stage)',
            ),
            query_variable(
                "job",
                "Cost service job",
                'label_values(costsvc_ingest_lag_seconds{cluster=~"$cluster"}, job)',
            ),
        ],
        "costsvc_cost_month_to_date",
    )
    add_row(b, "Month to date", month_to_date(money))
    add_row(b, "Cost breakdown", cost_breakdown(money))
    add_row(b, "Idle and waste", idle_and_waste(money))
    add_row(b, "Efficiency", efficiency())
    add_row(b, "Budgets", budgets(money))
    add_row(b, "Energy and carbon", energy())
    add_row(b, "Inference: cost per million tokens", inference(money))
    add_row(b, "Kueue queues: quota, borrowing, idle quota", queues())
    b.with_row(collapsed_row("Cost service health", health()))
    return finish(b)


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
            target(f"sum(costsvc_idle_energy_month_to_date_joules{{{CLUSTER}}}) / {J_PER_KWH}"),
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
                    "sum by (gpu_model) "
                    f"(costsvc_gpu_model_energy_month_to_date_joules{{{CLUSTER}}}) "
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
                    "sum by (gpu_model) "
                    f"(costsvc_gpu_model_carbon_month_to_date_grams{{{CLUSTER}}}) "
                    "/ 1000",
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
            target('up{cluster=~"$cluster", job=~"$job"}', "{{instance}}"),
        ).span(8),
    ]
