"""How a page is answered: the Jinja2 templates (autoescaped: every label value from a pod is
text, never markup), the filters that write figures for people, and the headers every page
carries (costsvc/api/headers.py: a Content-Security-Policy that allows nothing from another
origin — no script at all: the pages need none —, no caching, no framing)."""

from __future__ import annotations

from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from importlib.resources import files
from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from costsvc.api.headers import PAGES
from costsvc.auth.tokens import Principal
from costsvc.kit.money import money, money_rounded, to_micro
from costsvc.kit.times import month_of, parse_month

PREFIX = PAGES


class PageError(Exception):
    """A page's own refusal (a bad month, a wrong form), answered as an HTML page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def amount(text: str | None) -> str:
    """A money string of the API ('12.345678') rounded for reading ('12.35')."""
    if text is None:
        return "—"
    try:
        return money_rounded(to_micro(text))
    except (InvalidOperation, ValueError):
        return str(text)


def percent(ratio: str | Decimal | None) -> str:
    """A ratio ('0.345678') as a percentage with one decimal ('34.6 %'); '—' when unknown."""
    if ratio is None:
        return "—"
    value = (Decimal(ratio) * 100).quantize(Decimal("0.1"), ROUND_HALF_EVEN)
    return f"{value} %"


def places(text: str | None, n: int = 1) -> str:
    """A decimal string ('12.345678901') with ``n`` places, half to even ('12.3')."""
    if text is None:
        return "—"
    return str(Decimal(text).quantize(Decimal(1).scaleb(-n), ROUND_HALF_EVEN))


def segment(text: str) -> str:
    """``text`` as one URL path segment: every character but letters, digits and ``-._~``
    percent-encoded (a team named from a pod label may hold '/', '?' or '#')."""
    return quote(text, safe="-._~")


def short(text: str | None, keep: int = 12) -> str:
    return "" if not text else text[:keep] + ("…" if len(text) > keep else "")


def step_name(start: str, step: str) -> str:
    """A step's start (ISO text) as a row or column says it: ``2026-11-02`` (a day, a week),
    ``2026-11`` (a month), ``2026-11-02 13:00`` (an hour)."""
    if step == "hour":
        return start[:13].replace("T", " ") + ":00"
    return start[:7] if step == "month" else start[:10]


RATES = (
    ("cost_per_1m_input_tokens", "input_tokens", False),
    ("cost_per_1m_output_tokens", "output_tokens", False),
    ("usage_cost_per_1m_input_tokens", "input_tokens", True),
    ("usage_cost_per_1m_output_tokens", "output_tokens", True),
)


def rate_cells(row: dict[str, Any]) -> list[tuple[str, str | None, str]]:
    """An inference row's four rates (allocation and usage basis, per 1M input and output
    tokens): (field, the API's value, why it is null — "" where it is not). Pure."""
    out = []
    for name, tokens, usage in RATES:
        why = ""
        if row[name] is None:
            if usage and row["usage_cost"] is None:
                unmeasured = money_rounded(to_micro(row["unmeasured_cost"]))
                why = f"usage unknown: {unmeasured} of the cost unmeasured"
            else:
                why = f"no {tokens.split('_')[0]} tokens"
        out.append((name, row[name], why))
    return out


TEMPLATES = Jinja2Templates(directory=str(files("costsvc.pages") / "templates"))
TEMPLATES.env.filters.update(
    amount=amount, percent=percent, places=places, segment=segment, short=short, money_text=money
)
TEMPLATES.env.filters["rate_cells"] = rate_cells
TEMPLATES.env.filters["step_name"] = step_name


def nav(who: Principal | None) -> list[tuple[str, str]]:
    """The pages this principal may open: (path, title)."""
    if who is None:
        return []
    if who.sees_all:
        return [
            (f"{PREFIX}/overview", "Overview"),
            (f"{PREFIX}/finance", "Finance"),
            (f"{PREFIX}/fleet", "Fleet"),
            (f"{PREFIX}/explore", "Explore"),
        ]
    assert who.team is not None
    return [
        (f"{PREFIX}/teams/{segment(who.team)}", f"Team {who.team}"),
        (f"{PREFIX}/explore", "Explore"),
    ]


def page(
    request: Request,
    template: str,
    context: dict[str, Any],
    status: int = 200,
    viewer: Any = None,
) -> HTMLResponse:
    """The template rendered with ``context``, the viewer (a signed-in session or None) and
    its navigation (its headers: costsvc/api/headers.py, as every answer under /ui)."""
    who = None if viewer is None else viewer.principal
    base = {"viewer": viewer, "nav": nav(who), "path": request.url.path, "prefix": PREFIX}
    return TEMPLATES.TemplateResponse(request, template, {**base, **context}, status_code=status)


def chosen_month(month: str | None, now: datetime) -> str:
    """The month a page shows: ``month`` (``YYYY-MM``) or now's; a bad one is a 400."""
    if not month:
        return month_of(now)
    try:
        parse_month(month)
    except ValueError:
        raise PageError(400, "month: expected YYYY-MM, e.g. 2026-11") from None
    return month
