"""A team's budgets on the pages (finance and admin): the form that creates one (the team's, or
a project's of the team) or edits one — money, thresholds, energy —, then a POST (CSRF token,
own origin) written by costsvc/budgets/service.py, the functions ``/v1/budgets`` calls: the
same validation, currency rule and audit entry; a refusal shows the API's message with its
status. A team session sees its budgets on its page, read-only: these forms answer it 403."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request, Response
from fastapi.responses import RedirectResponse

from costsvc.api.deps import Db, Now
from costsvc.budgets import service
from costsvc.budgets.service import BudgetRefused, budget_in, budget_out
from costsvc.pages.render import PREFIX, page, segment
from costsvc.pages.session import FinanceIn, check_form
from costsvc.pages.team import TeamPath

router = APIRouter(prefix=f"{PREFIX}/teams/{{team}}/budget", include_in_schema=False)
Field = Annotated[str, Form(max_length=256)]
BLANK = {"id": "", "project": "", "amount": "", "currency": "", "thresholds": "0.8, 1.0"}
BLANK["energy_kwh"] = ""
MAX_ID = 2_147_483_647  # the API's largest budget id
BudgetQuery = Annotated[int | None, Query(ge=1, le=MAX_ID)]


def _shown(db: Db, budget_id: int, team: str, v: FinanceIn) -> dict[str, Any]:
    """Budget ``budget_id`` of ``team`` as its form shows it (another team's: 404)."""
    b = service.visible_budget(db, budget_id, v.principal)
    if b.team != team:
        raise BudgetRefused(404, f"no budget {budget_id}")
    out = budget_out(b)
    thresholds = ", ".join(f"{t:g}" for t in out["thresholds"])
    return {**out, "id": str(b.id), "thresholds": thresholds, "energy_kwh": out["energy_kwh"] or ""}


def _form(
    request: Request, v: FinanceIn, team: str, shown: dict[str, Any], error: str, status: int
) -> Response:
    context = {"team": team, "form": shown, "error": error}
    return page(request, "budget.html", context, status=status, viewer=v)


@router.get("")
def budget_form(
    request: Request, team: TeamPath, v: FinanceIn, db: Db, id: BudgetQuery = None
) -> Response:
    try:
        shown = BLANK if id is None else _shown(db, id, team, v)
    except BudgetRefused as exc:
        return _form(request, v, team, BLANK, str(exc), exc.status)
    return _form(request, v, team, shown, "", 200)


def fields_of(team: str, form: dict[str, str]) -> dict[str, Any]:
    """The form's fields as the API's body: blanks left out (the API's defaults), the thresholds
    a list (``0.8, 1.0``). Pure."""
    fields: dict[str, Any] = {"team": team, "project": form["project"].strip()}
    for name in ("amount", "currency", "energy_kwh"):
        if form[name].strip():
            fields[name] = form[name].strip()
    if form["thresholds"].strip():
        fields["thresholds"] = [t for t in re.split(r"[,\s]+", form["thresholds"].strip()) if t]
    return fields


def _budget_id(text: str) -> int:
    """The form's budget id; 0 (no such budget) for one no budget can have."""
    text = text.strip()
    return int(text) if text.isdigit() and 0 < int(text) <= MAX_ID else 0


@router.post("")
def save_budget(
    request: Request,
    team: TeamPath,
    v: FinanceIn,
    db: Db,
    now: Now,
    csrf: Field = "",
    id: Field = "",
    project: Field = "",
    amount: Field = "",
    currency: Field = "",
    thresholds: Field = "",
    energy_kwh: Field = "",
) -> Response:
    check_form(request, v, csrf)
    form = {"id": id, "project": project, "amount": amount, "currency": currency}
    form |= {"thresholds": thresholds, "energy_kwh": energy_kwh}
    settings = request.app.state.settings
    try:
        body = budget_in(fields_of(team, form))
        if id.strip():
            budget_id = _budget_id(id)
            _shown(db, budget_id, team, v)  # this team's, or 404
            service.replace(db, budget_id, body, v.principal, now, settings)
        else:
            service.create(db, body, v.principal, now, settings)
    except BudgetRefused as exc:
        return _form(request, v, team, form, str(exc), exc.status)
    to = f"{PREFIX}/teams/{segment(team)}#budgets"
    return RedirectResponse(to, status_code=303)
