"""``/v1/queues``: Kueue's ClusterQueues' quota against use, borrowing and its money
(docs/queues.md). A team token sees its own team's ClusterQueues only."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Response
from pydantic import BaseModel

from costsvc.api.cache import Answers, json_response
from costsvc.api.deps import Db, Given, Now, filter_params, scope_key, team_filters
from costsvc.api.errors import ERRORS
from costsvc.auth.principal import Caller
from costsvc.costs.routes import Step, hours_asked
from costsvc.kit.times import iso_z
from costsvc.queues.queries import DEFAULT_GROUP_BY, DIMENSIONS, queue_totals
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


@router.get(
    "/queues",
    response_model=QueueAnswer,
    summary="Kueue ClusterQueues: quota, used, borrowed, lent and idle quota, and its money",
)
async def get_queues(
    who: Caller,
    db: Db,
    now: Now,
    answers: Answers,
    given: QueueFilters,
    start: Start = None,
    end: End = None,
    window: WindowText = None,
    step: Step | None = None,
    group_by: GroupByParam = None,
) -> Response:
    lo, hi = hours_asked(now, start, end, window)
    try:
        groups = parse_group_by(group_by, DIMENSIONS, DEFAULT_GROUP_BY)
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None
    filters = team_filters(who, given)
    by = step.value if step else None

    def compute() -> Response:
        with db.connect() as conn:
            rows = queue_totals(conn, lo, hi, groups, filters, by)
        answer = {"start": iso_z(lo), "end": iso_z(hi), "group_by": groups, "step": by}
        return json_response({**answer, "rows": rows})

    key = ("queues", lo, hi, tuple(groups), by, scope_key(filters))
    found: Response = await answers.aget(db, key, compute)
    return found
