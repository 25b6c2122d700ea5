"""Month close, budgets, tokens, the audit log and the cost model."""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from fastapi import APIRouter, Body, HTTPException, Query, Request, Response
from fastapi import Path as PathParam
from pydantic import BaseModel, Field, field_validator
from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from costsvc.api.auth import Admin, Caller, Finance, audit, create_token, revoke_token
from costsvc.api.costs import ratio
from costsvc.api.deps import Db, Now
from costsvc.api.errors import ERRORS
from costsvc.db.models import ApiToken, AuditEntry, Budget, MonthClose
from costsvc.months import MONTH, MonthError, close_month, month_close
from costsvc.queries import forecast, money
from costsvc.utc import iso_z

router = APIRouter(responses=ERRORS)
MonthPath = Annotated[str, PathParam(pattern=MONTH.pattern, description="YYYY-MM")]
Name = Annotated[str, Field(min_length=1, max_length=253)]
BudgetId = Annotated[int, PathParam(ge=1, le=2_147_483_647)]


# --- month close -------------------------------------------------------------------------


class MonthState(BaseModel):
    month: str
    closed: bool
    closed_at: str | None = None
    closed_by: str | None = None
    chargeback_csv_sha256: str | None = None
    focus_csv_sha256: str | None = None


def _month_state(db: Any, month: str) -> dict[str, Any]:
    c = month_close(db, month)
    if c is None:
        return {"month": month, "closed": False}
    return {"month": month, "closed": True, "closed_at": f"{c.closed_at:%Y-%m-%dT%H:%M:%SZ}",
            "closed_by": c.closed_by, "chargeback_csv_sha256": c.csv_sha256,
            "focus_csv_sha256": c.focus_sha256}  # fmt: skip


@router.get("/months/{month}", response_model=MonthState, tags=["months"],
            summary="Whether a month is closed, and its reports' SHA-256")  # fmt: skip
def get_month(month: MonthPath, who: Caller, db: Db) -> dict[str, Any]:
    return _month_state(db, month)


@router.post("/months/{month}/close", response_model=MonthState, tags=["months"],
             summary="Freeze a month (finance/admin): later data becomes corrections",
             responses={409: {"description": "not ended yet, or already closed"}})  # fmt: skip
def post_close(month: MonthPath, who: Finance, db: Db, now: Now) -> dict[str, Any]:
    try:
        close_month(db, month, who.name, now)
    except MonthError as exc:
        raise HTTPException(409, str(exc)) from None
    return _month_state(db, month)


@router.get("/months", response_model=list[MonthState], tags=["months"],
            summary="Closed months")  # fmt: skip
def list_months(who: Caller, db: Db) -> list[dict[str, Any]]:
    with db.connect() as conn:
        months = conn.execute(select(MonthClose.month).order_by(MonthClose.month)).scalars()
        names = list(months)
    return [_month_state(db, m) for m in names]


# --- budgets -----------------------------------------------------------------------------


class BudgetIn(BaseModel):
    team: Name
    project: Annotated[str, Field(max_length=253)] = ""
    amount: Annotated[Decimal, Field(gt=0, le=Decimal("1e12"), decimal_places=6)]
    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")] = "USD"
    thresholds: Annotated[list[float], Field(min_length=1, max_length=10)] = [0.8, 1.0]

    @field_validator("thresholds")
    @classmethod
    def _ratios(cls, v: list[float]) -> list[float]:
        if any(not (0 < t <= 10) for t in v):
            raise ValueError("thresholds are ratios of the budget, e.g. 0.8 and 1.0")
        return sorted(set(v))


class BudgetOut(BaseModel):
    id: int
    team: str
    project: str
    amount: str
    currency: str
    thresholds: list[float]


class BudgetStatus(BudgetOut):
    month: str
    month_to_date: str
    used_ratio: str
    burn_rate_per_hour: str
    forecast: str
    forecast_ratio: str
    crossed: list[float]
    method: str


def _budget_out(b: Any) -> dict[str, Any]:
    return {"id": b.id, "team": b.team, "project": b.project, "amount": money(b.amount),
            "currency": b.currency, "thresholds": list(b.thresholds)}  # fmt: skip


def _budget(db: Any, budget_id: BudgetId, who: Any) -> Any:
    with db.connect() as conn:
        b = conn.execute(select(Budget).where(Budget.id == budget_id)).first()
    if b is None or (not who.sees_all and b.team != who.team):
        raise HTTPException(404, f"no budget {budget_id}")
    return b


@router.get("/budgets", response_model=list[BudgetOut], tags=["budgets"],
            summary="Budgets (a team token sees its own)")  # fmt: skip
