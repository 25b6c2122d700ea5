"""One-click downloads for a signed-in browser: the chargeback CSV and FOCUS (1.2, or 1.3 with
``version=1.3``) of a month,
answered by the API's own report routes (costsvc/reports/routes.py) with the session's
principal — the same bytes, the same scope (a team session: its own team's rows), the same
``X-Content-SHA256`` of a closed month, the same spool and export slots
(costsvc/api/exports.py) — as ``/v1/reports/…`` with that token; not stored, as every answer
under /ui (costsvc/api/headers.py)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from costsvc.api.deps import Db
from costsvc.kit.times import MONTH
from costsvc.pages.render import PREFIX, PageError
from costsvc.pages.session import SignedIn
from costsvc.reports import routes as reports

router = APIRouter(prefix=f"{PREFIX}/reports", include_in_schema=False)


def _month(month: str) -> str:
    if not MONTH.match(month):
        raise PageError(400, "month: expected YYYY-MM, e.g. 2026-11")
    return month


@router.get("/chargeback.csv")
def chargeback(request: Request, v: SignedIn, db: Db, month: str = "") -> Response:
    return reports.chargeback(request, v.principal, db, _month(month), [])


@router.get("/focus.csv")
def focus(request: Request, v: SignedIn, db: Db, month: str = "", version: str = "1.2") -> Response:
    if version not in ("1.2", "1.3"):
        raise PageError(400, "version: expected 1.2 or 1.3")
    return reports.focus(
        request, v.principal, db, _month(month), "1.3" if version == "1.3" else "1.2"
    )
