"""Shared dependencies: the engine and clock of the running app, and ``group_by``.

They are ``async def``: none waits on anything, and FastAPI runs a plain ``def`` dependency
in its thread pool — a thread hand-off per dependency per request, most of a cached answer's
cost under load (measured with py-spy, bench/costsvc_api.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Depends, HTTPException, Query, Request
from sqlalchemy import Engine

from costsvc.rules.chargeback import DIMENSIONS, parse_group_by


async def engine(request: Request) -> Engine:
    found: Engine = request.app.state.engine
    return found


async def now(request: Request) -> datetime:
    found: datetime = request.app.state.clock()
    return found


async def group_by(
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
