"""``GET /allocation`` (and ``/allocation/compute``): OpenCost's allocation API, GPU costs
from the chargeback (docs/api.md, "OpenCost-compatible /allocation").

Parameters, their forms and the 400 answers follow OpenCost's ``ComputeAllocationHandler``
(opencost/opencost ``pkg/costmodel/aggregation.go``): a bad ``window`` is a plain-text 400
(``http.Error``), a bad ``step``, ``accumulateBy`` or ``filter`` a JSON one (``{"code": 400,
"message": "Error: …"}``, ``WriteError``); ``aggregate`` names OpenCost does not know are
dropped, as OpenCost drops them. Same bearer tokens as ``/v1`` (in the header only); a team
token sees its own team's allocations only. OpenCost's clients that cannot send a token use
``gpu-costsvc opencost-proxy`` (costsvc/opencost/proxy.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, create_model

from costsvc.api.cache import Answers
from costsvc.api.deps import Db, Now
from costsvc.api.errors import ERRORS
from costsvc.auth.principal import Caller, Finance, check_team
from costsvc.kit.lists import comma_list
from costsvc.kit.quoting import clip
from costsvc.kit.windows import BadParameter, parse_window
from costsvc.opencost.aggregates import (
    CONTROLLER_COLUMNS,
    LABEL_PREFIX,
    Aggregate,
    parse_aggregates,
)
from costsvc.opencost.assets import asset_filter, asset_suggestions, assets, suggested_field
from costsvc.opencost.filters import FilterError, Node, parse
from costsvc.opencost.params import Plan, parse_accumulate, parse_bool, parse_step, plan
from costsvc.opencost.podlabels import with_labels
from costsvc.opencost.queries import allocation_rows, gpu_rows, label_history
from costsvc.opencost.shape import (
    NULL_FIELDS,
    NULL_MAPS,
    ZERO_AFTER_GPU,
    ZERO_BEFORE_GPU,
    Options,
    check_filter,
    response_json,
    to_json,
)
from costsvc.opencost.suggest import columns as suggest_columns
from costsvc.opencost.suggest import parse_ask, parse_limit, suggestions
from costsvc.rules.cost_model import CostModelError
from costsvc.rules.cost_model_source import in_force, label_keys
from kube.label_names import sanitize_label

router = APIRouter(tags=["opencost"])
MAX_PARAMETER = 4096  # characters in any one parameter

Text = Annotated[str | None, Query()]


class GpuAllocation(BaseModel):
    gpuRequestAverage: float
    gpuUsageAverage: float | None
    isGPUShared: bool


class OpenCostError(BaseModel):
    """OpenCost's ``WriteError`` body."""

    code: int
    status: str
    data: None
    message: str


def _allocation_model() -> type[BaseModel]:
    """OpenCost's ``AllocationJSON``, for the OpenAPI description (answers are written by
    costsvc/opencost/shape.py)."""
    fields: dict[str, Any] = {
        "name": (str, ...),
        "properties": (dict[str, Any], ...),
        "window": (dict[str, str], ...),
        "start": (str, ...),
        "end": (str, ...),
        "minutes": (float, ...),
    }
    numbers = [*ZERO_BEFORE_GPU, "gpuCount", "gpuHours", "gpuCost", "gpuCostAdjustment"]
    numbers += ["gpuCostIdle", *(f for f in ZERO_AFTER_GPU if f not in NULL_FIELDS)]
    numbers += ["totalCost"]
    fields.update({f: (float, ...) for f in numbers})
    fields["gpuEfficiency"] = (float | None, ...)
    fields["totalEfficiency"] = (float | None, ...)
    for f in (*NULL_FIELDS, *NULL_MAPS):
        fields[f] = (None, ...)
    fields["gpuAllocation"] = (GpuAllocation | None, ...)
    model: type[BaseModel] = create_model("Allocation", **fields)
    return model


Allocation = _allocation_model()


