"""Who is calling: the bearer token's principal, and the role checks of every route.

Roles: ``admin`` sees everything and manages budgets, tokens and the cost model; ``finance``
sees every team, exports reports, closes months and manages budgets; ``team`` sees its own
team only — also through ``group_by``, filters and CSV; ``metrics`` (for Prometheus) reads
``/metrics`` and nothing under ``/v1``. Anything else is 401 (no or unknown token) or 403.
Token storage: costsvc/auth/tokens.py; who sees what: docs/security.md.

The dependencies are ``async def`` (a token lookup, once per token and data version, goes to
the thread pool): a plain ``def`` dependency costs a thread hand-off on every request. A
token's principal is kept while the data version is unchanged (costsvc/api/cache.py): creating
or revoking a token bumps it, so every process stops accepting a revoked token at once.

Every route that takes :data:`Caller`, :data:`Finance` or :data:`Admin` carries the bearer
security scheme in the OpenAPI description (``bearer``), so a new route inherits both the
check and its documentation by naming one of them.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine

from costsvc.api.cache import Kept, request_version
from costsvc.api.errors import shown
from costsvc.auth.tokens import Principal, digest, principal_of

MAX_TOKEN = 512  # longer is no token of ours: refused without a lookup

BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="An API token (`gfo_…`): `gpu-costsvc token create` or `POST /v1/tokens`.",
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]


# token hash -> principal (None: unknown), one database read per token and data version
CACHE: Kept[str, Principal | None] = Kept(10_000)
_UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}


async def optional_principal(request: Request, credentials: Credentials) -> Principal | None:
    """The caller, or None when no bearer token was sent; 401 for an unknown token."""
    if credentials is None:
        return None
    token = credentials.credentials.strip()
    if not token or len(token) > MAX_TOKEN:
        raise HTTPException(401, "unknown or revoked token", _UNAUTHORIZED)
    key = digest(token)
    version = await request_version(request)
    who = CACHE.get(version, key)
    if Kept.missing(who):
        engine: Engine = request.app.state.engine
        who = await run_in_threadpool(principal_of, engine, key)  # the loop never waits
        CACHE.put(version, key, who)
    if who is None:
        raise HTTPException(401, "unknown or revoked token", _UNAUTHORIZED)
    return who


async def principal(who: Annotated[Principal | None, Depends(optional_principal)]) -> Principal:
    """A caller of ``/v1``: any role but ``metrics``."""
    if who is None:
        raise HTTPException(401, "missing bearer token", _UNAUTHORIZED)
    if not who.uses_api:
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


def check_team(
    who: Principal, *asked: str | None, in_filter: bool = False, missing: str | None = None
) -> str | None:
    """The team filter, the one rule of which team's data a caller sees (docs/security.md):
    every team's for finance and admin (None), else its own team's (returned). Asking about
    another team is refused: in a query's filter (``in_filter``, ``team=``) with 403; named in
    the path (a team, or an object of another team: ``missing`` is then what the answer says)
    with 404, as if it did not exist. A token of no team: 403."""
    if who.sees_all:
        return None
    if who.team is None:
        raise HTTPException(403, f"a {who.role} token sees no team's data")
    if any(t != who.team for t in asked):
        if in_filter:
            raise HTTPException(403, "a team token can only ask about its own team")
        raise HTTPException(
            404, missing or f"no team {shown(asked[0] or '')} visible to this token"
        )
    return who.team
