"""What the demo sets through the cost-service API (two budgets) and prints from it: the cost
table of the simulated hours, the budgets' state, the quotas and the top savings.

Everything printed is read back from the running API with the admin token, as a user would
read it; the cost table reconciles: each row's cost = used + idle waste + unmeasured +
unallocated idle (``__idle__``'s own), to the micro-unit.
"""

from __future__ import annotations

from datetime import datetime
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

import httpx

from costsvc.rules.chargeback import IDLE, UNALLOCATED

CENT = Decimal("0.01")
# one team's budget is 80 % of what it spent this month (exceeded), another's a little over
# what it spent (near its limit: past the 80 % threshold, under 100 %)
EXCEEDED_AT = Decimal("0.8")
NEAR_AT = Decimal("0.9")
MONEY = ("used_cost", "allocated_idle_cost", "unmeasured_cost", "idle_cost")


class Api:
    """The cost-service API with a bearer token."""

    def __init__(self, base: str, token: str) -> None:
        self.base = base
        self.client = httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )

    def get(self, path: str, **params: Any) -> Any:
        answer = self.client.get(path, params=params)
        answer.raise_for_status()
        return answer.json()

    def post(self, path: str, body: dict[str, Any]) -> Any:
        answer = self.client.post(path, json=body)
        answer.raise_for_status()
        return answer.json()

    def close(self) -> None:
        self.client.close()


def _ceil(v: Decimal) -> Decimal:
    return v.quantize(CENT, ROUND_CEILING)


def set_budgets(api: Api) -> list[dict[str, Any]]:
    """Budgets for the two teams that spent most this month: the first exceeded (with an
    energy budget too), the second near its limit; none when nothing was spent yet (the
    first hour of a month). Their ``/status`` answers."""
    rows = api.get("/v1/costs", window="month", group_by="team")["rows"]
    spent = sorted(
        (
            (Decimal(r["total_cost"]), Decimal(r["energy_kwh"]), r["group"]["team"], r["currency"])
            for r in rows
            if r["group"]["team"] not in (IDLE, UNALLOCATED) and Decimal(r["total_cost"]) > 1
        ),
        reverse=True,
    )
    budgets = []
    for (cost, kwh, team, currency), ratio in zip(spent, (EXCEEDED_AT, NEAR_AT), strict=False):
        body: dict[str, Any] = {"team": team, "currency": currency, "thresholds": [0.8, 1.0]}
        if ratio == EXCEEDED_AT:
            body["amount"] = str((cost * ratio).quantize(CENT, ROUND_FLOOR))
            body["energy_kwh"] = str(_ceil(kwh * 2))  # half of it used
        else:
            body["amount"] = str(_ceil(cost / ratio))
        made = api.post("/v1/budgets", body)
        budgets.append(api.get(f"/v1/budgets/{made['id']}/status"))
    return budgets


def cost_table(rows: list[dict[str, Any]], currency: str) -> str:
    head = (
        f"  {'team':<16} {'cost':>11} = {'used':>11} + {'idle waste':>11} + "
        f"{'unmeasured':>11} + {'unalloc. idle':>13} {'GPU-hours':>9} {'efficiency':>10}"
    )
    lines = [head]
    total = Decimal(0)
    for r in sorted(rows, key=lambda r: -Decimal(r["total_cost"])):
        eff = f"{Decimal(r['efficiency']):.0%}" if r["efficiency"] is not None else "-"
        used, waste, unmeasured, idle = (r[k] for k in MONEY)
        lines.append(
            f"  {r['group']['team'][:16]:<16} {r['total_cost']:>11}   {used:>11}   {waste:>11}"
            f"   {unmeasured:>11}   {idle:>13} {Decimal(r['gpu_hours']):>9.2f} {eff:>10}"
        )
        total += Decimal(r["total_cost"])
    lines.append(f"  {'total (' + currency + ')':<16} {total:>11}")
    return "\n".join(lines)


def unavailable(rows: list[dict[str, Any]]) -> Decimal:
    return sum((Decimal(r["unavailable_cost"]) for r in rows), Decimal(0))


def budget_lines(budgets: list[dict[str, Any]]) -> str:
    if not budgets:
        return "  none yet: nothing was spent this month (its first hour is not over)"
    out = []
    for b in budgets:
        used = Decimal(b["used_ratio"])
        state = "exceeded" if used >= 1 else "near its limit" if b["crossed"] else "within"
        energy = b.get("energy")
        extra = f", energy {Decimal(energy['used_ratio']):.0%} used" if energy else ""
        out.append(
            f"  {b['team']:<16} {b['month_to_date']:>11} of {b['amount']:>9} {b['currency']}"
            f" = {used:.0%} ({state}; month-end forecast {Decimal(b['forecast_ratio']):.0%}"
            f"{extra})"
        )
    return "\n".join(out)


def quota_lines(rows: list[dict[str, Any]]) -> str:
    out = []
    for q in rows:
        if q["hard"] is None:
            continue
        util = f"{Decimal(q['utilisation']):.0%}" if q["utilisation"] is not None else "-"
        out.append(
            f"  {q['team']:<16} {q['namespace'] + ' ' + q['resource']:<38} quota {q['hard']:>5},"
            f" held {Decimal(q['held']):.2f} ({util}), in use {Decimal(q['active']):.2f}"
        )
    return "\n".join(out) or "  none"


def served_lines(rows: list[dict[str, Any]]) -> str:
    """Each served model's tokens and cost per 1M tokens, on the allocation basis (what its
    pods held, with their share of the idle) and the usage basis (what they measurably used;
    ``-`` where that is unknown), docs/inference.md."""
    head = (
        f"  {'model':<34} {'input tok.':>11} {'output tok.':>11} "
        f"{'per 1M in':>10} {'per 1M out':>10} {'used: in':>10} {'used: out':>10}"
    )
    out = [head]
    for r in rows:
        rates = (
            r[k] or "-"
            for k in (
                "cost_per_1m_input_tokens",
                "cost_per_1m_output_tokens",
                "usage_cost_per_1m_input_tokens",
                "usage_cost_per_1m_output_tokens",
            )
        )
        out.append(
            f"  {r['group']['model'][:34]:<34} {r['input_tokens']:>11,} {r['output_tokens']:>11,} "
            + " ".join(f"{v:>10}" for v in rates)
        )
    return "\n".join(out) if rows else "  none"


def hours_text(first: datetime, end: datetime) -> str:
    n = int((end - first).total_seconds() // 3600)
    return f"{first:%Y-%m-%d %H:00} to {end:%H:00} UTC ({n} complete hours)"
