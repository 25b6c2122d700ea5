"""The cost service's own series (budget alerts, the FinOps dashboard), from the database.
Documented in docs/costsvc-metrics.md. Money is in units of the billing currency (a
``currency`` label), per ``cluster`` ingested; exposition values are floats by nature.

**Who sees which series** (:func:`scoped`, applied to everything :func:`collect` returns —
a family added here later is covered without more code; docs/security.md):

- a family named in :data:`FLEET` is a fleet-level aggregate: every token sees it, and with
  ``COSTSVC_METRICS_PUBLIC=true`` so does a scrape without a token. Such a family must carry
  none of the :data:`OWNER_LABELS` (a test holds it to that);
- every other family is private: admin, finance and ``metrics`` tokens see all of it; a team
  token sees the samples whose ``team`` label is its team, and nothing of a private family
  without a ``team`` label; without a token, nothing.

So a new per-team series needs a ``team`` label; a fleet-level one is put in :data:`FLEET`."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy import Connection, Engine

from costsvc.advice.repository import quota_usage, recommendations
from costsvc.auth.tokens import Principal
from costsvc.budgets.repository import BudgetRow, budgets
from costsvc.budgets.state import currency_mismatch
from costsvc.costs.queries import (
    PodMoney,
    efficiency,
    forecast,
    forecast_by_cluster,
    idle_by_currency,
    last_hour,
    model_energy,
    owner_money,
    pod_money,
)
from costsvc.db.runs import failed_hour_counts, ingest_state
from costsvc.inference.queries import ModelFigures, model_figures
from costsvc.inference.split import Totals, per_million
from costsvc.kit.times import month_of, parse_month
from costsvc.rules.chargeback import IDLE, OWNER

TOP_PODS = 10  # per team: the pods with the highest month-to-date cost (and waste)
TOP_WORKLOADS = 10  # per team: the recommendations with the biggest saving
_POD = ["cluster", "team", "project", "namespace", "pod"]
_LINE = ["cluster", *OWNER]  # a cost line in the cluster it ran in (docs/costsvc-metrics.md)
_QUOTA = ["cluster", "team", "namespace", "resource"]
ADVICE_FAMILIES: tuple[tuple[str, str, list[str]], ...] = (
    (
        "costsvc_recommendation_savings_monthly",
        "Monthly saving of all the team's GPU rightsizing recommendations (docs/rightsizing.md)",
        ["cluster", "team", "currency"],
    ),
    (
        "costsvc_recommendations",
        "GPU rightsizing recommendations of the team, by action",
        ["cluster", "team", "action"],
    ),
    (
        "costsvc_workload_savings_monthly",
        f"Monthly saving of each team's top {TOP_WORKLOADS} recommendations",
        ["cluster", "team", "namespace", "workload_kind", "workload", "gpu_model", "action",
         "target", "currency"],
    ),
    ("costsvc_quota_hard_units", "ResourceQuota hard limit of a GPU resource", _QUOTA),
    ("costsvc_quota_used_units", "ResourceQuota use of a GPU resource (the API's count)", _QUOTA),
    ("costsvc_quota_used_ratio", "ResourceQuota used / hard", _QUOTA),
    ("costsvc_quota_held_units", "Mean units of the resource held over the look-back window",
     _QUOTA),
    ("costsvc_quota_active_units", "Mean units held and in use over the look-back window",
     _QUOTA),
    ("costsvc_quota_held_ratio", "Mean units held / hard, over the look-back window", _QUOTA),
    (
        "costsvc_quota_unused_cost_monthly",
        "Monthly cost of the quota nobody held (hard - held) at the resource's unit price",
        [*_QUOTA, "currency"],
    ),
    (
        "costsvc_quota_held_idle_cost_monthly",
        "Monthly cost of the units held but idle",
        [*_QUOTA, "currency"],
    ),
)  # fmt: skip
_MODEL = ["cluster", "team", "namespace", "model"]
INFERENCE_FAMILIES: tuple[tuple[str, str, list[str]], ...] = (
    (
        "costsvc_inference_cost_per_million_tokens",
        "Cost per 10^6 input or output tokens of a served model, the last ingested hour, on "
        "the allocation or usage basis (docs/inference.md)",
        [*_MODEL, "direction", "basis", "currency"],
    ),
    (
        "costsvc_inference_weekly_cost_per_million_tokens",
        "The same over the 7 days up to the last ingested hour (week=current) and the 7 days "
        "before (week=previous)",
        [*_MODEL, "direction", "basis", "week", "currency"],
    ),
    (
        "costsvc_inference_tokens_per_gpu_hour",
        "Tokens (input + output) a served model delivered per GPU-hour its pods held, the "
        "last ingested hour",
        _MODEL,
    ),
    (
        "costsvc_inference_cost_per_hour",
        "Cost of a served model's pods, the last ingested hour, on each basis",
        [*_MODEL, "basis", "currency"],
    ),
)
FAMILIES: tuple[tuple[str, str, list[str]], ...] = (
    (
        "costsvc_cost_month_to_date",
        "Cost this month so far (allocated + idle spread onto the line)",
        [*_LINE, "currency"],
    ),
    (
        "costsvc_waste_month_to_date",
        "Allocated-but-idle cost this month so far",
        [*_LINE, "currency"],
    ),
    ("costsvc_cost_rate_per_hour", "Cost of the last ingested hour", [*_LINE, "currency"]),
    (
        "costsvc_cost_forecast_month_end",
        "The team's month-end cost forecast (the API's and pages' rule: month to date + the mean "
        "hourly cost of the last 7 days x the hours left), in parts per cluster summing to it",
        ["cluster", "team", "currency"],
    ),
    ("costsvc_idle_cost_month_to_date", "Cost of GPUs nobody held", ["cluster", "currency"]),
    (
        "costsvc_unavailable_cost_month_to_date",
        "Of the idle cost: GPU time lost to broken hardware (gpu_device_up 0), this month",
        ["cluster", "currency"],
    ),
    ("costsvc_efficiency_ratio", "Used / allocated cost, this month", _LINE),
    (
        "costsvc_hourly_efficiency_ratio",
        "Used / allocated cost of the last ingested hour",
        _LINE,
    ),
    ("costsvc_budget_amount", "Monthly budget", ["team", "project", "currency"]),
    ("costsvc_budget_used_ratio", "Month to date / budget", ["team", "project"]),
    ("costsvc_budget_forecast_ratio", "Month-end forecast / budget", ["team", "project"]),
    (
        "costsvc_pod_cost_month_to_date",
        f"Month-to-date cost of each team's top {TOP_PODS} pods by cost",
        [*_POD, "currency"],
    ),
    (
        "costsvc_pod_waste_month_to_date",
        f"Month-to-date allocated-but-idle cost of each team's top {TOP_PODS} pods by waste",
        [*_POD, "currency"],
    ),
    (
        "costsvc_pod_budget_share_ratio",
        "A pod's month-to-date cost / its share of the team budget (budget / pods the team ran "
        "this month), for the top pods by cost",
        _POD,
    ),
    (
        "costsvc_energy_month_to_date_joules",
        "Energy the team's GPUs drew this month so far (attributed + idle spread onto it)",
        _LINE,
    ),
    (
        "costsvc_carbon_month_to_date_grams",
        "CO2e of that energy this month (x PUE x the grid intensity in force)",
        _LINE,
    ),
    (
        "costsvc_idle_energy_month_to_date_joules",
        "Energy of GPUs (or slices) nobody held, and drawn during scrape gaps, this month",
        [],
    ),
    (
        "costsvc_gpu_model_energy_month_to_date_joules",
        "Energy the fleet's GPUs drew this month, per GPU model",
        ["gpu_model"],
    ),
    (
        "costsvc_gpu_model_carbon_month_to_date_grams",
        "CO2e of the fleet's GPUs this month, per GPU model",
        ["gpu_model"],
    ),
    ("costsvc_budget_energy_joules", "Monthly energy budget", ["team", "project"]),
    (
        "costsvc_budget_energy_used_ratio",
        "Energy month to date / energy budget",
        ["team", "project"],
    ),
    (
        "costsvc_budget_energy_forecast_ratio",
        "Month-end energy forecast / energy budget",
        ["team", "project"],
    ),
    (
        "costsvc_last_ingest_success_timestamp_seconds",
        "When an hour was last ingested",
        ["cluster"],
    ),
    ("costsvc_ingest_lag_seconds", "Now - end of the last ingested hour", ["cluster"]),
    (
        "costsvc_ingest_failed_hours",
        "Hours whose ingest failed and has not succeeded since (retried with back-off; "
        "GET /v1/ingest/failed-hours names them)",
        ["cluster"],
    ),
)


# fleet-level families: no owner in their labels; public only with COSTSVC_METRICS_PUBLIC
FLEET = frozenset(
    {
        "costsvc_idle_cost_month_to_date",
        "costsvc_unavailable_cost_month_to_date",
        "costsvc_last_ingest_success_timestamp_seconds",
        "costsvc_ingest_lag_seconds",
        "costsvc_ingest_errors",
        "costsvc_ingest_failed_hours",
    }
)
OWNER_LABELS = frozenset({*OWNER, "namespace", "pod", "container", "node_owner"})


def scoped(families: list[Metric], who: Principal | None) -> list[Metric]:
    """What ``who`` (None: no token) may see of ``families`` (the rule at the top)."""
    if who is not None and who.reads_all_metrics:
        return families
    out: list[Metric] = []
    for family in families:
        if family.name in FLEET:
            out.append(family)
            continue
        if who is None or who.team is None:
            continue
        mine = [s for s in family.samples if s.labels.get("team") == who.team]
        if mine:
            copy = Metric(family.name, family.documentation, family.type, family.unit)
            copy.samples = mine
            out.append(copy)
    return out


def _units(micro: int) -> float:
    return float(Decimal(micro).scaleb(-6))


def _joules(mj: int) -> float:  # (mJ -> J; mg -> g for _grams)
    return float(Decimal(mj).scaleb(-3))


_grams = _joules


def _ratio(a: int, b: int) -> float:
    return float(Decimal(a) / Decimal(b)) if b else 0.0


def collect(engine: Engine, now: datetime) -> list[Metric]:
    """Every family of the service's series, as of ``now``: the month's money, energy and
    budgets, the last ingested hour's, the top pods, inference, advice and the ingest's state."""
    start, end = parse_month(month_of(now))
    g = {
        name: GaugeMetricFamily(name, doc, labels=labels)
        for name, doc, labels in (*FAMILIES, *ADVICE_FAMILIES, *INFERENCE_FAMILIES)
    }
    errors = CounterMetricFamily(
        "costsvc_ingest_errors", "Failed hour ingests (and reprices)", labels=["cluster"]
    )
    with engine.connect() as conn:
        last = last_hour(conn)
        currencies = _month(g, conn, now, start, end)
        if last is not None:
            _last_hour(g, conn, last)
        all_budgets = budgets(engine, by_name=False)
        _budgets(g, conn, now, all_budgets, currencies)
        if last is not None:
            _inference(g, model_figures(conn, last))
        per_pod = pod_money(conn, start, end)
        states, failed = ingest_state(conn)
        failing = failed_hour_counts(conn)
    team_budget = {b.team: b.amount for b in all_budgets if not b.project}
    _top_pods(g, per_pod, team_budget)
    _advice(g, engine)
    for s in states:
        if s.last_success is not None:
            g["costsvc_last_ingest_success_timestamp_seconds"].add_metric(
                [s.cluster], s.last_success.timestamp()
            )
        lag = (now - (s.watermark + timedelta(hours=1))).total_seconds()
        g["costsvc_ingest_lag_seconds"].add_metric([s.cluster], max(0.0, lag))
    for cluster in sorted({s.cluster for s in states} | set(failed)):
        errors.add_metric([cluster], float(failed.get(cluster, 0)))
    for cluster in sorted({s.cluster for s in states} | set(failing)):
        g["costsvc_ingest_failed_hours"].add_metric([cluster], float(failing.get(cluster, 0)))
    return [*g.values(), errors]


def _month(
    g: dict[str, GaugeMetricFamily],
    conn: Connection,
    now: datetime,
    start: datetime,
    end: datetime,
) -> list[str]:
    """The month so far: each owner's cost, waste, efficiency, energy and carbon, each team's
    month-end forecast, the idle cost and energy, each GPU model's energy and carbon; answers
    the currencies of its money."""
    idle_energy = 0
    team_currencies: dict[str, set[str]] = {}
    for r in owner_money(conn, start, end):
        team_currencies.setdefault(r.team, set()).add(r.currency)
        labels = [r.cluster, r.team, r.project, r.stage]
        g["costsvc_cost_month_to_date"].add_metric(
            [*labels, r.currency], _units(r.allocated + r.idle)
        )
        g["costsvc_energy_month_to_date_joules"].add_metric(labels, _joules(r.energy_mj))
        g["costsvc_carbon_month_to_date_grams"].add_metric(labels, _grams(r.co2e_mg))
        idle_energy += r.idle_energy_mj
        if r.team == IDLE:
            continue
        g["costsvc_waste_month_to_date"].add_metric([*labels, r.currency], _units(r.waste))
        if (eff := efficiency(r.used, r.waste)) is not None:  # unknown: no series, not 0
            g["costsvc_efficiency_ratio"].add_metric(labels, float(eff))
    for team, in_currencies in sorted(team_currencies.items()):
        if len(in_currencies) == 1:  # never a sum of money in two currencies
            for cluster, part in forecast_by_cluster(conn, now, team).items():
                g["costsvc_cost_forecast_month_end"].add_metric(
                    [cluster, team, *in_currencies], _units(part)
                )
    money_in = idle_by_currency(conn, start, end)
    for cluster, currency, idle, lost in money_in:
        g["costsvc_idle_cost_month_to_date"].add_metric([cluster, currency], _units(idle))
        g["costsvc_unavailable_cost_month_to_date"].add_metric([cluster, currency], _units(lost))
    g["costsvc_idle_energy_month_to_date_joules"].add_metric([], _joules(idle_energy))
    for gpu_model, mj, mg in model_energy(conn, start, end):
        g["costsvc_gpu_model_energy_month_to_date_joules"].add_metric([gpu_model], _joules(mj))
        g["costsvc_gpu_model_carbon_month_to_date_grams"].add_metric([gpu_model], _grams(mg))
    return sorted({c for _, c, _, _ in money_in})


def _last_hour(g: dict[str, GaugeMetricFamily], conn: Connection, last: datetime) -> None:
    """The last ingested hour: each owner's cost and efficiency."""
    for r in owner_money(conn, last, None):
        labels = [r.cluster, r.team, r.project, r.stage]
        g["costsvc_cost_rate_per_hour"].add_metric(
            [*labels, r.currency], _units(r.allocated + r.idle)
        )
        if r.team != IDLE and (eff := efficiency(r.used, r.waste)) is not None:
            g["costsvc_hourly_efficiency_ratio"].add_metric(labels, float(eff))


