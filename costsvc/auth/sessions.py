"""The pages' sign-in sessions: an API token exchanged for a random session id (the cookie),
kept as its SHA-256 with the session's CSRF token, until it expires, is signed out, or its
API token is revoked (a session is only ever as good as the token it came from: every
lookup joins the live token, so a revocation ends its sessions at once). Expired sessions
are deleted when the next one is opened; a token keeps at most ``keep`` live sessions (its
oldest ends when a new one would pass that), and a sign-in from a browser that still holds a
session ends that session. docs/security.md."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, delete, insert, or_, select

from costsvc.auth.tokens import Principal, digest
from costsvc.db.models import ApiToken, WebSession


@dataclass(frozen=True, slots=True)
class Session:
    """A live session: who it is, its form token, and when it ends."""

    principal: Principal
    csrf: str
    expires_at: datetime


def open_session(
    engine: Engine,
    token_sha256: str,
    now: datetime,
    lifetime: timedelta,
    keep: int,
    replaces: str | None = None,
) -> tuple[str, Session] | None:
    """A new session for the live token with this hash: (the session id for the cookie, the
    session), or None when there is no such token. The session ``replaces`` (the browser's
    previous one) ends, and so do the token's oldest beyond ``keep`` live ones."""
    t, s = ApiToken, WebSession
    live = (
        select(t.id, t.name, t.role, t.team)
        .where(t.token_sha256 == token_sha256, t.revoked_at.is_(None))
        .with_for_update()  # PostgreSQL: one sign-in of a token at a time keeps the cap exact
    )
    session_id, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    expires = now + lifetime
    with engine.begin() as conn:
        row = conn.execute(live).first()
        if row is None:
            return None
        gone = s.expires_at <= now
        if replaces:
            gone = or_(gone, s.session_sha256 == digest(replaces))
        conn.execute(delete(s).where(gone))
        conn.execute(
            insert(s).values(
                session_sha256=digest(session_id),
                token_id=row.id,
                csrf=csrf,
                created_at=now,
                expires_at=expires,
            )
        )
        newest = select(s.id).where(s.token_id == row.id).order_by(s.id.desc())
        over = conn.execute(newest.offset(keep)).scalars().all()
        if over:
            conn.execute(delete(s).where(s.id.in_(over)))
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
