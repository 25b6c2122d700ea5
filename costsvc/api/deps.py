"""Shared dependencies: the engine and clock of the running app, and ``group_by``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Depends, HTTPException, Query, Request
from sqlalchemy import Engine

from costsvc.chargeback import DIMENSIONS, parse_group_by


def engine(request: Request) -> Engine:
    found: Engine = request.app.state.engine
    return found


def now(request: Request) -> datetime:
    found: datetime = request.app.state.clock()
    return found


def group_by(
    group_by: Annotated[
        list[str] | None,
        Query(description="any of " + ", ".join(DIMENSIONS) + " (repeat or comma-separate)"),
    ] = None,
) -> list[str]:
    try:
        return parse_group_by(group_by)
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None


Db = Annotated[Engine, Depends(engine)]
Now = Annotated[datetime, Depends(now)]
GroupBy = Annotated[list[str], Depends(group_by)]
