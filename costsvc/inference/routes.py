"""Cost per million tokens: ``/v1/inference`` (+ ``.csv``) and OpenCost's
``/inferenceCost/total`` (docs/inference.md). A team token sees its own team's rows only."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Response
from pydantic import BaseModel
from starlette.requests import Request as HttpRequest

from costsvc.api.cache import Answers, json_response
from costsvc.api.deps import Db, Given, Now, filter_params, scope_key, team_filters
from costsvc.api.errors import ERRORS
from costsvc.api.exports import SpooledResponse, export
from costsvc.auth.principal import Caller
from costsvc.costs.routes import GroupedRow, Step, hours_asked
from costsvc.inference.queries import (
    DEFAULT_GROUP_BY,
    DIMENSIONS,
    answer_rows,
    served_totals,
)
from costsvc.kit.csv_cells import CsvLines, safe_cell
from costsvc.kit.quoting import clip
from costsvc.kit.times import hour_floor, iso_z
from costsvc.kit.windows import BadParameter
from costsvc.opencost.inference import Request, answer, parse_request
from costsvc.opencost.shape import to_json
from costsvc.reports.routes import CSV_DOWNLOAD, attachment
from costsvc.rules.chargeback import parse_group_by

router = APIRouter(tags=["inference"], responses=ERRORS)
opencost_router = APIRouter(tags=["opencost"])
MAX_PARAMETER = 4096
Text = Annotated[str | None, Query()]
GroupByParam = Annotated[
    list[str] | None,
    Query(description="any of " + ", ".join(DIMENSIONS) + " (default model)", max_length=16),
]
Start = Annotated[
    datetime | None, Query(description="first hour, ISO 8601 with a zone, a whole UTC hour")
]
End = Annotated[datetime | None, Query(description="end, exclusive, a whole UTC hour")]
WindowText = Annotated[
    str | None,
    Query(description="today, yesterday, week, month, lastmonth, Nh or Nd", max_length=16),
]


class InferenceRow(GroupedRow):
    input_tokens: int
    output_tokens: int
    requests: int
    allocation_cost: str  # what the serving pods held (+ idle spread onto them)
    usage_cost: str | None  # what they measurably used; null where unmeasured
    allocated_cost: str
    used_cost: str
    idle_cost: str  # allocated - used where measured: the deployment's idle
    unmeasured_cost: str
    shared_idle_cost: str  # fleet idle an idle policy spread onto the pods
    input_cost: str
    output_cost: str
    input_used_cost: str | None
    output_used_cost: str | None
    cost_per_1m_input_tokens: str | None
    cost_per_1m_output_tokens: str | None
    cost_per_1m_tokens: str | None
    usage_cost_per_1m_input_tokens: str | None
    usage_cost_per_1m_output_tokens: str | None
    usage_cost_per_1m_tokens: str | None
    gpu_hours: str
    tokens_per_gpu_hour: str | None
    split_rules: list[str]


class InferenceAnswer(BaseModel):
    start: str
    end: str
    group_by: list[str]
    step: str | None
    rows: list[InferenceRow]


def _groups(group_by: list[str] | None) -> list[str]:
    try:
        return parse_group_by(group_by, DIMENSIONS, DEFAULT_GROUP_BY)
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None


@dataclass(frozen=True)
class _Query:
    """The parameters both ``/v1/inference`` answers share, checked once (:func:`_asked`)."""

    lo: datetime
    hi: datetime
    groups: list[str]
    step: str | None
    filters: dict[str, list[str]]

    def key(self, kind: str) -> tuple[Any, ...]:
        return (kind, self.lo, self.hi, tuple(self.groups), self.step, scope_key(self.filters))

    def rows(self, db: Any) -> list[dict[str, Any]]:
        with db.connect() as conn:
            found = served_totals(conn, self.lo, self.hi, self.groups, self.step, self.filters)
            return answer_rows(found)


async def _asked(
    who: Caller,
    now: Now,
    given: Annotated[Given, filter_params(*DIMENSIONS)],  # described after those below
    start: Start = None,
    end: End = None,
    window: WindowText = None,
    step: Step | None = None,
    group_by: GroupByParam = None,
) -> _Query:
    lo, hi = hours_asked(now, start, end, window)
    groups = _groups(group_by)
    return _Query(lo, hi, groups, step.value if step else None, team_filters(who, given))


Asked = Annotated[_Query, Depends(_asked)]


@router.get(
    "/inference",
    response_model=InferenceAnswer,
    summary="Cost per million tokens by model, team or namespace (allocation and usage basis)",
)
async def get_inference(who: Caller, db: Db, answers: Answers, q: Asked) -> Response:
    def compute() -> Response:
        return json_response(
            {
                "start": iso_z(q.lo),
                "end": iso_z(q.hi),
                "group_by": q.groups,
                "step": q.step,
                "rows": q.rows(db),
            }
        )

    found: Response = await answers.aget(db, q.key("inference"), compute)
    return found


CSV_FIGURES = [f for f in InferenceRow.model_fields if f not in ("start", "group", "split_rules")]


@router.get(
    "/inference.csv",
    **CSV_DOWNLOAD,
    summary="The same as CSV (one line per group and step)",
)
def get_inference_csv(request: HttpRequest, who: Caller, db: Db, q: Asked) -> SpooledResponse:
    def body() -> Iterator[str]:
        found = q.rows(db)
        out = CsvLines()
        out.row(["start", *q.groups, *CSV_FIGURES, "split_rules"])
        for r in found:
            cells: list[object] = [r["start"] or iso_z(q.lo)]
            cells += [safe_cell(r["group"][d]) for d in q.groups]
            cells += ["" if r[f] is None else r[f] for f in CSV_FIGURES]
            cells.append(" ".join(r["split_rules"]))
            out.row(cells)
        yield out.take()

    name = f"inference-{q.lo:%Y%m%dT%H}-{q.hi:%Y%m%dT%H}.csv"
    headers = {"Content-Disposition": attachment(name)}
    # as every download: spooled, sent from the file, one of the token's export slots
    return export(request, who.name, body(), "text/csv; charset=utf-8", headers)


class InferenceCostError(BaseModel):
    """OpenCost's ``protocol.WriteError`` body."""

    code: int
    data: None
    message: str