def list_budgets(who: Caller, db: Db) -> list[dict[str, Any]]:
    q = select(Budget).order_by(Budget.team, Budget.project)
    if not who.sees_all:
        q = q.where(Budget.team == who.team)
    with db.connect() as conn:
        return [_budget_out(b) for b in conn.execute(q)]


@router.post("/budgets", response_model=BudgetOut, status_code=201, tags=["budgets"],
             summary="Create a monthly budget (finance/admin)",
             responses={409: {"description": "that team/project has a budget"}})  # fmt: skip
def create_budget(
    body: BudgetIn, who: Finance, db: Db, now: Now, request: Request
) -> dict[str, Any]:
    request.app.state.metrics_cache = None  # /metrics shows budget changes at once
    values = {"team": body.team, "project": body.project, "amount": _micro(body.amount),
              "currency": body.currency, "thresholds": body.thresholds, "created_at": now,
              "updated_at": now}  # fmt: skip
    try:
        with db.begin() as conn:
            new_id = conn.execute(insert(Budget).values(**values).returning(Budget.id)).scalar()
            audit(conn, who.name, "budget.create", f"{body.team}/{body.project}",
                  {**body.model_dump(mode="json"), "id": new_id})  # fmt: skip
    except IntegrityError:
        raise HTTPException(
            409, f"{body.team}/{body.project or '*'} already has a budget"
        ) from None
    return _budget_out(_budget(db, int(new_id or 0), who))


@router.get("/budgets/{budget_id}", response_model=BudgetOut, tags=["budgets"])
def get_budget(budget_id: BudgetId, who: Caller, db: Db) -> dict[str, Any]:
    return _budget_out(_budget(db, budget_id, who))


@router.put("/budgets/{budget_id}", response_model=BudgetOut, tags=["budgets"],
            summary="Replace a budget (finance/admin)")  # fmt: skip
def put_budget(
    budget_id: BudgetId, body: BudgetIn, who: Finance, db: Db, now: Now, request: Request
) -> dict[str, Any]:
    request.app.state.metrics_cache = None
    old = _budget(db, budget_id, who)
    try:
        with db.begin() as conn:
            conn.execute(update(Budget).where(Budget.id == budget_id).values(
                team=body.team, project=body.project, amount=_micro(body.amount),
                currency=body.currency, thresholds=body.thresholds, updated_at=now))  # fmt: skip
            audit(conn, who.name, "budget.update", f"{body.team}/{body.project}",
                  {"id": budget_id, "before": _budget_out(old),
                   "after": body.model_dump(mode="json")})  # fmt: skip
    except IntegrityError:
        raise HTTPException(
            409, f"{body.team}/{body.project or '*'} already has a budget"
        ) from None
    return _budget_out(_budget(db, budget_id, who))


@router.delete("/budgets/{budget_id}", status_code=204, tags=["budgets"],
               summary="Delete a budget (finance/admin)")  # fmt: skip
def delete_budget(budget_id: BudgetId, who: Finance, db: Db, request: Request) -> Response:
    request.app.state.metrics_cache = None
    old = _budget(db, budget_id, who)
    with db.begin() as conn:
        conn.execute(delete(Budget).where(Budget.id == budget_id))
        audit(conn, who.name, "budget.delete", f"{old.team}/{old.project}", _budget_out(old))
    return Response(status_code=204)


@router.get(
    "/budgets/{budget_id}/status",
    response_model=BudgetStatus,
    tags=["budgets"],
    summary="Month to date, burn rate and month-end forecast against the budget",
)
def budget_status(budget_id: BudgetId, who: Caller, db: Db, now: Now) -> dict[str, Any]:
    b = _budget(db, budget_id, who)
    with db.connect() as conn:
        f = forecast(conn, now, b.team, b.project or None)
    used = Decimal(f.month_to_date) / b.amount
    return {
        **_budget_out(b),
        "month": f.month,
        "month_to_date": money(f.month_to_date),
        "used_ratio": ratio(f.month_to_date, b.amount),
        "burn_rate_per_hour": money(f.burn_rate),
        "forecast": money(f.forecast),
        "forecast_ratio": ratio(f.forecast, b.amount),
        "crossed": [t for t in b.thresholds if used >= Decimal(str(t))],
        "method": "month to date + mean hourly cost of the last 7 days x hours left",
    }


def _micro(amount: Decimal) -> int:
    return int(amount.scaleb(6))


# --- tokens and audit --------------------------------------------------------------------


class TokenIn(BaseModel):
    name: Name
    role: Literal["admin", "finance", "team"]
    team: Annotated[str | None, Field(max_length=253)] = None


