"""Who is calling: the bearer token's principal, and the role checks of every route.

Roles: ``admin`` sees everything and manages budgets, tokens and the cost model; ``finance``
sees every team, exports reports, closes months and manages budgets; ``team`` sees its own
team only — also through ``group_by``, filters and CSV; ``metrics`` (for Prometheus) reads
``/metrics`` and nothing under ``/v1``. Anything else is 401 (no or unknown token) or 403.
Token storage: costsvc/db/tokens.py; who sees what: docs/security.md.

The dependencies are ``async def`` (a token lookup, every few seconds per token, goes to the
thread pool): a plain ``def`` dependency costs a thread hand-off on every request.

Every route that takes :data:`Caller`, :data:`Finance` or :data:`Admin` carries the bearer
security scheme in the OpenAPI description (``bearer``), so a new route inherits both the
check and its documentation by naming one of them.
"""

from __future__ import annotations

import threading
import time
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine

from costsvc.api.errors import shown
from costsvc.db.tokens import Principal, digest, principal_of

CACHE_SECONDS = 5.0  # a revocation reaches other processes within this; this one at once
MAX_TOKEN = 512  # longer is no token of ours: refused without a lookup

BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="An API token (`gfo_…`): `gpu-costsvc token create` or `POST /v1/tokens`.",
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]


class _TokenCache:
    """Token hash -> (principal, when looked up): one database read per token every few
    seconds instead of one per request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: dict[str, tuple[Principal | None, float]] = {}

    def get(self, key: str) -> tuple[bool, Principal | None]:
        with self._lock:
            hit = self._found.get(key)
        if hit is None or time.monotonic() - hit[1] > CACHE_SECONDS:
            return False, None
        return True, hit[0]

    def put(self, key: str, who: Principal | None) -> None:
        with self._lock:
            if len(self._found) > 10_000:  # unknown tokens must not grow it without bound
                self._found.clear()
            self._found[key] = (who, time.monotonic())

    def clear(self) -> None:
        with self._lock:
            self._found.clear()


CACHE = _TokenCache()
_UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}


async def optional_principal(request: Request, credentials: Credentials) -> Principal | None:
    """The caller, or None when no bearer token was sent; 401 for an unknown token."""
    if credentials is None:
        return None
    token = credentials.credentials.strip()
    if not token or len(token) > MAX_TOKEN:
        raise HTTPException(401, "unknown or revoked token", _UNAUTHORIZED)
    key = digest(token)
    cached, who = CACHE.get(key)
    if not cached:
        engine: Engine = request.app.state.engine
        who = await run_in_threadpool(principal_of, engine, key)  # the loop never waits
        CACHE.put(key, who)
    if who is None:
        raise HTTPException(401, "unknown or revoked token", _UNAUTHORIZED)
    return who


async def principal(who: Annotated[Principal | None, Depends(optional_principal)]) -> Principal:
    """A caller of ``/v1``: any role but ``metrics``."""
    if who is None:
        raise HTTPException(401, "missing bearer token", _UNAUTHORIZED)
    if who.role not in ("admin", "finance", "team"):
        raise HTTPException(403, f"a {who.role} token reads /metrics only")
    return who


async def admin(who: Annotated[Principal, Depends(principal)]) -> Principal:
    if who.role != "admin":
        raise HTTPException(403, "this needs an admin token")
    return who


async def finance(who: Annotated[Principal, Depends(principal)]) -> Principal:
    if not who.sees_all:
        raise HTTPException(403, "this needs a finance or admin token")
    return who


Caller = Annotated[Principal, Depends(principal)]
Admin = Annotated[Principal, Depends(admin)]
Finance = Annotated[Principal, Depends(finance)]
MaybeCaller = Annotated[Principal | None, Depends(optional_principal)]


def check_team(who: Principal, team: str) -> None:
    """A team token asking about another team: 404, as if that team did not exist."""
    if not who.sees_all and team != who.team:
        raise HTTPException(404, f"no team {shown(team)} visible to this token")
