"""The explorer (every session): ``/v1/costs`` over any window — a preset or a range of days —
any step, any grouping, any filters and an idle choice, as a chart and a table of the same
rows, with drill-down from any row and a download of the API's own bytes. The URL holds the
whole view (the API's parameter names), so a view can be shared and bookmarked.

The rows are the API's: the same parameters parsed by the same functions (the window:
``hours_asked``; the filters and a team session's scope: ``team_filters``), the same query
function (``costs``); the download is the API's route itself. A team session's filters are
narrowed to its own team as the API narrows them: naming another team is a 403."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse

from costsvc.api.cache import Answers
from costsvc.api.deps import Db, Now, team_filters
from costsvc.auth.tokens import Principal
from costsvc.costs import routes as api
from costsvc.costs.queries import costs
from costsvc.kit.money import MICRO, money, money_rounded, to_micro
from costsvc.kit.times import DAY, STEP_LENGTHS, iso_z, month_of, parse_day, step_starts
from costsvc.pages.charts import Chart, stacked_bars, stacked_columns
from costsvc.pages.figures import Sums
from costsvc.pages.render import PREFIX, PageError, page, step_name
from costsvc.pages.session import SignedIn
from costsvc.rules.chargeback import DIMENSIONS, parse_group_by
from costsvc.rules.idle_share import CHOICES

router = APIRouter(prefix=PREFIX, include_in_schema=False)

PRESETS = (
    ("today", "Today"),
    ("yesterday", "Yesterday"),
    ("24h", "Last 24 hours"),
    ("week", "This week"),
    ("7d", "Last 7 days"),
    ("month", "This month"),
    ("30d", "Last 30 days"),
    ("lastmonth", "Last month"),
    ("90d", "Last 90 days"),
)
STEPS = ("hour", "day", "week", "month")
GROUPS = 3  # group-by choices on the form
MAX_ROWS = 1000  # rows in the table (the download has them all)
MAX_STEPS = 400  # columns a chart draws
BARS = 20  # groups a chart without a step draws
# where a row leads: its dimension, then the next one down
DRILL = {
    "team": "project",
    "project": "namespace",
    "stage": "project",
    "namespace": "workload",
    "workload": "pod",
    "controller_kind": "controller",
    "controller": "pod",
    "pod": "container",
    "cluster": "node",
    "node": "gpu_model",
    "gpu_model": "mig_profile",
    "mig_profile": "pod",
    "cohort": "cluster_queue",  # Kueue: a cohort's ClusterQueues, their LocalQueues, pods
    "cluster_queue": "queue",
    "queue": "pod",
    "flavor": "cluster_queue",
}
Filters = tuple[tuple[str, tuple[str, ...]], ...]
TOTALS = (  # the columns the table adds up
    "total_cost",
    "allocated_cost",
    "used_cost",
    "allocated_idle_cost",
    "unmeasured_cost",
    "idle_cost",
    "gpu_hours",
)


@dataclass(frozen=True)
class View:
    """What the explorer shows; its URL (:meth:`query`) is the whole of it."""

    window: str = "month"
    first: date | None = None  # a range of whole days, both included (instead of window)
    last: date | None = None
    step: str = "day"  # "" none
    group_by: tuple[str, ...] = ("team",)
    idle: str = "separate"
    filters: Filters = ()

    def pairs(self) -> list[tuple[str, str]]:
        out = (
            [("from", self.first.isoformat()), ("to", self.last.isoformat())]
            if self.first and self.last
            else [("window", self.window)]
        )
        out += [("step", self.step), ("group_by", ",".join(self.group_by)), ("idle", self.idle)]
        return out + [(name, v) for name, values in self.filters for v in values]

    def query(self, **change: Any) -> str:
        return urlencode(replace(self, **change).pairs())

    def drill(self, group: dict[str, str]) -> str | None:
        """The view of one row: its values as filters, grouped by the next dimension down
        (None where a value is empty — it cannot be a filter — or nothing is below)."""
        if not group or any(not v for v in group.values()):
            return None
        below = self.below()
        if not below:
            return None
        kept = {n: vs for n, vs in self.filters if n not in group}
        kept.update({n: (v,) for n, v in group.items()})
        groups = tuple(d for d in (*self.group_by[:-1], below) if d not in kept)
        return self.query(filters=tuple(sorted(kept.items())), group_by=groups or (below,))

    def below(self) -> str:
        """The dimension a drill-down groups by."""
        return DRILL.get(self.group_by[-1], "")

    def without(self, name: str, value: str) -> str:
        left = [(n, tuple(v for v in vs if (n, v) != (name, value))) for n, vs in self.filters]
        return self.query(filters=tuple((n, vs) for n, vs in left if vs))


def _day(text: str | None, name: str) -> date | None:
    if not text:
        return None
    try:
        return parse_day(text)
    except ValueError:
        raise PageError(400, f"{name}: expected a day, YYYY-MM-DD") from None


def view_of(request: Request, who: Principal) -> View:
    """The view the URL asks for (the defaults where it is silent); a bad value is a 400."""
    q = request.query_params
    first, last = _day(q.get("from"), "from"), _day(q.get("to"), "to")
    if (first is None) != (last is None):
        raise PageError(400, "from and to: give both days, or neither")
    step = q.get("step", "day")
    if step not in ("", *STEPS):
        raise PageError(400, f"step: use any of {', '.join(STEPS)}, or none")
    idle = q.get("idle", "separate")
    if idle not in CHOICES:
        raise PageError(400, f"idle: use any of {', '.join(CHOICES)}")
    default = ("team",) if who.team is None else ("project",)
    try:
        groups = tuple(parse_group_by(q.getlist("group_by"))) or default
    except ValueError as exc:
        raise PageError(400, str(exc)) from None
    filters = {d: q.getlist(d) for d in api.FILTERS if q.getlist(d)}
    scoped = team_filters(who, dict(filters))  # the API's scope rule (403 for another team)
    return View(
        window=q.get("window", "month"),
        first=first,
        last=last,
        step=step,
        group_by=groups,
        idle=idle,
        filters=tuple((n, tuple(scoped[n])) for n in sorted(scoped)),
    )


def span(view: View, now: datetime) -> tuple[datetime, datetime]:
    """The view's [start, end) in whole UTC hours, by the API's rule (``hours_asked``)."""
    if view.first and view.last:
        start = datetime.combine(view.first, time(), UTC)
        end = datetime.combine(view.last + timedelta(days=1), time(), UTC)
        return api.hours_asked(now, start, end, None)
    return api.hours_asked(now, None, None, view.window)


def api_pairs(view: View, lo: datetime, hi: datetime) -> list[tuple[str, str]]:
    """The ``/v1/costs`` parameters of the view: the same answer, to the byte."""
    out = [("start", iso_z(lo)), ("end", iso_z(hi))]
    out += [(k, v) for k, v in view.pairs() if k not in ("window", "from", "to") and v]
    return out


def _label(group: dict[str, str]) -> str:
    return " / ".join(v or "(none)" for v in group.values()) or "all"


def charts(rows: list[dict[str, Any]], view: View, lo: datetime, hi: datetime) -> list[Chart]:
    """A chart per currency: total cost per step stacked by group, or (no step) a bar per
    group of its allocated and idle cost (the :data:`BARS` largest). Pure."""
    out = []
    for currency in sorted({r["currency"] for r in rows}):
        mine = [r for r in rows if r["currency"] == currency]
        if view.step:
            if (hi - lo) / STEP_LENGTHS.get(view.step, 28 * DAY) > MAX_STEPS:
                continue  # too many to draw (and never enumerated: 1970 to 2999 by hour)
            starts = [iso_z(t) for t in step_starts(lo, hi, view.step)]
            index = {s: i for i, s in enumerate(starts)}
            per: dict[str, list[int]] = {}
            for r in mine:
                values = per.setdefault(_label(r["group"]), [0] * len(starts))
                values[index[r["start"]]] += to_micro(r["total_cost"])
            names = [
                step_name(s, view.step)[5:] if view.step == "hour" else step_name(s, view.step)
                for s in starts
            ]
            title = f"Total cost per {view.step} by {', '.join(view.group_by)} ({currency})"
            chart = stacked_columns(title, names, sorted(per.items()), money_rounded, MICRO)
        else:
            biggest = sorted(mine, key=lambda r: -to_micro(r["total_cost"]))[:BARS]
            parts = [
                (part, colour, [to_micro(r[f"{part}_cost"]) for r in biggest])
                for part, colour in (("allocated", 0), ("idle", 1))
            ]
            title = f"Cost by {', '.join(view.group_by)} ({currency})"
            labels = [_label(r["group"]) for r in biggest]
            chart = stacked_bars(title, labels, parts, money_rounded, MICRO)
        chart.axis = currency
        out.append(chart)
    return out


def totals(rows: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """Every money column of ``rows`` summed per currency (figures.py ``Sums``: micro-units,
    written exact)."""
    sums = Sums()
    for r in rows:
        sums.add(r, *TOTALS)
    return [
        {"currency": c, **{f: money(s[f]) for f in TOTALS}}
        for c, s in sorted(sums.by_currency.items())
    ]


@router.get("/explore")
def explore(request: Request, v: SignedIn, db: Db, now: Now) -> Response:
    q = request.query_params
    if q.get("add") and q.get("value"):  # the form's "add a filter": to the view's own URL
        view = view_of(request, v.principal)
        name, value = q["add"], q["value"]
        if name not in api.FILTERS:
            raise PageError(400, f"filter {name!r}: not a dimension")
        added = dict(view.filters)
        added[name] = tuple(sorted({*added.get(name, ()), value}))
        to = view.query(filters=tuple(sorted(added.items())))
        return RedirectResponse(f"{PREFIX}/explore?{to}", status_code=303)
    view = view_of(request, v.principal)
    lo, hi = span(view, now)
    filters = {n: list(vs) for n, vs in view.filters}
    with db.connect() as conn:
        rows = costs(conn, lo, hi, list(view.group_by), view.step or None, filters, view.idle)
    context = {
        "view": view,
        "start": iso_z(lo),
        "end": iso_z(hi),
        "month": month_of(lo),  # the FOCUS downloads: the billing month the view starts in
        "api_query": urlencode(api_pairs(view, lo, hi), safe=":,"),
        "rows": rows[:MAX_ROWS],
        "more": max(0, len(rows) - MAX_ROWS),
        "totals": totals(rows),
        "charts": charts(rows, view, lo, hi),
        "presets": PRESETS,
        "steps": STEPS,
        "dimensions": DIMENSIONS,
        "filter_names": api.FILTERS,
        "choices": CHOICES,
        "groups": GROUPS,
    }
    return page(request, "explore.html", context, viewer=v)


@router.get("/explore/costs.json")
async def download(
    request: Request,
    v: SignedIn,
    db: Db,
    now: Now,
    answers: Answers,
) -> Response:
    """The view's rows as ``/v1/costs`` answers them, with the session's principal: the
    API's route itself, so the same bytes."""
    view = view_of(request, v.principal)
    lo, hi = span(view, now)
    step = api.Step(view.step) if view.step else None
    given: dict[str, list[str] | None] = {n: list(vs) for n, vs in view.filters}
    answer = await api.get_costs(
        v.principal,
        db,
        now,
        given,
        list(view.group_by),
        answers,
        lo,
        hi,
        None,
        step,
        api.IdleShare(view.idle),
    )
    answer.headers["Content-Disposition"] = 'attachment; filename="costs.json"'
    return answer