OPENCOST_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "OpenCost's answer: data.inferenceCosts (key -> cost per million "
        "tokens of a model and namespace) and data.window",
        "content": {"application/json": {"schema": {"type": "object"}}},
    },
    400: {
        "model": InferenceCostError,
        "description": "a bad parameter, as OpenCost answers it (a query no API takes — a "
        "control character, too long — is a plain-text 400: costsvc/api/limits.py)",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    },
    401: ERRORS[401],
    403: ERRORS[403],
}


def _opencost_error(exc: BadParameter, inputs: Iterable[str | None] = ()) -> Response:
    """OpenCost's ``protocol.WriteError(w, protocol.BadRequest(...))``, its message quoting at
    most 64 characters of any of ``inputs`` (costsvc/kit/quoting.py)."""
    message = clip(str(exc), [v for v in inputs if v])
    return Response(
        to_json({"code": 400, "data": None, "message": message}),
        400,
        media_type="application/json",
    )


@opencost_router.get(
    "/inferenceCost/total",
    summary="OpenCost's inference cost API: cost per million tokens per model and namespace",
    description="OpenCost's `/inferenceCost/total` parameters and answer (docs/inference.md). "
    "Same bearer tokens as /v1; a team token sees its own team's pods only.",
    response_model=None,
    responses=OPENCOST_RESPONSES,
)
def inference_cost_total(
    who: Caller,
    db: Db,
    now: Now,
    answers: Answers,
    window: Text = None,
    cost_basis: Annotated[str | None, Query(alias="costBasis")] = None,
    aggregate: Annotated[list[str] | None, Query()] = None,
    accumulate: Text = None,
    filter_text: Annotated[str | None, Query(alias="filter")] = None,
) -> Response:
    given = [window, cost_basis, accumulate, filter_text]
    if (
        any(len(v) > MAX_PARAMETER for v in given if v)
        or sum(len(v) for v in aggregate or []) > MAX_PARAMETER
    ):
        return _opencost_error(
            BadParameter(f"a parameter is longer than {MAX_PARAMETER} characters")
        )
    try:
        request: Request = parse_request(
            window, cost_basis, aggregate, accumulate, filter_text, now
        )
    except BadParameter as exc:
        return _opencost_error(exc, [*given, *(aggregate or [])])
    filters = team_filters(who, {})
    span = request.window
    lo = hour_floor(span.start)

    def compute() -> Response:
        with db.connect() as conn:
            groups = served_totals(conn, lo, span.end, request.columns(), None, filters)
        currencies = {g.currency for g in groups}
        if len(currencies) > 1:
            return _opencost_error(
                BadParameter(
                    f"the window holds costs in {len(currencies)} currencies; "
                    "OpenCost's answer has one"
                )
            )
        text = answer(request, [(g.group, g.totals) for g in groups], span.end)
        return Response(text, media_type="application/json")

    key = (
        "inferenceCost",
        scope_key(filters),
        request.window,
        request.basis,
        tuple(request.aggregate),
        tuple(request.filters),
    )
    found: Response = answers.get(db, key, compute)
    return found