class AllocationAnswer(BaseModel):
    """OpenCost's ``Response``: one map of name -> allocation per set."""

    code: int
    status: str
    data: list[dict[str, Allocation]]  # type: ignore[valid-type]


RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": AllocationAnswer, "description": "OpenCost's allocation sets"},
    400: {
        "model": OpenCostError,
        "description": "a bad parameter, answered as OpenCost does: text for window and "
        "aggregate (Go's http.Error), OpenCost's JSON error for the others",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    },
    401: ERRORS[401],
    403: ERRORS[403],
}


def label_columns(request: Request, db: Db) -> dict[str, str]:
    """Label key (as written, and Prometheus-sanitised as kube-state-metrics and OpenCost write
    it) -> the owner column it fills: the label keys (team, project, stage) of the cost model
    in force (costsvc/rules/cost_model_source.py: the file, or the one kept in the database), the
    defaults without a cost model."""
    keys = label_keys(request.app.state.settings.cost_model, db)
    out: dict[str, str] = {}
    for column, names in (("team", keys.team), ("project", keys.project), ("stage", keys.stage)):
        for name in names:
            out.setdefault(name, column)
            out.setdefault(sanitize_label(name), column)  # kube-state-metrics' form
            out.setdefault(sanitize_label(name).removeprefix("label_"), column)  # OpenCost's
    return out


def _error(exc: BadParameter, inputs: Iterable[str | None] = ()) -> Response:
    """OpenCost's 400, its message quoting at most 64 characters of any of ``inputs``."""
    message = clip(str(exc), [v for v in inputs if v])
    if exc.plain:  # Go's http.Error: text, a newline, nosniff
        headers = {"X-Content-Type-Options": "nosniff"}
        return PlainTextResponse(f"{message}\n", 400, headers=headers)
    body = {"code": 400, "status": "", "data": None, "message": f"Error: {message}"}
    return Response(to_json(body), 400, media_type="application/json")


def _too_long(given: list[str | None], aggregate: list[str] | None) -> bool:
    """Whether a parameter, or the ``aggregate`` ones together, pass :data:`MAX_PARAMETER`."""
    return (
        any(len(v) > MAX_PARAMETER for v in given if v)
        or sum(len(v) for v in aggregate or []) > MAX_PARAMETER
    )


def _options(
    aggregates: list[Aggregate],
    include_idle: str | None,
    share_idle: str | None,
    idle_by_node: str | None,
    include_parcs: str | None,
) -> Options:
    """How the answer is shaped: its aggregates and idle options (OpenCost's own check on
    ``includeProportionalAssetResourceCosts`` raises :class:`BadParameter`)."""
    options = Options(
        aggregates,
        include_idle=parse_bool(include_idle),
        share_idle=parse_bool(share_idle),
        idle_by_node=parse_bool(idle_by_node),
    )
    if parse_bool(include_parcs) and not options.include_idle:  # OpenCost's own check
        raise BadParameter(
            "bad request - includeIdle must be set true if "
            "includeProportionalAssetResourceCosts is true"
        )
    return options


def _filter(filter_text: str | None, labels: dict[str, str]) -> tuple[Node | None, set[str]]:
    """The ``filter`` parsed (None: none) and the columns it reads; a bad one raises
    :class:`BadParameter`."""
    if not filter_text:
        return None, set()
    try:
        keep = parse(filter_text)
        return keep, check_filter(keep, labels)
    except FilterError as exc:
        raise BadParameter(f"Invalid filter: {exc}") from None


def _columns(columns: set[str], options: Options) -> tuple[set[str], set[str]]:
    """The chargeback columns to read (``columns``: those the aggregates and filter name), and
    the pod labels to read from the history instead (by pod)."""
    if options.idle_by_node:
        columns.add("node")
    if columns & {"pod", "container"}:  # a pod's controller: its properties, no more rows
        columns |= set(CONTROLLER_COLUMNS)
    from_history = {c.removeprefix(LABEL_PREFIX) for c in columns if c.startswith(LABEL_PREFIX)}
    if from_history:  # pod labels from the history, by pod
        columns = {c for c in columns if not c.startswith(LABEL_PREFIX)} | {"namespace", "pod"}
    return columns, from_history


