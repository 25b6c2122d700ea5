"""Bearer tokens. A token is 256 random bits shown once; the database keeps its SHA-256.

Roles: ``admin`` sees everything and manages budgets, tokens and the cost model; ``finance``
sees every team, exports reports and closes months; ``team`` sees its own team only — also
through ``group_by``, filters and CSV. Anything else is 401 (no or unknown token) or 403.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from sqlalchemy import Engine, insert, select, update

from costsvc.db.models import ApiToken, AuditEntry

ROLES = ("admin", "finance", "team")
PREFIX = "gfo_"
CACHE_SECONDS = 5.0  # a revocation reaches other processes within this; this one at once


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


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    role: str
    team: str | None

    @property
    def sees_all(self) -> bool:
        return self.role in ("admin", "finance")


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(engine: Engine, name: str, role: str, team: str | None, actor: str) -> str:
    """A new token (returned once, stored hashed); ``team`` is required for the team role."""
    if role not in ROLES:
        raise ValueError(f"role {role!r}: use one of {', '.join(ROLES)}")
    if (role == "team") != bool(team):
        raise ValueError("a team token needs --team; admin and finance tokens take none")
    token = PREFIX + secrets.token_urlsafe(32)
    with engine.begin() as conn:
        if conn.execute(select(ApiToken.id).where(ApiToken.name == name)).first():
            raise ValueError(f"a token named {name!r} exists")
        conn.execute(insert(ApiToken).values(name=name, role=role, team=team or None,
                                             token_sha256=digest(token),
                                             created_at=datetime.now(UTC)))  # fmt: skip
        audit(conn, actor, "token.create", name, {"role": role, "team": team})
    return token


def revoke_token(engine: Engine, name: str, actor: str) -> bool:
    with engine.begin() as conn:
        done = conn.execute(update(ApiToken).where(ApiToken.name == name,
                                                   ApiToken.revoked_at.is_(None))
                            .values(revoked_at=datetime.now(UTC))).rowcount  # fmt: skip
        if done:
            audit(conn, actor, "token.revoke", name, {})
    CACHE.clear()
    return bool(done)


def audit(conn: Any, actor: str, action: str, target: str, detail: dict[str, Any]) -> None:
    conn.execute(insert(AuditEntry).values(at=datetime.now(UTC), actor=actor, action=action,
                                           target=target[:253], detail=detail))  # fmt: skip


def principal(request: Request) -> Principal:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise HTTPException(401, "missing bearer token", {"WWW-Authenticate": "Bearer"})
    key = digest(token.strip())
    cached, who = CACHE.get(key)
    if not cached:
        engine: Engine = request.app.state.engine
        with engine.connect() as conn:
            row = conn.execute(select(ApiToken.name, ApiToken.role, ApiToken.team).where(
                ApiToken.token_sha256 == key, ApiToken.revoked_at.is_(None)
            )).first()  # fmt: skip
        who = Principal(row.name, row.role, row.team) if row is not None else None
        CACHE.put(key, who)
    if who is None:
        raise HTTPException(401, "unknown or revoked token", {"WWW-Authenticate": "Bearer"})
    return who


def admin(who: Annotated[Principal, Depends(principal)]) -> Principal:
    if who.role != "admin":
        raise HTTPException(403, "this needs an admin token")
    return who


def finance(who: Annotated[Principal, Depends(principal)]) -> Principal:
    if not who.sees_all:
        raise HTTPException(403, "this needs a finance or admin token")
    return who


Caller = Annotated[Principal, Depends(principal)]
Admin = Annotated[Principal, Depends(admin)]
Finance = Annotated[Principal, Depends(finance)]


def check_team(who: Principal, team: str) -> None:
    """A team token asking about another team: 404, as if that team did not exist."""
    if not who.sees_all and team != who.team:
        raise HTTPException(404, f"no team {team!r} visible to this token")