def _budgets(
    g: dict[str, GaugeMetricFamily],
    conn: Connection,
    now: datetime,
    all_budgets: list[BudgetRow],
    currencies: list[str],
) -> None:
    """Each budget, its month to date and forecast over it (never a ratio of money in two
    currencies: an alert would fire on it), and its energy budget's."""
    for b in all_budgets:
        f = forecast(conn, now, b.team, b.project or None)
        g["costsvc_budget_amount"].add_metric([b.team, b.project, b.currency], _units(b.amount))
        if currency_mismatch(b.currency, currencies) is None:
            g["costsvc_budget_used_ratio"].add_metric(
                [b.team, b.project], _ratio(f.month_to_date, b.amount)
            )
            g["costsvc_budget_forecast_ratio"].add_metric(
                [b.team, b.project], _ratio(f.forecast, b.amount)
            )
        if b.energy_mj is not None:
            who = [b.team, b.project]
            g["costsvc_budget_energy_joules"].add_metric(who, _joules(b.energy_mj))
            g["costsvc_budget_energy_used_ratio"].add_metric(
                who, _ratio(f.energy_month_to_date, b.energy_mj)
            )
            g["costsvc_budget_energy_forecast_ratio"].add_metric(
                who, _ratio(f.energy_forecast, b.energy_mj)
            )


