"""The error answers every /v1 endpoint may give, for the OpenAPI description."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class Problem(BaseModel):
    detail: str


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": Problem, "description": "a parameter is wrong (the message says which)"},
    401: {"model": Problem, "description": "no, unknown or revoked bearer token"},
    403: {"model": Problem, "description": "the token's role may not do this"},
    404: {"model": Problem, "description": "not found, or not visible to this token"},
    409: {"model": Problem, "description": "conflicts with the current state"},
}
