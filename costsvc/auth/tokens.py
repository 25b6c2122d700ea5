"""API bearer tokens. A token is 256 random bits shown once; the database keeps its SHA-256
(no salt needed at that entropy). Roles: costsvc/auth/roles.py (docs/security.md). Names and
teams are Kubernetes label values, so every token can be named in a URL (and revoked through
the API); the last live admin token cannot be revoked."""

from __future__ import annotations

import hashlib
import secrets
import string
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

from costsvc.auth.audit import audit
from costsvc.auth.roles import ROLES, uses_api
from costsvc.db.models import ApiToken
from kube.label_names import is_label_value

PREFIX = "gfo_"
_TOKEN_CHARS = frozenset(string.ascii_letters + string.digits + "-_.~")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a live token belongs to."""

    name: str
    role: str
    team: str | None

    @property
    def uses_api(self) -> bool:
        """May use /v1 and the pages (costsvc/auth/roles.py)."""
        return uses_api(self.role)

    @property
    def sees_all(self) -> bool:
        """Every team's data under /v1 and on /metrics."""
        return self.role in ("admin", "finance")

    @property
    def reads_all_metrics(self) -> bool:
        """Every /metrics series, per team and per pod included."""
        return self.role in ("admin", "finance", "metrics")


class LastAdmin(Exception):
    """Revoking this token would leave no live admin token."""


@dataclass(frozen=True, slots=True)
class TokenInfo:
    name: str
    role: str
    team: str | None
    created_at: datetime
    revoked_at: datetime | None


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(
    engine: Engine, name: str, role: str, team: str | None, actor: str, token: str | None = None
) -> str:
    """A new token (returned once, stored hashed); ``team`` is required for the team role.
    ``token``: register this one (e.g. from a mounted Secret) instead of a new random one."""
    if token is not None and not given_token_ok(token):
        raise ValueError("a given token is 32 to 512 URL-safe characters (A-Z a-z 0-9 - _ . ~)")
    if role not in ROLES:
        raise ValueError(f"role {role!r}: use one of {', '.join(ROLES)}")
    if (role == "team") != bool(team):
        raise ValueError("a team token needs --team; admin, finance and metrics tokens take none")
    if not name or not is_label_value(name):
        raise ValueError(
            "a token name is 1-63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    if team and not is_label_value(team):
        raise ValueError("a team is a Kubernetes label value: 1-63 letters, digits, '-', '_', '.'")
    token = token if token is not None else PREFIX + secrets.token_urlsafe(32)
    row = {
        "name": name,
        "role": role,
        "team": team or None,
        "token_sha256": digest(token),
        "created_at": datetime.now(UTC),
    }
    with engine.begin() as conn:
        if conn.execute(select(ApiToken.id).where(ApiToken.name == name)).first():
            raise ValueError(f"a token named {name!r} exists")
        conn.execute(insert(ApiToken).values(**row))
        audit(conn, actor, "token.create", name, {"role": role, "team": team})
    return token


def given_token_ok(token: str) -> bool:
    """A token someone else made is as long and as plain as ours could be."""
    return 32 <= len(token) <= 512 and all(c in _TOKEN_CHARS for c in token)


def register_given(engine: Engine, name: str, role: str, token: str, actor: str) -> bool:
    """Register ``token`` (say, an admin token kept in a Kubernetes Secret) under ``name``;
    False when it is a live token already (nothing done), so every replica's start may run
    it. Two replicas registering it at once: the unique hash lets one insert win."""
    if principal_of(engine, digest(token)) is not None:
        return False
    try:
        create_token(engine, name, role, None, actor, token=token)
    except IntegrityError:
        if principal_of(engine, digest(token)) is None:
            raise
        return False
    return True


class TokenConflict(Exception):
    """The name holds another token than the one given (``token create --ensure``)."""


def ensure_given(engine: Engine, name: str, role: str, token: str, actor: str) -> bool:
    """Make sure ``name`` is the live ``role`` token ``token``: True when registered now,
    False when it is already (so a pod's every start may run it). Raises
    :class:`TokenConflict` when the name holds another token (live or revoked) or the token
    is live under another name or role; :class:`ValueError` for a bad name or token."""

    def conflict() -> TokenConflict | None:
        """None when ``name`` is this token; the conflict otherwise (None too, with nothing
        of that name or token: see ``absent``)."""
        held = principal_of(engine, digest(token))
        if held is not None:
            if (held.name, held.role) == (name, role):
                return None
            return TokenConflict(f"the given token is live as {held.name!r} ({held.role} role)")
        found = tokens(engine, name)
        if not found:
            return None
        state = "a revoked token" if found[0].revoked_at else f"another live {found[0].role} token"
        return TokenConflict(f"the name {name!r} holds {state}, not the given one")

    def absent() -> bool:
        return principal_of(engine, digest(token)) is None and not tokens(engine, name)

    if absent():
        try:
            create_token(engine, name, role, None, actor, token=token)
            return True
        except (IntegrityError, ValueError):
            if absent():  # a bad name or token: not a replica that registered it first
                raise
    found = conflict()
    if found is not None:
        raise found
    return False


def revoke_token(engine: Engine, name: str, actor: str) -> bool:
    """Revoke the live token ``name``; False when there is none. Raises :class:`LastAdmin`
    rather than revoke the last live admin token (nobody could manage tokens any more)."""
    t = ApiToken
    live = update(t).where(t.name == name, t.revoked_at.is_(None))
    with engine.begin() as conn:
        admins = conn.execute(  # locked on PostgreSQL: two revokes cannot both pass the check
            select(t.name).where(t.role == "admin", t.revoked_at.is_(None)).with_for_update()
        ).scalars()
        if list(admins) == [name]:
            raise LastAdmin(f"{name!r} is the last live admin token: create another first")
        done = conn.execute(live.values(revoked_at=datetime.now(UTC))).rowcount
        if done:
            audit(conn, actor, "token.revoke", name, {})
    return bool(done)


def principal_of(engine: Engine, token_sha256: str) -> Principal | None:
    """The owner of the live token with this hash, or None."""
    t = ApiToken
    query = select(t.name, t.role, t.team).where(
        t.token_sha256 == token_sha256, t.revoked_at.is_(None)
    )
    with engine.connect() as conn:
        row = conn.execute(query).first()
    return Principal(row.name, row.role, row.team) if row is not None else None


def tokens(engine: Engine, name: str | None = None) -> list[TokenInfo]:
    """Every token (or the one named), by name."""
    t = ApiToken
    query = select(t.name, t.role, t.team, t.created_at, t.revoked_at).order_by(t.name)
    if name is not None:
        query = query.where(t.name == name)
    with engine.connect() as conn:
        return [TokenInfo(*r) for r in conn.execute(query)]
