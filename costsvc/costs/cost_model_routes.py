"""The cost model in force: ``/v1/cost-model`` (finance reads it; admin replaces it where it
lives in the database). Where it lives: costsvc/rules/cost_model_source.py, docs/cost-model.md."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, HTTPException, Request
from pydantic import BaseModel

from costsvc.api.deps import Db
from costsvc.api.errors import ERRORS
from costsvc.auth.principal import Admin, Finance
from costsvc.kit.times import iso_z
from costsvc.rules.cost_model import CostModelError
from costsvc.rules.cost_model_source import FileManaged, InForce, NoCostModel, in_force, replace

router = APIRouter(tags=["cost model"], responses=ERRORS)


class CostModelOut(BaseModel):
    source: str | None  # "file" | "database" | None (no cost model yet)
    path: str | None
    sha256: str | None
    document: dict[str, Any] | None
    activated_at: str | None = None
    activated_by: str | None = None


def _state(found: InForce) -> dict[str, Any]:
    return {
        "source": found.source,
        "path": str(found.path) if found.path else None,
        "sha256": found.model.sha256(),
        "document": found.model.document(),
        "activated_at": iso_z(found.activated_at) if found.activated_at else None,
        "activated_by": found.activated_by,
    }


@router.get(
    "/cost-model",
    response_model=CostModelOut,
    summary="The cost model in force, and where it lives (finance/admin)",
    responses={503: {"description": "the cost model file cannot be read or is invalid"}},
)
def get_cost_model(who: Finance, db: Db, request: Request) -> dict[str, Any]:
    path = request.app.state.settings.cost_model
    try:
        return _state(in_force(path, db))
    except NoCostModel:
        return {"source": None, "path": None, "sha256": None, "document": None}
    except CostModelError as exc:
        raise HTTPException(503, f"the cost model file is unusable: {exc}"[:500]) from None


@router.put(
    "/cost-model",
    response_model=CostModelOut,
    summary="Put a new cost model in force (admin), where it lives in the database; the next "
    "ingest reprices what changed",
    responses={
        400: {"description": "the document is invalid (the reason names the field)"},
        409: {
            "description": "the cost model is the operator's file (COSTSVC_COST_MODEL): "
            "change the file; the service never rewrites it"
        },
    },
)
def put_cost_model(
    who: Admin, db: Db, request: Request, document: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    path = request.app.state.settings.cost_model
    try:
        replace(path, db, document, who.name, "api", "request body")
    except FileManaged as exc:
        raise HTTPException(409, str(exc)) from None
    except CostModelError as exc:
        raise HTTPException(400, str(exc)[:500]) from None
    return _state(in_force(None, db))
