"""Shared dependencies: the engine and the clock of the running app."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Engine


def engine(request: Request) -> Engine:
    found: Engine = request.app.state.engine
    return found


def now(request: Request) -> datetime:
    found: datetime = request.app.state.clock()
    return found


Db = Annotated[Engine, Depends(engine)]
Now = Annotated[datetime, Depends(now)]
