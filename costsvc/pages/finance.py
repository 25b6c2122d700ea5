"""Finance (finance and admin): every month's state — open, closable, incomplete with its
failed and missing hours, closed with its reports' SHA-256 —, what it bills, its change from
the previous month and its corrections, one-click downloads, the
corrections billed in each month, hours whose ingest failed, and the month close: a
confirmation page, then a POST (CSRF token, own origin) to costsvc/months/close.py, refused as the
API refuses it (``POST /v1/months/{month}/close``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import RedirectResponse

from costsvc.api.deps import Db, Now
from costsvc.db.runs import failed_hour_states
from costsvc.months.billing import (
    MonthState,
    close_facts,
    corrections,
    month_state,
    month_states,
)
from costsvc.months.close import MAX_REASON, MonthError, MonthIncomplete, close_month
from costsvc.pages.figures import month_trends
from costsvc.pages.render import PREFIX, PageError, chosen_month, page
from costsvc.pages.session import FinanceIn, check_form

router = APIRouter(prefix=f"{PREFIX}/finance", include_in_schema=False)
Field = Annotated[str, Form(max_length=128)]


@router.get("")
def finance(
    request: Request, v: FinanceIn, db: Db, now: Now, closed: str | None = None
) -> Response:
    months = month_states(db, now)
    # the notice says what the database says: ``closed`` only names which month to look up
    notice = next((m for m in months if m.month == closed and m.state == "closed"), None)
    context = {
        "months": months,
        "trends": {t["state"].month: t for t in month_trends(db, months, now)},
        "corrections": corrections(db),
        "failed": failed_hour_states(db),
        "closed": notice,
    }
    return page(request, "finance.html", context, viewer=v)


def _state(db: Db, month: str, now: datetime) -> MonthState:
    if not month:
        raise PageError(400, "month: expected YYYY-MM, e.g. 2026-11")
    return month_state(db, chosen_month(month, now), now)


@router.get("/close")
def confirm_close(request: Request, v: FinanceIn, db: Db, now: Now, month: str = "") -> Response:
    state = _state(db, month, now)
    context = {"state": state, "facts": close_facts(db, state.month), "error": None}
    return page(request, "close.html", context, viewer=v)


@router.post("/close")
def close(
    request: Request,
    v: FinanceIn,
    db: Db,
    now: Now,
    month: Field = "",
    csrf: Field = "",
    force: Field = "",
    reason: Annotated[str, Form(max_length=MAX_REASON)] = "",
) -> Response:
    check_form(request, v, csrf)
    state = _state(db, month, now)
    try:
        close_month(db, state.month, v.principal.name, now, force == "yes", reason)
    except MonthIncomplete as exc:
        refused = MonthState(state.month, "incomplete", gaps=exc.spans)
        context = {"state": refused, "error": str(exc), "refused": exc.spans}
        context["facts"] = close_facts(db, state.month)
        return page(request, "close.html", context, status=409, viewer=v)
    except MonthError as exc:
        context = {"state": month_state(db, state.month, now), "error": str(exc)}
        context["facts"] = close_facts(db, state.month)
        return page(request, "close.html", context, status=409, viewer=v)
    return RedirectResponse(f"{PREFIX}/finance?closed={state.month}", status_code=303)