def _answer(
    db: Db,
    sets: Plan,
    columns: set[str],
    team: str | None,
    from_history: set[str],
    options: Options,
    labels: dict[str, str],
    keep: Node | None,
) -> Response:
    """The allocation sets read from the chargeback (and the pod labels from the history);
    a window holding costs in more than one currency is a 400 (OpenCost's answer has one)."""
    rows: list[Any] = []
    if sets.sets:
        query = sets.query
        with db.connect() as conn:
            rows, currencies = allocation_rows(
                conn, query.start, query.end, sets.step, columns, team
            )
            if from_history:
                history = label_history(conn, query.start, sets.sets[-1].end)
                rows = with_labels(rows, sets.sets, from_history, history)
        if len(currencies) > 1:
            return _error(
                BadParameter(
                    f"the window holds costs in {len(currencies)} currencies "
                    f"({', '.join(sorted(currencies))}); OpenCost's answer has one"
                )
            )
    body = response_json(rows, sets.sets, options, labels, keep, sets.groups)
    return Response(body, media_type="application/json")


@router.get(
    "/allocation",
    summary="OpenCost's allocation API: GPU cost per namespace, label, node, …",
    description="OpenCost's `/allocation` parameters and answer (docs/api.md). CPU, RAM, "
    "network and storage fields are 0: gpu-costsvc prices GPUs.",
    response_model=None,
    responses=RESPONSES,
)
# OpenCost's cost-model path, OpenCost's UI's and kubectl-cost --opencost's
@router.get("/allocation/compute", include_in_schema=False, response_model=None)
def allocation(
    request: Request,
    who: Caller,
    db: Db,
    now: Now,
    answers: Answers,
    window: Text = None,
    step: Text = None,
    aggregate: Annotated[list[str] | None, Query()] = None,
    accumulate: Text = None,
    accumulate_by: Annotated[str | None, Query(alias="accumulateBy")] = None,
    include_idle: Annotated[str | None, Query(alias="includeIdle")] = None,
    share_idle: Annotated[str | None, Query(alias="shareIdle")] = None,
    idle_by_node: Annotated[str | None, Query(alias="idleByNode")] = None,
    include_parcs: Annotated[
        str | None, Query(alias="includeProportionalAssetResourceCosts")
    ] = None,
    filter_text: Annotated[str | None, Query(alias="filter")] = None,
) -> Response:
    """OpenCost's allocation sets of the window, as OpenCost answers them."""
    given = [window, step, accumulate, accumulate_by, include_idle, share_idle, idle_by_node]
    given.append(filter_text)
    if _too_long(given, aggregate):
        return _error(BadParameter(f"a parameter is longer than {MAX_PARAMETER} characters"))
    labels = label_columns(request, db)
    try:
        span = parse_window(window or "", now)
        aggregates = parse_aggregates(comma_list(aggregate), labels)
        accumulation = parse_accumulate(accumulate, accumulate_by)
        stepped = bool((step or "").strip())
        sets = plan(span, parse_step(step, span, accumulation), accumulation, stepped)
        options = _options(aggregates, include_idle, share_idle, idle_by_node, include_parcs)
        keep, filtered = _filter(filter_text, labels)
    except BadParameter as exc:
        return _error(exc, [*given, *(aggregate or [])])
    columns, from_history = _columns({c for a in aggregates for c in a.columns} | filtered, options)
    team = check_team(who)

    def compute() -> Response:
        return _answer(db, sets, columns, team, from_history, options, labels, keep)

    key = (
        "allocation",
        team,
        sets.query,
        tuple(sets.sets),
        tuple(sets.groups),
        tuple(aggregates),
        options.include_idle,
        options.share_idle,
        options.idle_by_node,
        filter_text or "",
        tuple(sorted(labels.items())),
    )
    if from_history:  # the label watcher writes without a data version: never cached
        return compute()
    answer: Response = answers.get(db, key, compute)  # the app's, bounded in bytes
    return answer


