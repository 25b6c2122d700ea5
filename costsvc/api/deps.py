"""Shared dependencies: the engine and clock of the running app, ``group_by``, and the
repeatable filter parameters with the caller's team scope (:func:`filter_params`,
:func:`team_filters`).

They are ``async def``: none waits on anything, and FastAPI runs a plain ``def`` dependency
in its thread pool — a thread hand-off per dependency per request, most of a cached answer's
cost under load (measured with py-spy, bench/costsvc_api.py)."""

from __future__ import annotations

import inspect
from datetime import datetime
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Query, Request
from sqlalchemy import Engine

from costsvc.auth.principal import check_team
from costsvc.auth.tokens import Principal
from costsvc.kit.lists import comma_list
from costsvc.rules.chargeback import DIMENSIONS, parse_group_by

MAX_VALUES = 100  # filter values per filter, after splitting at commas
MAX_VALUE = 253  # characters of one filter value (a pod name's limit)
Filter = Annotated[list[str] | None, Query(max_length=MAX_VALUES)]  # repeats; values: split
Given = dict[str, list[str] | None]  # filter name -> its values as sent


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


def filter_params(*names: str) -> Any:
    """A dependency (for ``Annotated[Given, ...]``) taking one repeatable :data:`Filter` query
    parameter per name, in that order, and answering them by name as sent."""

    async def given(**values: list[str] | None) -> Given:
        return values

    kind = inspect.Parameter.KEYWORD_ONLY
    given.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, kind, default=None, annotation=Filter) for n in names]
    )
    return Depends(given)


def split_values(values: list[str] | None, name: str) -> list[str]:
    """Repeated and comma-separated values, normalised (sorted, each once), bounded."""
    found = set(comma_list(values))
    if len(found) > MAX_VALUES:
        raise HTTPException(400, f"{name}: at most {MAX_VALUES} values")
    if any(len(v) > MAX_VALUE for v in found):
        raise HTTPException(400, f"{name}: a value is longer than {MAX_VALUE} characters")
    return sorted(found)


def own_team(who: Principal, filters: dict[str, list[str]]) -> dict[str, list[str]]:
    """``filters`` narrowed to the team the caller sees, by the team filter
    (costsvc/auth/principal.py ``check_team``: 403 when they name another team)."""
    mine = check_team(who, *filters.get("team", []), in_filter=True)
    if mine is not None:
        filters["team"] = [mine]
    return filters


def team_filters(who: Principal, given: Given) -> dict[str, list[str]]:
    """The filters sent, split (:func:`split_values`), empty ones dropped, :func:`own_team`."""
    return own_team(who, {k: found for k, v in given.items() if (found := split_values(v, k))})


def scope_key(filters: dict[str, list[str]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``filters`` as part of an answer's cache key: by name, each one's values in order."""
    return tuple((k, tuple(v)) for k, v in sorted(filters.items()))