class TokenOut(BaseModel):
    name: str
    role: str
    team: str | None
    created_at: str
    revoked_at: str | None


class NewToken(TokenOut):
    token: str


def _iso(t: datetime | None) -> str | None:
    if t is None:
        return None
    return iso_z(t)


def _tokens(db: Any, name: str | None = None) -> list[dict[str, Any]]:
    t = ApiToken
    q = select(t.name, t.role, t.team, t.created_at, t.revoked_at).order_by(t.name)
    if name is not None:
        q = q.where(t.name == name)
    with db.connect() as conn:
        return [{"name": r.name, "role": r.role, "team": r.team,
                 "created_at": _iso(r.created_at), "revoked_at": _iso(r.revoked_at)}
                for r in conn.execute(q)]  # fmt: skip


@router.get("/tokens", response_model=list[TokenOut], tags=["tokens"], summary="Tokens (admin)")
def list_tokens(who: Admin, db: Db) -> list[dict[str, Any]]:
    return _tokens(db)


@router.post("/tokens", response_model=NewToken, status_code=201, tags=["tokens"],
             summary="Create a token (admin); the secret is shown this once",
             responses={409: {"description": "the name is taken"}})  # fmt: skip
def post_token(body: TokenIn, who: Admin, db: Db) -> dict[str, Any]:
    try:
        token = create_token(db, body.name, body.role, body.team, who.name)
    except ValueError as exc:
        code = 409 if "exists" in str(exc) else 400
        raise HTTPException(code, str(exc)) from None
    return {**_tokens(db, body.name)[0], "token": token}


@router.delete("/tokens/{name}", status_code=204, tags=["tokens"], summary="Revoke (admin)")
def delete_token(name: str, who: Admin, db: Db) -> Response:
    if not revoke_token(db, name, who.name):
        raise HTTPException(404, f"no live token {name!r}")
    return Response(status_code=204)


class AuditOut(BaseModel):
    at: str
    actor: str
    action: str
    target: str
    detail: dict[str, Any]


@router.get("/audit", response_model=list[AuditOut], tags=["audit"],
            summary="Changes to budgets, tokens, cost model; month closes (admin)")  # fmt: skip
def get_audit(
    who: Admin, db: Db, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[dict[str, Any]]:
    a = AuditEntry
    with db.connect() as conn:
        rows = conn.execute(select(a).order_by(a.id.desc()).limit(limit)).all()
    return [{"at": _iso(r.at), "actor": r.actor, "action": r.action, "target": r.target,
             "detail": r.detail} for r in rows]  # fmt: skip


# --- cost model --------------------------------------------------------------------------


class CostModelOut(BaseModel):
    path: str | None
    sha256: str | None
    document: dict[str, Any] | None


@router.get("/cost-model", response_model=CostModelOut, tags=["cost model"],
            summary="The cost model in force (finance/admin)")  # fmt: skip
def get_cost_model(who: Finance, request: Request) -> dict[str, Any]:
    return _cost_model_state(_model_path(request))


def _cost_model_state(path: Path | None) -> dict[str, Any]:
    from costsvc.costmodel import CostModelError, load

    if path is None or not path.exists():
        return {"path": str(path) if path else None, "sha256": None, "document": None}
    try:
        model = load(path)
    except CostModelError as exc:
        raise HTTPException(500, f"the cost model file is invalid: {exc}") from None
    return {"path": str(path), "sha256": model.sha256(), "document": model.document()}


def _model_path(request: Request) -> Path | None:
    path: Path | None = request.app.state.settings.cost_model
    return path


@router.put("/cost-model", response_model=CostModelOut, tags=["cost model"],
            summary="Replace the cost model (admin); the next ingest reprices what changed",
            responses={400: {"description": "the document is invalid (the reason names the "
                                            "field)"}})  # fmt: skip
def put_cost_model(
    who: Admin, db: Db, request: Request, document: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    from costsvc.costmodel import CostModelError, parse

    path = _model_path(request)
    if path is None:
        raise HTTPException(409, "no COSTSVC_COST_MODEL file is configured")
    try:
        model = parse(document, "request body")
    except CostModelError as exc:
        raise HTTPException(400, str(exc)) from None
    before = _cost_model_state(path)["sha256"] if path.exists() else None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cost-model-")
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(document, f, sort_keys=False, allow_unicode=True)
    os.replace(tmp, path)
    with db.begin() as conn:
        audit(conn, who.name, "cost_model.replace", str(path),
              {"before_sha256": before, "after_sha256": model.sha256()})  # fmt: skip
    return {"path": str(path), "sha256": model.sha256(), "document": model.document()}
