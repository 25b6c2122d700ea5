"""Rightsizing and quotas: ``/v1/recommendations`` (+ ``.csv``) and ``/v1/quotas``, from the
latest advice run (costsvc/advice/run.py). A team token sees its own team's rows only."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel

from costsvc.advice.repository import quota_usage, recommendations
from costsvc.advice.rightsizing import ACTIONABLE
from costsvc.api.cache import json_response
from costsvc.api.deps import Db, own_team
from costsvc.api.errors import ERRORS
from costsvc.api.exports import SpooledResponse, export
from costsvc.auth.principal import Caller
from costsvc.auth.tokens import Principal
from costsvc.kit.csv_cells import CsvLines, safe_cell
from costsvc.kit.lists import comma_list
from costsvc.kit.money import money
from costsvc.kit.times import iso_z
from costsvc.reports.routes import CSV_DOWNLOAD

router = APIRouter(tags=["rightsizing"], responses=ERRORS)
Filter = Annotated[list[str] | None, Query(max_length=64)]


class Recommendation(BaseModel):
    cluster: str
    team: str
    namespace: str
    workload_kind: str
    workload: str
    gpu_model: str
    pods: int
    action: str  # release | mig | timeslice | model (| keep | insufficient with all=true)
    target: str
    reason: str
    currency: str
    current_monthly: str
    recommended_monthly: str
    saving_monthly: str
    confidence_hours: str  # device-hours observed in the window
    gpu_hours: str
    memory_p95_bytes: int | None
    memory_peak_bytes: int | None
    activity_p95: str | None
    activity_source: str
    idle_ratio: str | None
    current_share: str
    target_share: str
    window_start: str
    window_end: str


class Recommendations(BaseModel):
    rows: list[Recommendation]


class Quota(BaseModel):
    cluster: str
    team: str
    namespace: str
    resource: str
    source: str
    hard: str | None
    used: str | None
    held: str
    active: str
    held_idle: str
    utilisation: str | None  # held / hard over the window
    currency: str
    unit_price_per_hour: str | None
    unused_quota_monthly: str | None
    held_idle_monthly: str | None
    window_start: str
    window_end: str


class TeamQuota(BaseModel):
    team: str
    resource: str
    namespaces: list[str]
    hard: str | None  # the sum over the namespaces with a quota
    held: str
    active: str
    held_idle: str
    currency: str
    unused_quota_monthly: str | None
    held_idle_monthly: str | None


class Quotas(BaseModel):
    rows: list[Quota]
    teams: list[TeamQuota]  # per team and resource: the sum of its namespaces


def _filters(who: Principal, **given: list[str] | None) -> dict[str, list[str]]:
    filters = {k: found for k, v in given.items() if (found := comma_list(v))}
    return own_team(who, filters)


def _ratio(ppm: int | None) -> str | None:
    return None if ppm is None else money(ppm)  # parts per million: six places


def _milli(value: int | None) -> str | None:
    return None if value is None else f"{Decimal(value) / 1000:.3f}"


# a recommendation as the API writes it: (field, stored column, how it is written), in order
_AS_STORED = ("cluster", "team", "namespace", "workload_kind", "workload", "gpu_model", "pods")
_TEXT = ("action", "target", "reason", "currency")
RECOMMENDATION: tuple[tuple[str, str, Callable[[Any], Any] | None], ...] = (
    *((name, name, None) for name in (*_AS_STORED, *_TEXT)),
    *((name, name, money) for name in ("current_monthly", "recommended_monthly", "saving_monthly")),
    ("confidence_hours", "device_hours", money),
    ("gpu_hours", "gpu_hours", money),
    ("memory_p95_bytes", "memory_p95_bytes", None),
    ("memory_peak_bytes", "memory_peak_bytes", None),
    ("activity_p95", "activity_p95_ppm", _ratio),
    ("activity_source", "activity_source", None),
    ("idle_ratio", "idle_ppm", _ratio),
    ("current_share", "current_share_ppm", _ratio),
    ("target_share", "target_share_ppm", _ratio),
    ("window_start", "window_start", iso_z),
    ("window_end", "window_end", iso_z),
)


def recommendation_row(r: dict[str, Any]) -> dict[str, Any]:
    return {
        name: r[column] if write is None else write(r[column])
        for name, column, write in RECOMMENDATION
    }


def quota_row(q: dict[str, Any]) -> dict[str, Any]:
    held, active, hard = q["held_milli"], q["active_milli"], q["hard_milli"]
    return {
        "cluster": q["cluster"],
        "team": q["team"],
        "namespace": q["namespace"],
        "resource": q["resource"],
        "source": q["source"],
        "hard": _milli(hard),
        "used": _milli(q["used_milli"]),
        "held": _milli(held),
        "active": _milli(active),
        "held_idle": _milli(max(held - active, 0)),
        "utilisation": f"{Decimal(held) / Decimal(hard):.6f}" if hard else None,
        "currency": q["currency"],
        "unit_price_per_hour": None if q["unit_price"] is None else money(q["unit_price"]),
        "unused_quota_monthly": None if q["unused_monthly"] is None else money(q["unused_monthly"]),
        "held_idle_monthly": None if q["idle_monthly"] is None else money(q["idle_monthly"]),
        "window_start": iso_z(q["window_start"]),
        "window_end": iso_z(q["window_end"]),
    }


def _recommendations(
    db: Any, who: Principal, team: Any, namespace: Any, workload: Any, every: bool
) -> list[dict[str, Any]]:
    filters = _filters(who, team=team, namespace=namespace, workload=workload)
    rows = recommendations(db, filters, None if every else ACTIONABLE)
    return [recommendation_row(r) for r in rows]


@router.get(
    "/recommendations",
    response_model=Recommendations,
    summary="GPU rightsizing: per workload and GPU model, biggest monthly saving first",
)
def get_recommendations(
    who: Caller,
    db: Db,
    team: Filter = None,
    namespace: Filter = None,
    workload: Filter = None,
    all: Annotated[bool, Query(description="also workloads to keep as they are")] = False,
) -> Response:
    return json_response({"rows": _recommendations(db, who, team, namespace, workload, all)})


CSV_COLUMNS = list(Recommendation.model_fields)


@router.get(
    "/recommendations.csv",
    **CSV_DOWNLOAD,
    summary="The recommendations as CSV (the JSON answer's fields, same order and figures)",
)
def get_recommendations_csv(
    request: Request,
    who: Caller,
    db: Db,
    team: Filter = None,
    namespace: Filter = None,
    workload: Filter = None,
    all: bool = False,
) -> SpooledResponse:
    rows = _recommendations(db, who, team, namespace, workload, all)

    def body() -> Iterator[str]:
        out = CsvLines()
        out.row(CSV_COLUMNS)
        for r in rows:
            out.row(
                [
                    "" if r[c] is None else safe_cell(r[c]) if isinstance(r[c], str) else r[c]
                    for c in CSV_COLUMNS
                ]
            )
        yield out.take()

    headers = {"Content-Disposition": 'attachment; filename="recommendations.csv"'}
    # as every download: spooled, sent from the file, one of the token's export slots
    return export(request, who.name, body(), "text/csv; charset=utf-8", headers)


@router.get(
    "/quotas",
    response_model=Quotas,
    summary="GPU quota (ResourceQuota) against GPUs held and in use, and what unused quota costs",
)
def get_quotas(
    who: Caller, db: Db, team: Filter = None, namespace: Filter = None, resource: Filter = None
) -> Response:
    filters = _filters(who, team=team, namespace=namespace, resource=resource)
    found = quota_usage(db, filters)
    return json_response({"rows": [quota_row(q) for q in found], "teams": team_quotas(found)})


def _sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def team_quotas(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for q in rows:
        groups.setdefault((q["team"], q["resource"], q["currency"]), []).append(q)
    out = []
    for (team, resource, currency), qs in sorted(groups.items()):
        held = sum(q["held_milli"] for q in qs)
        active = sum(q["active_milli"] for q in qs)
        unused = _sum([q["unused_monthly"] for q in qs])
        idle = _sum([q["idle_monthly"] for q in qs])
        out.append(
            {
                "team": team,
                "resource": resource,
                "namespaces": sorted({q["namespace"] for q in qs}),
                "hard": _milli(_sum([q["hard_milli"] for q in qs])),
                "held": _milli(held),
                "active": _milli(active),
                "held_idle": _milli(max(held - active, 0)),
                "currency": currency,
                "unused_quota_monthly": None if unused is None else money(unused),
                "held_idle_monthly": None if idle is None else money(idle),
            }
        )
    return out
