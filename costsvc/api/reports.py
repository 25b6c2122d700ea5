"""Reports of a billing month: ``chargeback.csv`` and FOCUS 1.2 ``focus.csv``, streamed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import StreamingResponse

from costsvc.api.auth import Caller
from costsvc.api.deps import Db
from costsvc.api.errors import ERRORS
from costsvc.months import MONTH, month_close
from costsvc.queries import DIMENSIONS
from costsvc.reports import chargeback_csv, focus_csv

router = APIRouter(tags=["reports"], responses=ERRORS)
CSV = {"text/csv": {"schema": {"type": "string"}}}
MonthParam = Annotated[str, Query(description="YYYY-MM", pattern=MONTH.pattern)]


def _stream(pieces: Iterator[str], name: str, digest: str | None) -> StreamingResponse:
    first = next(pieces)  # errors (a bad month) surface before the response starts

    def body() -> Iterator[bytes]:
        yield first.encode()
        for piece in pieces:
            yield piece.encode()

    headers = {"Content-Disposition": f'attachment; filename="{name}"'}
    if digest:
        headers["X-Content-SHA256"] = digest  # recorded when the month was closed
    return StreamingResponse(body(), media_type="text/csv; charset=utf-8", headers=headers)


@router.get("/reports/chargeback.csv", response_class=StreamingResponse,
            responses={200: {"content": CSV}},
            summary="A month's chargeback as CSV (docs: costsvc/reports.py)")  # fmt: skip
def chargeback(
    who: Caller,
    db: Db,
    month: MonthParam,
    group_by: Annotated[list[str] | None, Query(description="any of " + ", ".join(DIMENSIONS))]
    = None,
) -> StreamingResponse:  # fmt: skip
    groups = [v for item in group_by or [] for v in item.split(",") if v]
    for g in groups:
        if g not in DIMENSIONS:
            raise HTTPException(400, f"group_by {g!r}: use any of {', '.join(DIMENSIONS)}")
    if len(set(groups)) != len(groups):
        raise HTTPException(400, "group_by names a dimension twice")
    team = None if who.sees_all else who.team
    closed = month_close(db, month)
    digest = closed.csv_sha256 if closed and not groups and team is None else None
    name = f"chargeback-{month}{'-' + team if team else ''}.csv"
    return _stream(chargeback_csv(db, month, groups or None, team), name, digest)


@router.get("/reports/focus.csv", response_class=StreamingResponse,
            responses={200: {"content": CSV}},
            summary="A month's chargeback in FinOps FOCUS 1.2 (docs/focus.md)")  # fmt: skip
def focus(who: Caller, db: Db, month: MonthParam) -> StreamingResponse:
    team = None if who.sees_all else who.team
    closed = month_close(db, month)
    digest = closed.focus_sha256 if closed and team is None else None
    return _stream(focus_csv(db, month, team), f"focus-{month}.csv", digest)
