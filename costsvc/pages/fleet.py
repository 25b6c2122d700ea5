"""The fleet (finance and admin): GPUs by model and by node with their allocated, idle and
unavailable hours over a month (costsvc/fleet/usage.py) and their money (the rows of
``/v1/costs?group_by=gpu_model`` and ``group_by=node``, from the same query function), and the
idlest GPUs and the GPUs reported lost (costsvc/fleet/health.py) with their last XID read from
the configured query API (costsvc/fleet/xids.py); and the alerts firing or pending now in that
API (costsvc/fleet/alerts.py); for each read, why it could not be done where it failed."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from costsvc.api.deps import Db, Now
from costsvc.costs.queries import costs
from costsvc.fleet.alerts import active_alerts
from costsvc.fleet.health import lost_gpus
from costsvc.fleet.usage import HOUR_US, UseTotals, gpu_use, hours, idlest, totals_by
from costsvc.fleet.xids import lost_xids
from costsvc.months.billing import billing_months
from costsvc.pages.charts import stacked_bars
from costsvc.pages.figures import month_range, picker_months
from costsvc.pages.render import PREFIX, chosen_month, page
from costsvc.pages.session import FinanceIn

router = APIRouter(prefix=PREFIX, include_in_schema=False)
PARTS = (("allocated", 0), ("idle", 1), ("unavailable", 2))


@router.get("/fleet")
def fleet(request: Request, v: FinanceIn, db: Db, now: Now, month: str | None = None) -> Response:
    chosen = chosen_month(month, now)
    start, end, _ = month_range(chosen, now)
    with db.connect() as conn:
        gpus = gpu_use(conn, start, end)
        money_models = costs(conn, start, end, ["gpu_model"], None, {})
        money_nodes = costs(conn, start, end, ["node"], None, {})
        lost = lost_gpus(conn, start, end)
    models = totals_by(gpus, lambda g: g.model)
    nodes = totals_by(gpus, lambda g: (g.cluster, g.node))
    everything = UseTotals()
    for g in gpus:
        everything.add(g)

    def values(part: str) -> list[int]:
        return [getattr(t, f"{part}_us") for _, t in models]

    chart = stacked_bars(
        f"GPU-hours by model, {chosen}",
        [m for m, _ in models],
        [(name, colour, values(name)) for name, colour in PARTS],
        hours,
        HOUR_US,
    )
    context = {
        "month": chosen,
        "months": picker_months(billing_months(db, now), chosen),
        "total": everything,
        "models": models,
        "nodes": nodes,
        "money_models": money_models,
        "money_nodes": money_nodes,
        "lost": lost,
        "xids": lost_xids(request.app.state.settings, lost, start, min(end, now)),
        "idlest": [g for g in idlest(gpus) if g.idle_us > 0],
        "chart": chart,
        "alerts": active_alerts(request.app.state.settings),
        "hours": hours,
    }
    return page(request, "fleet.html", context, viewer=v)