@router.get(
    "/allocation/autocomplete",
    summary="OpenCost's filter suggestions: the values a field takes in a window",
    description="OpenCost's `/allocation/autocomplete` (docs/api.md): `window`, `field`, "
    '`search`, `limit` (≤ 1000), `filter`; answer `{"code": 200, "data": {"data": [...]}}`.',
    response_model=None,
    responses={
        400: {"description": "a bad parameter, as text (Go's http.Error)"},
        401: ERRORS[401],
        403: ERRORS[403],
    },
)
def allocation_autocomplete(
    request: Request,
    who: Caller,
    db: Db,
    now: Now,
    window: Text = None,
    field: Text = None,
    search: Text = None,
    limit: Text = None,
    filter_text: Annotated[str | None, Query(alias="filter")] = None,
) -> Response:
    """The distinct values of ``field`` in the window's allocations the caller may see
    (costsvc/opencost/suggest.py); every refusal plain text, as OpenCost's ``http.Error``."""
    given = [window, field, search, limit, filter_text]
    if _too_long(given, None):
        return _error(BadParameter(f"a parameter is longer than {MAX_PARAMETER} characters", True))
    labels = label_columns(request, db)
    try:
        span = parse_window(window or "", now)
        ask = parse_ask(field, search, limit)
        keep, filtered = _filter(filter_text, labels)
    except BadParameter as exc:
        exc.plain = True
        return _error(exc, given)
    columns, from_history = _columns(suggest_columns(ask, labels) | filtered, Options([]))
    with db.connect() as conn:
        rows, _ = allocation_rows(
            conn, span.start, span.end, span.duration, columns, check_team(who)
        )
        if from_history:
            history = label_history(conn, span.start, span.end)
            rows = with_labels(rows, [span], from_history, history)
    body = {"code": 200, "data": {"data": suggestions(rows, ask, keep, labels)}}
    return Response(to_json(body), media_type="application/json")


@router.get(
    "/getConfigs",
    summary="OpenCost's cost-model settings: the currency (kubectl-cost reads it)",
    description='`{"code": 200, "status": "success", "data": {"currencyCode": …}}`: the '
    "currency of the cost model in force; 503 without one (docs/api.md).",
    response_model=None,
    responses={
        401: ERRORS[401],
        403: ERRORS[403],
        503: {"description": "no usable cost model: no currency to tell"},
    },
)
def get_configs(request: Request, who: Caller, db: Db) -> Response:
    """The currency of the cost model in force (costsvc/rules/cost_model_source.py), as
    OpenCost's ``GetConfigs`` writes its ``CustomPricing`` (opencost/opencost
    ``pkg/costmodel/router.go`` ``WrapData``; ``pkg/cloud/models/models.go`` ``currencyCode``):
    kubectl-cost asks ``/model/getConfigs`` and reads ``data.currencyCode``, "" as USD
    (kubecost/kubectl-cost ``pkg/query/configapi.go``). Only the currency: gpu-costsvc has no
    other of OpenCost's settings. Without a usable cost model there is no currency to tell (not
    a guessed USD): 503."""
    try:
        currency = in_force(request.app.state.settings.cost_model, db).model.currency
    except CostModelError as exc:
        body = {"code": 503, "status": "error", "data": None, "message": str(exc)[:500]}
        return Response(to_json(body), 503, media_type="application/json")
    body = {"code": 200, "status": "success", "data": {"currencyCode": currency}}
    return Response(to_json(body), media_type="application/json")


