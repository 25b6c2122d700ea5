"""OpenCost's ``GET /inferenceCost/total``: its parameters and answer shape. Pure.

From opencost/opencost ``pkg/inferencecost/`` (OpenCost 1.121, PR #3845; the design in
``docs/opencost-for-llm-d/``): ``queryservice_helper.go`` ``ParseInferenceCostRequest``
(``window`` required, OpenCost's window forms; ``costBasis`` ``allocation`` (default) or
``usage``; ``aggregate`` a comma list of ``model_name``, ``model_version``, ``namespace``,
``cluster``, ``pod``, ``controller``, ``controller_kind``, ``container``; ``accumulate``
hour/day/week/month, which for ``/total`` only steps the sums; ``filter``
``prop:"value"[+prop:"value"]``, AND), ``aggregate.go`` (the key ``model:namespace``
without ``aggregate``, else the values joined by ``/``, an empty one ``__unallocated__``;
properties not aggregated on are cleared; rates recomputed from the summed costs and
tokens, 0 without tokens) and ``apitypes.go`` (``InferenceCostResponse``'s fields). The
answer is ``{"code": 200, "data": {"inferenceCosts": {...}, "window": {...}}}``; a bad
parameter ``{"code": 400, "data": null, "message": ...}`` (``protocol.WriteError``).

What gpu-costsvc keeps differently (docs/inference.md): no model version, controller or
container (they aggregate as empty: ``__unallocated__``), no KV-cache correction
(``cacheSavingsFraction`` 0); the usage basis is what the pods measurably used, and where a
holding had no utilisation series it is unknown: ``null``, never a number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from costsvc.inference.split import Totals, per_million
from costsvc.kit.lists import comma_list
from costsvc.kit.money import money
from costsvc.kit.quoting import cut
from costsvc.kit.times import iso_z
from costsvc.kit.windows import BadParameter, Window, parse_window
from costsvc.opencost.shape import to_json

SUPPORTED = (
    "model_name",
    "model_version",
    "namespace",
    "cluster",
    "pod",
    "controller",
    "controller_kind",
    "container",
)
# OpenCost's property -> the inference_hours column (None: not kept, always empty)
COLUMN = {"model_name": "model", "namespace": "namespace", "cluster": "cluster", "pod": "pod"}
PROPERTY = {  # OpenCost's JSON name of each property, in its order
    "model_name": "modelName",
    "model_version": "modelVersion",
    "namespace": "namespace",
    "cluster": "cluster",
    "pod": "pod",
    "controller": "controller",
    "controller_kind": "controllerKind",
    "container": "container",
}
OMIT_EMPTY = {"modelVersion", "cluster", "pod", "controller", "controllerKind", "container"}
UNALLOCATED = "__unallocated__"  # OpenCost's UnallocatedSuffix
BASES = ("allocation", "usage")
ACCUMULATE = ("", "hour", "day", "week", "month", "quarter", "all", "none")
# our split rules as OpenCost's ``allocationMethod`` (informational)
METHOD = {"time": "compute_time", "weight": "multiplier", "role": "role"}


@dataclass(frozen=True, slots=True)
class Request:
    window: Window
    basis: str
    aggregate: list[str]
    filters: list[tuple[str, str]]

    def columns(self) -> list[str]:
        """The inference_hours columns the answer groups by."""
        wanted = self.aggregate or ["model_name", "namespace"]
        names = [*wanted, *(p for p, _ in self.filters)]
        return sorted({COLUMN[p] for p in names if p in COLUMN})


def parse_request(
    window: str | None,
    cost_basis: str | None,
    aggregate: list[str] | None,
    accumulate: str | None,
    filter_text: str | None,
    now: datetime,
) -> Request:
    """OpenCost's ``ParseInferenceCostRequest``; :class:`BadParameter` with its messages."""
    if not window:
        raise BadParameter("missing required 'window' parameter")
    try:
        span = parse_window(window, now)
    except BadParameter as exc:
        raise BadParameter(
            str(exc).replace("Invalid 'window' parameter: ", "invalid 'window' parameter: ")
        ) from None
    basis = cost_basis if cost_basis is not None else "allocation"
    if basis not in BASES:
        raise BadParameter(
            f'invalid \'costBasis\' parameter "{cut(basis)}": must be "usage" or "allocation"'
        )
    dims = comma_list(aggregate)
    for d in dims:
        if d not in SUPPORTED:
            raise BadParameter(
                f"unsupported 'aggregate' dimension \"{cut(d)}\": supported dimensions are "
                + ", ".join(SUPPORTED)
            )
    if (accumulate or "").strip().lower() not in ACCUMULATE:
        raise BadParameter(f"invalid 'accumulate' parameter: {cut(accumulate or '')}")
    return Request(span, basis, dims, parse_filter(filter_text or ""))


