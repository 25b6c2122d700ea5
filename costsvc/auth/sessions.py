"""The pages' sign-in sessions: an API token exchanged for a random session id (the cookie),
kept as its SHA-256 with the session's CSRF token, until it expires, is signed out, or its
API token is revoked (a session is only ever as good as the token it came from: every
lookup joins the live token, so a revocation ends its sessions at once). Expired sessions
are deleted when the next one is opened. docs/security.md."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, delete, insert, select

from costsvc.auth.tokens import Principal, digest
from costsvc.db.models import ApiToken, WebSession


@dataclass(frozen=True, slots=True)
class Session:
    """A live session: who it is, its form token, and when it ends."""

    principal: Principal
    csrf: str
    expires_at: datetime


def open_session(
    engine: Engine, token_sha256: str, now: datetime, lifetime: timedelta
) -> tuple[str, Session] | None:
    """A new session for the live token with this hash: (the session id for the cookie, the
    session), or None when there is no such token."""
    t = ApiToken
    live = select(t.id, t.name, t.role, t.team).where(
        t.token_sha256 == token_sha256, t.revoked_at.is_(None)
    )
    session_id, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    expires = now + lifetime
    with engine.begin() as conn:
        row = conn.execute(live).first()
        if row is None:
            return None
        conn.execute(delete(WebSession).where(WebSession.expires_at <= now))
        conn.execute(
            insert(WebSession).values(
                session_sha256=digest(session_id),
                token_id=row.id,
                csrf=csrf,
                created_at=now,
                expires_at=expires,
            )
        )
    return session_id, Session(Principal(row.name, row.role, row.team), csrf, expires)


def session_of(engine: Engine, session_id: str, now: datetime) -> Session | None:
    """The live session with this id (unexpired, its token not revoked), or None."""
    s, t = WebSession, ApiToken
    query = (
        select(t.name, t.role, t.team, s.csrf, s.expires_at)
        .join(t, t.id == s.token_id)
        .where(s.session_sha256 == digest(session_id), s.expires_at > now, t.revoked_at.is_(None))
    )
    with engine.connect() as conn:
        row = conn.execute(query).first()
    if row is None:
        return None
    return Session(Principal(row.name, row.role, row.team), row.csrf, row.expires_at)


def close_session(engine: Engine, session_id: str) -> None:
    """Sign out: the session is gone (its cookie is worth nothing from now on)."""
    with engine.begin() as conn:
        conn.execute(delete(WebSession).where(WebSession.session_sha256 == digest(session_id)))
