"""Signing in to the pages: an API token, typed into a form (a POST body: never a URL), is
exchanged for a server-side session (costsvc/auth/sessions.py) whose random id is the cookie —
``HttpOnly`` (no script can read it), ``SameSite=Strict`` (no other site's page can send it),
``Path=/ui`` (the API never sees it: /v1 takes bearer tokens only), ``Secure`` over HTTPS —
and which ends after ``COSTSVC_SESSION_HOURS``, at sign-out, when its token is revoked, when
the same browser signs in again, or when its token has opened
``COSTSVC_SESSIONS_PER_TOKEN`` newer ones. Sign-in attempts are limited per client address and
per token in any minute (429 with ``Retry-After``).

Every POST of the pages (sign-in, sign-out, month close, budgets) must come from the pages' own
origin (its ``Origin`` header, or ``Referer`` where a browser sends no ``Origin``, names this
host), and every POST of a signed-in session carries the session's CSRF token as a form field.

A session sees exactly what its token sees through the API (costsvc/auth/principal.py): a team
session its own team only; a ``metrics`` token cannot sign in.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Form, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse

from costsvc.api.deps import Db, Now
from costsvc.api.rates import SlidingWindow, attempt
from costsvc.auth.principal import MAX_TOKEN
from costsvc.auth.sessions import Session, close_session, open_session, session_of
from costsvc.auth.tokens import Principal, digest
from costsvc.kit.settings import Settings
from costsvc.pages.render import PREFIX, page, segment

COOKIE = "gfo_session"
MAX_SESSION_ID = 64  # ours are 43 characters: a longer cookie is refused unread

router = APIRouter(prefix=PREFIX, include_in_schema=False)


@dataclass(frozen=True, slots=True)
class Viewer:
    """A signed-in browser: its principal, and its session's form token."""

    principal: Principal
    csrf: str
    session_id: str


class SignInNeeded(HTTPException):
    """No live session: the pages answer with the sign-in page."""

    def __init__(self) -> None:
        super().__init__(401, "sign in first")


async def viewer(request: Request) -> Viewer:
    session_id = request.cookies.get(COOKIE, "")
    if not session_id or len(session_id) > MAX_SESSION_ID:
        raise SignInNeeded
    now: datetime = request.app.state.clock()
    found: Session | None = await run_in_threadpool(
        session_of, request.app.state.engine, session_id, now
    )
    if found is None:
        raise SignInNeeded
    if not found.principal.uses_api:
        raise HTTPException(403, f"a {found.principal.role} token cannot use the pages")
    return Viewer(found.principal, found.csrf, session_id)


async def finance_viewer(v: Annotated[Viewer, Depends(viewer)]) -> Viewer:
    """A viewer who sees every team (finance or admin), as the API's ``Finance``."""
    if not v.principal.sees_all:
        raise HTTPException(403, "this page needs a finance or admin token")
    return v


SignedIn = Annotated[Viewer, Depends(viewer)]
FinanceIn = Annotated[Viewer, Depends(finance_viewer)]


def same_origin(request: Request) -> None:
    """403 unless the request names this host as its origin (``Origin``, else ``Referer``):
    a form posted from another site, even to a signed-in browser, is refused."""
    claimed = request.headers.get("origin") or request.headers.get("referer") or ""
    host = request.headers.get("host", "")
    if not host or claimed == "null" or urlsplit(claimed).netloc != host:
        raise HTTPException(403, "this form must be sent from the cost service's own pages")


def check_form(request: Request, v: Viewer, csrf: str) -> None:
    """A signed-in POST: from our own origin, with the session's CSRF token."""
    same_origin(request)
    if not hmac.compare_digest(csrf.encode(), v.csrf.encode()):
        raise HTTPException(403, "the form has expired: open the page again")


def home_of(who: Principal) -> str:
    if who.sees_all:
        return f"{PREFIX}/overview"
    assert who.team is not None
    return f"{PREFIX}/teams/{segment(who.team)}"


def _redirect(to: str) -> RedirectResponse:
    return RedirectResponse(to, status_code=303)


def _secure(request: Request) -> bool:
    configured: bool | None = request.app.state.settings.session_cookie_secure
    return request.url.scheme == "https" if configured is None else configured


@router.get("/")
async def home(v: SignedIn) -> Response:
    return _redirect(home_of(v.principal))


@router.get("/signin")
def signin_form(request: Request) -> Response:
    return page(request, "signin.html", {"error": None})


@dataclass(frozen=True, slots=True)
class SignInLimits:
    """Sign-in attempts per client address and per token, each in a sliding minute."""

    per_client: SlidingWindow
    per_token: SlidingWindow

    @classmethod
    def of(cls, settings: Settings) -> SignInLimits:
        return cls(
            SlidingWindow(settings.signin_per_client_per_minute),
            SlidingWindow(settings.signin_per_token_per_minute),
        )


def _too_many(request: Request, token: str) -> int:
    """Seconds a sign-in must wait (0: it may go on, and is counted)."""
    limits: SignInLimits = request.app.state.signins
    client = request.client.host if request.client is not None else ""
    pairs = [(limits.per_client, client)]
    if token:
        pairs.append((limits.per_token, digest(token)))
    return attempt(pairs)


def _previous(request: Request) -> str | None:
    """The session id this browser still holds, if it could be one of ours."""
    held = request.cookies.get(COOKIE, "")
    return held if held and len(held) <= MAX_SESSION_ID else None


@router.post("/signin")
def signin(
    request: Request,
    db: Db,
    now: Now,
    token: Annotated[str, Form(max_length=4 * MAX_TOKEN)] = "",
) -> Response:
    same_origin(request)
    token = token.strip()
    wait = _too_many(request, token)
    if wait:
        error = f"too many sign-ins: try again in {wait} s"
        refused = page(request, "signin.html", {"error": error}, status=429)
        refused.headers["Retry-After"] = str(wait)
        return refused
    opened = None
    if token and len(token) <= MAX_TOKEN:
        settings: Settings = request.app.state.settings
        lifetime = timedelta(hours=settings.session_hours)
        keep, previous = settings.sessions_per_token, _previous(request)
        opened = open_session(db, digest(token), now, lifetime, keep, previous)
    if opened is None:
        return page(request, "signin.html", {"error": "unknown or revoked token"}, status=401)
    session_id, session = opened
    if not session.principal.uses_api:
        close_session(db, session_id)
        error = f"a {session.principal.role} token cannot use the pages"
        return page(request, "signin.html", {"error": error}, status=403)
    answer = _redirect(home_of(session.principal))
    answer.set_cookie(
        COOKIE,
        session_id,
        max_age=int((session.expires_at - now).total_seconds()),
        path=PREFIX,
        secure=_secure(request),
        httponly=True,
        samesite="strict",
    )
    return answer


@router.post("/signout")
def signout(
    request: Request, v: SignedIn, db: Db, csrf: Annotated[str, Form(max_length=128)] = ""
) -> Response:
    check_form(request, v, csrf)
    close_session(db, v.session_id)
    answer = _redirect(f"{PREFIX}/signin")
    answer.delete_cookie(
        COOKIE, path=PREFIX, secure=_secure(request), httponly=True, samesite="strict"
    )
    return answer
