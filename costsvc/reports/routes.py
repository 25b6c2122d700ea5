"""Reports of a billing month: ``chargeback.csv`` and FOCUS 1.2 ``focus.csv``, spooled then
sent (costsvc/api/exports.py: never the database while a client reads)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Query, Request

from costsvc.api.deps import Db, GroupBy
from costsvc.api.errors import ERRORS, EXPORT_ERRORS
from costsvc.api.exports import SpooledResponse, export
from costsvc.auth.principal import Caller, check_team
from costsvc.auth.tokens import Principal
from costsvc.kit.times import MONTH
from costsvc.months.repository import month_close
from costsvc.reports.focus13_reads import focus13_csv
from costsvc.reports.monthly import chargeback_csv, focus_csv

router = APIRouter(tags=["reports"], responses=ERRORS)
CSV = {"text/csv": {"schema": {"type": "string"}}}
EXPORT_ANSWERS: dict[int | str, dict[str, object]] = {200: {"content": CSV}, **EXPORT_ERRORS}
# a CSV download route's answer: spooled (costsvc/api/exports.py), described as CSV
CSV_DOWNLOAD: dict[str, Any] = {"response_class": SpooledResponse, "responses": EXPORT_ANSWERS}
MonthParam = Annotated[str, Query(description="YYYY-MM", pattern=MONTH.pattern)]
FocusVersion = Literal["1.2", "1.3"]
VersionParam = Annotated[
    FocusVersion,
    Query(description="FOCUS version: 1.2, or 1.3 with split cost allocation (docs/focus.md)"),
]


def attachment(name: str) -> str:
    """``Content-Disposition`` for a download named ``name``, safe for any text (a team from
    a pod label may hold quotes, ';', CR/LF or non-Latin-1): RFC 6266 section 4.3 — an ASCII
    ``filename`` fallback with every other character as ``_``, and ``filename*`` with the
    name in UTF-8, percent-encoded as RFC 8187 section 3.2 says (only attr-chars left bare)."""
    fallback = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    encoded = quote(name, safe="!#$&+-.^_`|~")  # RFC 8187 attr-char, less ALPHA / DIGIT
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}"


def _export(
    request: Request, who: Principal, pieces: Iterator[str], name: str, digest: str | None
) -> SpooledResponse:
    headers = {"Content-Disposition": attachment(name)}
    if digest:
        headers["X-Content-SHA256"] = digest  # recorded when the month was closed
    return export(request, who.name, pieces, "text/csv; charset=utf-8", headers)


@router.get(
    "/reports/chargeback.csv",
    **CSV_DOWNLOAD,
    summary="A month's chargeback as CSV (docs: costsvc/reports/monthly.py)",
)
def chargeback(
    request: Request, who: Caller, db: Db, month: MonthParam, groups: GroupBy
) -> SpooledResponse:
    team = check_team(who)
    closed = month_close(db, month)
    digest = closed.csv_sha256 if closed and not groups and team is None else None
    name = f"chargeback-{month}{'-' + team if team else ''}.csv"
    return _export(request, who, chargeback_csv(db, month, groups or None, team), name, digest)


@router.get(
    "/reports/focus.csv",
    **CSV_DOWNLOAD,
    summary="A month's chargeback in FinOps FOCUS 1.2, or 1.3 with split cost allocation "
    "(docs/focus.md)",
)
def focus(
    request: Request, who: Caller, db: Db, month: MonthParam, version: VersionParam = "1.2"
) -> SpooledResponse:
    team = check_team(who)
    if version == "1.3":  # no digest: a close records the 1.2 file's
        pieces = focus13_csv(db, month, team)
        return _export(request, who, pieces, f"focus-1.3-{month}.csv", None)
    closed = month_close(db, month)
    digest = closed.focus_sha256 if closed and team is None else None
    return _export(request, who, focus_csv(db, month, team), f"focus-{month}.csv", digest)
