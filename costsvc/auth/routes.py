"""API tokens (admin) and the audit log (admin): ``/v1/tokens``, ``/v1/audit``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response
from fastapi import Path as PathParam
from pydantic import BaseModel, Field

from costsvc.api.deps import Db
from costsvc.api.errors import ERRORS, shown
from costsvc.auth.audit import recent
from costsvc.auth.principal import CACHE, Admin
from costsvc.auth.roles import Role
from costsvc.auth.tokens import LastAdmin, TokenInfo, create_token, revoke_token, tokens
from costsvc.kit.times import iso_z
from kube.label_names import LABEL_VALUE, LABEL_VALUE_MAX

router = APIRouter(responses=ERRORS)
# names and teams are Kubernetes label values (kube/label_names.py): every name fits in a URL
LabelValue = Annotated[
    str, Field(min_length=1, max_length=LABEL_VALUE_MAX, pattern=f"^{LABEL_VALUE}$")
]


class TokenIn(BaseModel):
    name: LabelValue
    role: Role
    team: LabelValue | None = None


class TokenOut(BaseModel):
    name: str
    role: str
    team: str | None
    created_at: str
    revoked_at: str | None


class NewToken(TokenOut):
    token: str


def _token_out(t: TokenInfo) -> dict[str, Any]:
    return {
        "name": t.name,
        "role": t.role,
        "team": t.team,
        "created_at": iso_z(t.created_at),
        "revoked_at": iso_z(t.revoked_at) if t.revoked_at is not None else None,
    }


@router.get("/tokens", response_model=list[TokenOut], tags=["tokens"], summary="Tokens (admin)")
def list_tokens(who: Admin, db: Db) -> list[dict[str, Any]]:
    return [_token_out(t) for t in tokens(db)]


@router.post(
    "/tokens",
    response_model=NewToken,
    status_code=201,
    tags=["tokens"],
    summary="Create a token (admin); the secret is shown this once",
    responses={409: {"description": "the name is taken"}},
)
def post_token(body: TokenIn, who: Admin, db: Db) -> dict[str, Any]:
    try:
        token = create_token(db, body.name, body.role, body.team, who.name)
    except ValueError as exc:
        code = 409 if "exists" in str(exc) else 400
        raise HTTPException(code, str(exc)) from None
    return {**_token_out(tokens(db, body.name)[0]), "token": token}


@router.delete(
    "/tokens/{name}",
    status_code=204,
    tags=["tokens"],
    summary="Revoke (admin); never the last live admin token (409)",
)
def delete_token(name: Annotated[str, PathParam(max_length=253)], who: Admin, db: Db) -> Response:
    try:
        revoked = revoke_token(db, name, who.name)
    except LastAdmin as exc:
        raise HTTPException(409, str(exc)) from None
    CACHE.clear()  # this process stops accepting it at once
    if not revoked:
        raise HTTPException(404, f"no live token {shown(name)}")
    return Response(status_code=204)


class AuditOut(BaseModel):
    at: str
    actor: str
    action: str
    target: str
    detail: dict[str, Any]


@router.get(
    "/audit",
    response_model=list[AuditOut],
    tags=["audit"],
    summary="Changes to budgets, tokens, cost model; month closes (admin)",
)
def get_audit(
    who: Admin, db: Db, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[dict[str, Any]]:
    return [
        {
            "at": iso_z(e.at),
            "actor": e.actor,
            "action": e.action,
            "target": e.target,
            "detail": e.detail,
        }
        for e in recent(db, limit)
    ]
