"""The state of ingestion: ``/v1/ingest/failed-hours`` (finance/admin)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from costsvc.api.deps import Db
from costsvc.api.errors import ERRORS
from costsvc.auth.principal import Finance
from costsvc.db.runs import failed_hour_states
from costsvc.ingest.run import retry_delay
from costsvc.kit.times import iso_z

router = APIRouter(prefix="/ingest", tags=["ingest"], responses=ERRORS)


class FailedHourOut(BaseModel):
    cluster: str
    hour: str
    attempts: int
    first_failed_at: str
    last_attempt_at: str
    next_retry_at: str
    error: str | None


@router.get(
    "/failed-hours",
    response_model=list[FailedHourOut],
    summary="Hours whose ingest failed and has not succeeded since, oldest first (finance/admin)",
    description="Each is retried by later runs with back-off (docs/cost-model.md); the hours "
    "after it are ingested meanwhile. A month with failed hours cannot be closed unless forced.",
)
def get_failed_hours(who: Finance, db: Db) -> list[dict[str, Any]]:
    return [
        {
            "cluster": f.cluster,
            "hour": iso_z(f.hour),
            "attempts": f.attempts,
            "first_failed_at": iso_z(f.first_failed_at),
            "last_attempt_at": iso_z(f.last_attempt_at),
            "next_retry_at": iso_z(f.last_attempt_at + retry_delay(f.attempts)),
            "error": f.error,
        }
        for f in failed_hour_states(db)
    ]