def _top_pods(
    g: dict[str, GaugeMetricFamily], per_pod: list[PodMoney], team_budget: dict[str, int]
) -> None:
    """Each team's top pods by cost (with their budget share) and by waste."""
    by_team: dict[str, list[PodMoney]] = {}
    for r in per_pod:
        by_team.setdefault(r.team, []).append(r)
    for team, rows in sorted(by_team.items()):
        npods = len({(r.cluster, r.namespace, r.pod) for r in rows})
        for r in sorted(rows, key=lambda r: (-r.cost, r.cluster, r.namespace, r.pod))[:TOP_PODS]:
            labels = [r.cluster, r.team, r.project, r.namespace, r.pod]
            g["costsvc_pod_cost_month_to_date"].add_metric([*labels, r.currency], _units(r.cost))
            if team in team_budget:
                share = Decimal(team_budget[team]) / npods
                g["costsvc_pod_budget_share_ratio"].add_metric(
                    labels, float(Decimal(r.cost) / share)
                )
        for r in sorted(rows, key=lambda r: (-r.waste, r.cluster, r.namespace, r.pod))[:TOP_PODS]:
            g["costsvc_pod_waste_month_to_date"].add_metric(
                [r.cluster, r.team, r.project, r.namespace, r.pod, r.currency], _units(r.waste)
            )