def parse_filter(text: str) -> list[tuple[str, str]]:
    """OpenCost's Phase-1 filter: ``prop:"value"`` terms joined by ``+`` (or a space), AND."""
    out = []
    for raw in text.replace(" ", "+").split("+"):
        term = raw.strip()
        if not term:
            continue
        prop, colon, value = term.partition(":")
        if not colon:
            raise BadParameter(
                f"invalid 'filter' parameter: invalid filter term \"{cut(term)}\": "
                "expected property:value"
            )
        prop, value = prop.strip(), value.strip()
        if prop not in SUPPORTED:
            raise BadParameter(
                f"invalid 'filter' parameter: unsupported filter property \"{cut(prop)}\": "
                "supported properties are " + ", ".join(SUPPORTED)
            )
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        out.append((prop, value))
    return out


def keep(group: dict[str, str], filters: Sequence[tuple[str, str]]) -> bool:
    """Whether a group passes every filter term (a property we do not keep is empty)."""
    return all(group.get(COLUMN.get(p, ""), "") == v for p, v in filters)


def _number(micro: int | None) -> Decimal | None:
    """Micro-units as the number OpenCost writes: :func:`costsvc.kit.money.money`'s six
    places."""
    return None if micro is None else Decimal(money(micro))


def answer(
    request: Request, groups: Sequence[tuple[dict[str, str], Totals]], window_end: datetime
) -> str:
    """The ``/inferenceCost/total`` answer as JSON text over the groups (already summed over
    the window per :meth:`Request.columns`), aggregated and keyed as OpenCost does."""
    dims = request.aggregate
    merged: dict[str, tuple[dict[str, str], Totals]] = {}
    for group, totals in groups:
        if not keep(group, request.filters):
            continue
        props = {p: group.get(COLUMN[p], "") if p in COLUMN else "" for p in SUPPORTED}
        if dims:
            key = "/".join(props[d] or UNALLOCATED for d in dims)
            props = {p: (v if p in dims else "") for p, v in props.items()}
            if "model_name" not in dims:
                props["model_version"] = ""
            if "controller" not in dims:
                props["controller_kind"] = ""
        else:
            key = f"{props['model_name']}:{props['namespace'] or UNALLOCATED}"
        found = merged.get(key)
        if found is None:
            fresh = Totals()
            fresh.add(totals)
            merged[key] = (props, fresh)
        else:
            found[1].add(totals)
    window = {"start": iso_z(request.window.start), "end": iso_z(window_end)}
    costs = {
        key: _response(props, totals, request.basis, window)
        for key, (props, totals) in sorted(merged.items())
    }
    return to_json({"code": 200, "data": {"inferenceCosts": costs, "window": window}})


def _response(
    props: dict[str, str], t: Totals, basis: str, window: dict[str, str]
) -> dict[str, Any]:
    properties: dict[str, str] = {}
    for p in SUPPORTED:
        name = PROPERTY[p]
        if props[p] or name not in OMIT_EMPTY:
            properties[name] = props[p]
    known = basis == "allocation" or t.unmeasured == 0
    if basis == "allocation":
        total, input_cost, output_cost = t.cost, t.input_cost, t.output_cost
    else:
        total, input_cost, output_cost = t.used, t.input_used, t.output_used
    tokens = t.input_tokens + t.output_tokens

    def rate(cost: int, n: int) -> Decimal | None:
        if not known:
            return None
        return _number(per_million(cost, n) if n > 0 else 0)

    methods = {METHOD[r] for r in t.rules}
    out: dict[str, Any] = {
        "properties": properties,
        "window": window,
        "costBasis": basis,
        "totalCost": _number(total) if known else None,
        "promptTokens": t.input_tokens,
        "generationTokens": t.output_tokens,
        "totalTokens": tokens,
        "costPerMillionTokens": rate(total, tokens),
        "inputCost": _number(input_cost) if known else None,
        "outputCost": _number(output_cost) if known else None,
        "inputCostPerMillionTokens": rate(input_cost, t.input_tokens),
        "outputCostPerMillionTokens": rate(output_cost, t.output_tokens),
        "cacheSavingsFraction": 0,
    }
    if len(methods) == 1:
        out["allocationMethod"] = methods.pop()
    return out
