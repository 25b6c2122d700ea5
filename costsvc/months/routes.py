"""Month close: ``/v1/months``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from fastapi import Path as PathParam
from pydantic import BaseModel

from costsvc.api.deps import Db, Now
from costsvc.api.errors import ERRORS
from costsvc.auth.principal import Caller, Finance
from costsvc.kit.times import MONTH, iso_z
from costsvc.months.close import MAX_REASON, MonthError, close_month
from costsvc.months.repository import closed_month_names, month_close

router = APIRouter(tags=["months"], responses=ERRORS)
MonthPath = Annotated[str, PathParam(pattern=MONTH.pattern, description="YYYY-MM")]


class MonthState(BaseModel):
    month: str
    closed: bool
    closed_at: str | None = None
    closed_by: str | None = None
    chargeback_csv_sha256: str | None = None
    focus_csv_sha256: str | None = None


def _month_state(db: Any, month: str) -> dict[str, Any]:
    c = month_close(db, month)
    if c is None:
        return {"month": month, "closed": False}
    return {
        "month": month,
        "closed": True,
        "closed_at": iso_z(c.closed_at),
        "closed_by": c.closed_by,
        "chargeback_csv_sha256": c.csv_sha256,
        "focus_csv_sha256": c.focus_sha256,
    }


@router.get(
    "/months/{month}",
    response_model=MonthState,
    summary="Whether a month is closed, and its reports' SHA-256",
)
def get_month(month: MonthPath, who: Caller, db: Db) -> dict[str, Any]:
    return _month_state(db, month)


@router.post(
    "/months/{month}/close",
    response_model=MonthState,
    summary="Freeze a month (finance/admin): later data becomes corrections",
    responses={
        409: {
            "description": "not ended yet, already closed, or it has failed or missing hours "
            "(named; see /v1/ingest/failed-hours) and force is not set, or not one hour of "
            "it was ingested and force with a reason is not set"
        }
    },
)
def post_close(
    month: MonthPath,
    who: Finance,
    db: Db,
    now: Now,
    force: Annotated[
        bool,
        Query(description="close even with failed or missing hours (recorded in the audit log)"),
    ] = False,
    reason: Annotated[
        str,
        Query(
            max_length=MAX_REASON,
            description="why it is closed anyway (recorded in the audit log): a month with "
            "not one hour ingested is closed only with force and a reason",
        ),
    ] = "",
) -> dict[str, Any]:
    try:
        close_month(db, month, who.name, now, force, reason)
    except MonthError as exc:
        raise HTTPException(409, str(exc)) from None
    return _month_state(db, month)


@router.get("/months", response_model=list[MonthState], summary="Closed months")
def list_months(who: Caller, db: Db) -> list[dict[str, Any]]:
    return [_month_state(db, m) for m in closed_month_names(db)]
