"""The roles of an API token (docs/security.md): ``admin`` and ``finance`` see every team,
``team`` its own team only, ``metrics`` (for Prometheus) reads ``/metrics`` and nothing under
``/v1``. The one home of which roles there are and which may use the API and the pages. Pure:
the command line reads it without the database's modules."""

from __future__ import annotations

from typing import Literal, get_args

Role = Literal["admin", "finance", "team", "metrics"]
ROLES: tuple[Role, ...] = get_args(Role)
API_ROLES: tuple[Role, ...] = ("admin", "finance", "team")  # may use /v1 and the pages


def uses_api(role: str) -> bool:
    """Whether a token of ``role`` may use /v1 and the pages (every role but ``metrics``)."""
    return role in API_ROLES