def _rates(t: Totals) -> list[tuple[str, str, int | None]]:
    """(direction, basis, micro-units per 10^6 tokens or None) of a model's totals; the
    usage basis only where all of its cost was measured."""
    usage = t.unmeasured == 0
    return [
        ("input", "allocation", per_million(t.input_cost, t.input_tokens)),
        ("output", "allocation", per_million(t.output_cost, t.output_tokens)),
        ("input", "usage", per_million(t.input_used, t.input_tokens) if usage else None),
        ("output", "usage", per_million(t.output_used, t.output_tokens) if usage else None),
    ]


def _inference(g: dict[str, GaugeMetricFamily], figures: list[ModelFigures]) -> None:
    """Cost per 10^6 tokens per served model: the last hour, and week over week."""
    for f in figures:
        labels = [f.cluster, f.team, f.namespace, f.model]
        if f.hour.input_tokens or f.hour.output_tokens or f.hour.cost:
            for direction, basis, rate in _rates(f.hour):
                if rate is not None:
                    g["costsvc_inference_cost_per_million_tokens"].add_metric(
                        [*labels, direction, basis, f.currency], _units(rate)
                    )
            g["costsvc_inference_cost_per_hour"].add_metric(
                [*labels, "allocation", f.currency], _units(f.hour.cost)
            )
            if f.hour.unmeasured == 0:
                g["costsvc_inference_cost_per_hour"].add_metric(
                    [*labels, "usage", f.currency], _units(f.hour.used)
                )
            if f.hour.gpu_hours:
                tokens = f.hour.input_tokens + f.hour.output_tokens
                g["costsvc_inference_tokens_per_gpu_hour"].add_metric(
                    labels, float(Decimal(tokens) * 1_000_000 / f.hour.gpu_hours)
                )
        for week, totals in (("current", f.week), ("previous", f.previous_week)):
            for direction, basis, rate in _rates(totals):
                if rate is not None:
                    g["costsvc_inference_weekly_cost_per_million_tokens"].add_metric(
                        [*labels, direction, basis, week, f.currency], _units(rate)
                    )


