"""``/v1/queues``: Kueue's ClusterQueues' quota against use, borrowing and its money
(docs/queues.md). A team token sees its own team's ClusterQueues only."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Response
from pydantic import BaseModel
from starlette.requests import Request as HttpRequest

from costsvc.api.cache import Answers, json_response
from costsvc.api.deps import Db, Given, Now, filter_params, scope_key, team_filters
from costsvc.api.errors import ERRORS
from costsvc.api.exports import SpooledResponse, export
from costsvc.auth.principal import Caller
from costsvc.costs.routes import Step, hours_asked
from costsvc.kit.csv_cells import CsvLines, safe_cell
from costsvc.kit.times import iso_z
from costsvc.queues.queries import DEFAULT_GROUP_BY, DIMENSIONS, queue_totals
from costsvc.reports.routes import CSV_DOWNLOAD, attachment
from costsvc.rules.chargeback import parse_group_by

router = APIRouter(tags=["queues"], responses=ERRORS)
GroupByParam = Annotated[
    list[str] | None,
    Query(
        description="any of "
        + ", ".join(DIMENSIONS)
        + " (default: "
        + ", ".join(DEFAULT_GROUP_BY)
        + ")",
        max_length=16,
    ),
]
Start = Annotated[datetime | None, Query(description="first hour, ISO 8601 with a zone")]
End = Annotated[datetime | None, Query(description="end, exclusive, a whole UTC hour")]
WindowText = Annotated[
    str | None,
    Query(description="today, yesterday, week, month, lastmonth, Nh or Nd", max_length=16),
]
QueueFilters = Annotated[Given, filter_params(*DIMENSIONS)]


class QueueRow(BaseModel):
    start: str | None = None  # the step's first hour (with ``step``)
    group: dict[str, str]
    currency: str
    nominal_hours: str  # resource-hours of nominal quota
    used_hours: str
    within_hours: str  # used within the ClusterQueue's own quota
    borrowed_hours: str  # used beyond it, from the cohort
    lent_hours: str  # its unused quota the cohort's borrowers used
    idle_hours: str  # its quota nobody used
    nominal_cost: str  # each figure at the price in force of its flavor's GPU
    used_cost: str
    within_cost: str
    borrowed_cost: str
    lent_cost: str
    idle_cost: str
    borrowing_charge: str  # credit_lenders: charged to it as a borrower
    lending_credit: str  # credit_lenders: credited to it as a lender
    borrowing_net: str  # charge - credit: what the policy adds to its chargeback


class QueueAnswer(BaseModel):
    start: str
    end: str
    group_by: list[str]
    step: str | None
    rows: list[QueueRow]


@dataclass(frozen=True)
class _Query:
    """The parameters both ``/v1/queues`` answers share, checked once (:func:`_asked`)."""

    lo: datetime
    hi: datetime
    groups: list[str]
    step: str | None
    filters: dict[str, list[str]]

    def rows(self, db: Any) -> list[dict[str, Any]]:
        with db.connect() as conn:
            return queue_totals(conn, self.lo, self.hi, self.groups, self.filters, self.step)


async def _asked(
    who: Caller,
    now: Now,
    given: QueueFilters,
    start: Start = None,
    end: End = None,
    window: WindowText = None,
    step: Step | None = None,
    group_by: GroupByParam = None,
) -> _Query:
    lo, hi = hours_asked(now, start, end, window)
    try:
        groups = parse_group_by(group_by, DIMENSIONS, DEFAULT_GROUP_BY)
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None
    return _Query(lo, hi, groups, step.value if step else None, team_filters(who, given))


Asked = Annotated[_Query, Depends(_asked)]


@router.get(
    "/queues",
    response_model=QueueAnswer,
    summary="Kueue ClusterQueues: quota, used, borrowed, lent and idle quota, and its money",
)
async def get_queues(db: Db, answers: Answers, q: Asked) -> Response:
    def compute() -> Response:
        answer = {"start": iso_z(q.lo), "end": iso_z(q.hi), "group_by": q.groups, "step": q.step}
        return json_response({**answer, "rows": q.rows(db)})

    key = ("queues", q.lo, q.hi, tuple(q.groups), q.step, scope_key(q.filters))
    found: Response = await answers.aget(db, key, compute)
    return found


CSV_FIGURES = [f for f in QueueRow.model_fields if f not in ("start", "group")]


@router.get(
    "/queues.csv",
    **CSV_DOWNLOAD,
    summary="The same as CSV: one line per group (and step), the borrowing charges and credits",
)
def get_queues_csv(request: HttpRequest, who: Caller, db: Db, q: Asked) -> SpooledResponse:
    def body() -> Iterator[str]:
        found = q.rows(db)
        out = CsvLines()
        out.row(["start", *q.groups, *CSV_FIGURES])
        for r in found:
            cells: list[object] = [r["start"] or iso_z(q.lo)]
            cells += [safe_cell(r["group"][d]) for d in q.groups]
            cells += [r[f] for f in CSV_FIGURES]
            out.row(cells)
        yield out.take()

    name = f"queues-{q.lo:%Y%m%dT%H}-{q.hi:%Y%m%dT%H}.csv"
    headers = {"Content-Disposition": attachment(name)}
    # as every download: spooled, sent from the file, one of the token's export slots
    return export(request, who.name, body(), "text/csv; charset=utf-8", headers)
