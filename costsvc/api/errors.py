"""The error answers of the API: their OpenAPI description, and the 422 answer, which names
what is wrong without echoing the input (a 1 MB field is not sent back)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from costsvc.kit.quoting import SHOWN, cut, shown

__all__ = ["ERRORS", "EXPORT_ERRORS", "SHOWN", "Problem", "shown", "validation_problem"]


class Problem(BaseModel):
    detail: str


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": Problem, "description": "a parameter is wrong (the message says which)"},
    401: {"model": Problem, "description": "no, unknown or revoked bearer token"},
    403: {"model": Problem, "description": "the token's role may not do this"},
    404: {"model": Problem, "description": "not found, or not visible to this token"},
    409: {"model": Problem, "description": "conflicts with the current state"},
}

EXPORT_ERRORS: dict[int | str, dict[str, Any]] = {  # costsvc/api/exports.py
    429: {
        "model": Problem,
        "description": "too many exports in progress for this token, or in all (Retry-After)",
    },
    507: {
        "model": Problem,
        "description": "the export is larger than the service spools, or its disk is full",
    },
}


async def validation_problem(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 (``{"detail": [{loc, msg, type}]}``) without ``input`` and ``ctx``."""
    assert isinstance(exc, RequestValidationError)
    errors = [
        {
            "loc": [p if isinstance(p, int) else cut(str(p)) for p in e.get("loc", ())],
            "msg": str(e.get("msg", ""))[: 4 * SHOWN],
            "type": str(e.get("type", "")),
        }
        for e in exc.errors()[:20]
    ]
    return JSONResponse({"detail": errors}, status_code=422)
