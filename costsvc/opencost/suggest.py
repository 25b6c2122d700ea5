"""``GET /allocation/autocomplete``: the values a field takes in a window's allocations, for the
OpenCost UI's filter suggestions. Pure.

OpenCost's rules (opencost/opencost ``pkg/costmodel/autocomplete.go``
``ComputeAllocationAutocompleteHandler`` and ``pkg/allocation/autocompletequeryservice.go``
``QueryAllocationAutocompleteFromSetRange``): ``field`` is required and read case-insensitively
(``cluster``, ``namespace``, ``node``, ``controllerKind``, ``controllerName``, ``pod``,
``container``, ``label:<key>``); ``limit`` defaults to 100, more than 1000 is a 400; only the
allocations the ``filter`` keeps count (idle is no allocation there); empty values are left
out, ``search`` keeps the values containing it (case-insensitive); the values are distinct,
sorted (byte order, Go's ``sort.Strings``) and cut at ``limit``. Every refusal is a plain-text
400 (Go's ``http.Error``). The answer is ``{"code": 200, "data": {"data": [...]}}`` (OpenCost's
``WriteData`` around ``AllocationAutocompleteResponse``).

gpu-costsvc keeps no label set per allocation: ``label`` (the keys) and ``namespacelabel``
(and ``namespacelabel:<key>``) are refused rather than answered partly; ``label:<key>`` is the
pod's label as ``filter=label[<key>]`` reads it (costsvc/opencost/podlabels.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from costsvc.kit.windows import BadParameter
from costsvc.opencost.filters import Node
from costsvc.opencost.filters import parse as parse_filter
from costsvc.opencost.shape import Row, check_filter, keep_row, lookup

DEFAULT_LIMIT = 100  # OpenCost's DefaultAutocompleteResultLimit
MAX_LIMIT = 1000  # OpenCost's MaxAutocompleteResultLimit
# OpenCost's field (lower case) -> the filter field whose value it suggests
FIELDS = {
    "cluster": "cluster",
    "namespace": "namespace",
    "node": "node",
    "controllerkind": "controllerKind",
    "controllername": "controllerName",
    "pod": "pod",
    "container": "container",
}
REFUSED = ("label", "namespacelabel")  # label keys, namespace labels: not kept per allocation


@dataclass(frozen=True, slots=True)
class Ask:
    field: str  # a filter field (filters.py)
    key: str | None  # label:<key>
    search: str  # lower case
    limit: int


def parse_ask(field: str | None, search: str | None, limit: str | None) -> Ask:
    """The request's ``field``, ``search`` and ``limit``; raises :class:`BadParameter`."""
    name = (field or "").lower()
    if not name:
        raise _bad("invalid field: field is required")
    if name.startswith("label:"):
        chosen, key = "label", (field or "").split(":", 1)[1]
    elif name in FIELDS:
        chosen, key = FIELDS[name], None
    elif name in REFUSED or name.startswith("namespacelabel:"):
        raise _bad(f"invalid field: gpu-costsvc keeps no {name.split(':')[0]} set per allocation")
    else:
        raise _bad(f"invalid field: unrecognized field: {field}")
    return Ask(chosen, key, (search or "").lower(), parse_limit(limit))


def parse_limit(limit: str | None, what: str = "allocation") -> int:
    """``limit``: OpenCost's ``GetInt`` (0 when unreadable), 0 the default, above
    :data:`MAX_LIMIT` a 400 (``what``: the autocomplete it is, for the message)."""
    try:
        count = int(limit) if limit else 0
    except ValueError:
        count = 0
    if count > MAX_LIMIT:
        raise _bad(f"exceeded maximum autocomplete result limit of {MAX_LIMIT}", what)
    return count if count > 0 else DEFAULT_LIMIT


def _bad(message: str, what: str = "allocation") -> BadParameter:
    return BadParameter(
        f"Error getting {what} autocomplete: autocomplete bad request: {message}", plain=True
    )


def columns(ask: Ask, label_columns: Mapping[str, str]) -> set[str]:
    """The chargeback columns the suggested field reads (as a filter on it reads them)."""
    text = f'label[{ask.key}]:""' if ask.field == "label" else f'{ask.field}:""'
    return check_filter(parse_filter(text), label_columns)


def suggestions(
    rows: Iterable[Row], ask: Ask, keep: Node | None, label_columns: Mapping[str, str]
) -> list[str]:
    """The distinct non-empty values of the field over the rows the filter keeps (idle aside),
    containing ``search``, sorted, at most ``limit``."""
    found: set[str] = set()
    for r in rows:
        if r.is_idle or (keep is not None and not keep_row(r, keep, label_columns)):
            continue
        value = lookup(r, label_columns)(ask.field, ask.key)
        if value and ask.search in value.lower():
            found.add(value)
    return sorted(found, key=lambda v: v.encode())[: ask.limit]
