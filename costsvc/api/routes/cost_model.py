"""The cost model in force: ``/v1/cost-model`` (finance reads it; admin replaces it)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated, Any

import yaml
from fastapi import APIRouter, Body, HTTPException, Request
from pydantic import BaseModel

from costsvc.api.auth import Admin, Finance
from costsvc.api.deps import Db
from costsvc.api.errors import ERRORS
from costsvc.costmodel import CostModelError, load, parse
from costsvc.db.audit import record

router = APIRouter(tags=["cost model"], responses=ERRORS)


class CostModelOut(BaseModel):
    path: str | None
    sha256: str | None
    document: dict[str, Any] | None


@router.get(
    "/cost-model", response_model=CostModelOut, summary="The cost model in force (finance/admin)"
)
def get_cost_model(who: Finance, request: Request) -> dict[str, Any]:
    return _cost_model_state(_model_path(request))


def _cost_model_state(path: Path | None) -> dict[str, Any]:
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


@router.put(
    "/cost-model",
    response_model=CostModelOut,
    summary="Replace the cost model (admin); the next ingest reprices what changed",
    responses={400: {"description": "the document is invalid (the reason names the field)"}},
)
def put_cost_model(
    who: Admin, db: Db, request: Request, document: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
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
    detail = {"before_sha256": before, "after_sha256": model.sha256()}
    record(db, who.name, "cost_model.replace", str(path), detail)
    return {"path": str(path), "sha256": model.sha256(), "document": model.document()}