def _advice(g: dict[str, GaugeMetricFamily], engine: Engine) -> None:
    """Rightsizing savings and quota figures of the last advice run (costsvc/advice/run.py)."""
    from costsvc.advice.rightsizing import ACTIONABLE

    savings: dict[tuple[str, str, str], int] = {}
    counts: dict[tuple[str, str, str], int] = {}
    shown: dict[str, int] = {}
    for r in recommendations(engine, actions=ACTIONABLE):  # biggest saving first
        key = (r["cluster"], r["team"], r["currency"])
        savings[key] = savings.get(key, 0) + r["saving_monthly"]
        action = (r["cluster"], r["team"], r["action"])
        counts[action] = counts.get(action, 0) + 1
        if shown.get(r["team"], 0) < TOP_WORKLOADS:
            shown[r["team"]] = shown.get(r["team"], 0) + 1
            labels = [r["cluster"], r["team"], r["namespace"], r["workload_kind"], r["workload"]]
            g["costsvc_workload_savings_monthly"].add_metric(
                [*labels, r["gpu_model"], r["action"], r["target"], r["currency"]],
                _units(r["saving_monthly"]),
            )
    for who, micro in sorted(savings.items()):
        g["costsvc_recommendation_savings_monthly"].add_metric(list(who), _units(micro))
    for what, n in sorted(counts.items()):
        g["costsvc_recommendations"].add_metric(list(what), float(n))
    for q in quota_usage(engine):
        labels = [q["cluster"], q["team"], q["namespace"], q["resource"]]
        held = float(Decimal(q["held_milli"]) / 1000)
        g["costsvc_quota_held_units"].add_metric(labels, held)
        g["costsvc_quota_active_units"].add_metric(labels, float(Decimal(q["active_milli"]) / 1000))
        if q["hard_milli"] is not None:
            g["costsvc_quota_hard_units"].add_metric(labels, float(Decimal(q["hard_milli"]) / 1000))
            g["costsvc_quota_held_ratio"].add_metric(
                labels, _ratio(q["held_milli"], q["hard_milli"])
            )
            if q["used_milli"] is not None:
                g["costsvc_quota_used_units"].add_metric(
                    labels, float(Decimal(q["used_milli"]) / 1000)
                )
                g["costsvc_quota_used_ratio"].add_metric(
                    labels, _ratio(q["used_milli"], q["hard_milli"])
                )
        if q["unused_monthly"] is not None:
            g["costsvc_quota_unused_cost_monthly"].add_metric(
                [*labels, q["currency"]], _units(q["unused_monthly"])
            )
        if q["idle_monthly"] is not None:
            g["costsvc_quota_held_idle_cost_monthly"].add_metric(
                [*labels, q["currency"]], _units(q["idle_monthly"])
            )