@router.get(
    "/assets",
    summary="OpenCost's assets API: the GPU nodes and what their GPUs cost",
    description="OpenCost's `/assets` answer (docs/api.md): one `Node` asset per GPU node, its "
    "`gpuCost` what the chargeback charged for its GPUs; CPU and RAM 0. Finance and admin "
    "tokens only: a node's cost is every team's.",
    response_model=None,
    responses={
        400: {
            "description": "a bad window or filter, or a filter field that does not apply to "
            "these assets (plain text, Go's http.Error)"
        },
        401: ERRORS[401],
        403: ERRORS[403],
    },
)
def assets_route(
    who: Finance,
    db: Db,
    now: Now,
    window: Text = None,
    aggregate: Text = None,
    accumulate: Text = None,
    include_idle: Annotated[str | None, Query(alias="includeIdle")] = None,
    step: Text = None,
    filter_text: Annotated[str | None, Query(alias="filter")] = None,
) -> Response:
    """The window's GPU nodes as OpenCost's asset set (costsvc/opencost/assets.py). As
    OpenCost's ``ComputeAssetsHandler`` (opencost/opencost ``pkg/costmodel/handlers.go``), only
    ``window`` and ``filter`` are read: ``aggregate``, ``accumulate``, ``includeIdle`` and
    ``step``, which the OpenCost UI sends, are accepted and change nothing. A team token is
    refused (403): a node's GPUs are shared by teams, and their cost is the fleet's."""
    given = [window, aggregate, accumulate, include_idle, step, filter_text]
    if _too_long(given, None):
        return _error(BadParameter(f"a parameter is longer than {MAX_PARAMETER} characters", True))
    try:
        span = parse_window(window or "", now)
    except BadParameter as exc:
        exc.plain = True
        return _error(exc, given)
    try:
        keep = asset_filter(filter_text or "")
    except FilterError as exc:
        return _error(BadParameter(f"Invalid filter: {exc}", True), given)
    with db.connect() as conn:
        rows = gpu_rows(conn, span.start, span.end)
    return Response(to_json(assets(rows, span, keep)), media_type="application/json")


@router.get(
    "/assets/autocomplete",
    summary="Filter suggestions for the assets: the values an asset field takes in a window",
    description="The OpenCost UI's report builder's suggestions for an Infra Assets filter "
    "(docs/api.md): `window`, `field`, `search`, `limit` (≤ 1000), `filter`; answer "
    '`{"code": 200, "data": {"data": [...]}}`. Finance and admin tokens only, as `/assets`.',
    response_model=None,
    responses={
        400: {"description": "a bad parameter, as text (Go's http.Error)"},
        401: ERRORS[401],
        403: ERRORS[403],
    },
)
def assets_autocomplete(
    who: Finance,
    db: Db,
    now: Now,
    window: Text = None,
    field: Text = None,
    search: Text = None,
    limit: Text = None,
    filter_text: Annotated[str | None, Query(alias="filter")] = None,
) -> Response:
    """The distinct values of ``field`` among the window's GPU node assets the filter keeps
    (costsvc/opencost/assets.py ``asset_suggestions``)."""
    given = [window, field, search, limit, filter_text]
    if _too_long(given, None):
        return _error(BadParameter(f"a parameter is longer than {MAX_PARAMETER} characters", True))
    try:
        span = parse_window(window or "", now)
        count = parse_limit(limit, "asset")
        asked = suggested_field(field or "")
    except FilterError as exc:
        message = (
            f"Error getting asset autocomplete: autocomplete bad request: invalid field: {exc}"
        )
        return _error(BadParameter(message, True), given)
    except BadParameter as exc:
        exc.plain = True
        return _error(exc, given)
    try:
        keep = asset_filter(filter_text or "")
    except FilterError as exc:
        return _error(BadParameter(f"Invalid filter: {exc}", True), given)
    with db.connect() as conn:
        data = assets(gpu_rows(conn, span.start, span.end), span, keep)["data"]
    values = asset_suggestions(data, asked, search or "", count)
    return Response(to_json({"code": 200, "data": {"data": values}}), media_type="application/json")
