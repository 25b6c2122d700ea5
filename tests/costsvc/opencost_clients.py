"""The requests OpenCost's own clients send to ``/allocation``, taken from their source, as
test data for tests/costsvc/test_allocation_api.py (each list cites where it comes from).

**OpenCost UI** (opencost/opencost-ui at 5babf86, July 2026): ``app/services/allocation.ts``
``_doFetch`` asks ``GET ${BASE_URL}/allocation/compute`` (the UI's nginx proxies ``/model/`` to
the API: ``default.nginx.conf.template``) with ``window``, ``aggregate``, ``includeIdle``
(default true), ``accumulate`` when given, ``filter`` (``app/lib/legacy-util.ts``
``parseFilters``: ``prop:"value"`` joined with ``+``), through axios, whose ``buildURL``
encodes each value with ``encodeURIComponent`` and puts ``: $ , [ ]`` and spaces (as ``+``)
back. Two pages send them:

- the legacy Cost Allocation page (``app/routes/legacy/allocation.tsx``): window ``7d``,
  aggregate ``namespace``, ``accumulate`` a bool (``acc=true``: "Entire window", else
  false: "Daily"); its window menu ``windowOptions``, aggregate menu
  ``baseAggregationOptions``; its drill-down (``drilldown``) namespace -> controllerKind ->
  controller -> pod -> container, each level adding a filter (``filterPropertyMap``; a
  controller row ``kind:name`` adds ``controllerKind`` then ``controllerName``);
- the dashboard's allocation table (``app/components/cost-allocation-table.tsx``,
  ``scoped-views.tsx`` ``DEFAULT_ALLOCATION_FILTERS``: ``7d``, ``namespace``, accumulate
  ``day``, includeIdle true), its accumulate menu ``app/types/report.ts``
  ``REPORT_ACCUMULATE_OPTIONS`` (day, hour, week, weeknow, month, quarter, all) and the same
  drill-down.

**kubectl-cost** (kubecost/kubectl-cost at 3f74536, June 2026): ``pkg/cmd/cost.go`` builds
``namespace`` (aggregate cluster,namespace), ``deployment`` (cluster,namespace,deployment),
``controller`` (cluster,namespace,controller), ``pod`` (cluster,namespace,pod);
``pkg/cmd/aggregatedcommandbuilder.go`` sends ``window`` (default ``1d``), ``aggregate``,
``accumulate=true``, ``includeIdle`` and ``idle`` (``--idle``, default true),
``filterNamespaces`` (``-n``; ``""`` for namespace); ``pkg/cmd/label.go`` ``label -l KEY``:
aggregate ``cluster,label:KEY``, no ``filterNamespaces``. The path is ``--allocation-path``
(``/allocation/compute`` with ``--opencost``: ``pkg/query/options.go``), the query Go's
``url.Values.Encode`` (``pkg/query/portforward.go`` ``queryGet``: keys sorted,
``QueryEscape``). ``pkg/cmd/display/output.go`` ``WriteAllocationTable`` splits each name on
``/`` into as many parts as the aggregation (else it panics), ``__idle__`` aside, and scales by
``43200 / Minutes()`` when not ``--historical``.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote, urlencode

UI_PATH = "/allocation/compute"
UI_WINDOWS = ("today", "yesterday", "24h", "48h", "week", "lastweek", "7d", "14d")
UI_AGGREGATES = (
    "cluster",
    "node",
    "namespace",
    "controllerKind",
    "controller",
    "daemonset",
    "deployment",
    "job",
    "service",
    "statefulset",
    "pod",
    "container",
)
UI_ACCUMULATE = ("day", "hour", "week", "weeknow", "month", "quarter", "all")  # report.ts
LEGACY_ACCUMULATE = (True, False)  # "Entire window", "Daily"
# drill-down: the next aggregate, and the filter property a clicked row's name becomes
DRILLDOWN = {
    "namespace": "controllerKind",
    "controllerKind": "controller",
    "controller": "pod",
    "pod": "container",
}
FILTER_PROPERTY = {
    "namespace": "namespace",
    "controllerKind": "controllerKind",
    "controller": "controllerName",
    "pod": "pod",
    "container": "container",
}
# kubectl cost <command>: its aggregation (pkg/cmd/cost.go, label.go)
KUBECTL_COMMANDS = {
    "namespace": ("cluster", "namespace"),
    "deployment": ("cluster", "namespace", "deployment"),
    "controller": ("cluster", "namespace", "controller"),
    "pod": ("cluster", "namespace", "pod"),
    "label": ("cluster", "label:app"),
}


def axios_query(params: Mapping[str, object]) -> str:
    """A query string as axios' ``buildURL`` writes it (booleans as ``true``/``false``)."""
    parts = []
    for key, value in params.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        parts.append(f"{_axios(key)}={_axios(text)}")
    return "&".join(parts)


def _axios(text: str) -> str:
    encoded = quote(text, safe="-_.!~*'()")  # encodeURIComponent
    for code, char in (("%3A", ":"), ("%24", "$"), ("%2C", ","), ("%20", "+")):
        encoded = encoded.replace(code, char)
    return encoded.replace("%5B", "[").replace("%5D", "]")


def ui_params(
    window: str,
    aggregate: str,
    accumulate: object = None,
    filters: list[tuple[str, str]] | None = None,
    include_idle: bool = True,
) -> dict[str, object]:
    """``_doFetch``'s params, in its order."""
    params: dict[str, object] = {"window": window, "aggregate": aggregate}
    params["includeIdle"] = include_idle
    if isinstance(accumulate, bool) or accumulate:
        params["accumulate"] = accumulate
    if filters:
        params["filter"] = "+".join(dict.fromkeys(f'{p}:"{v}"' for p, v in filters))
    return params


def ui_requests() -> list[dict[str, object]]:
    """Every request the two pages send without a click on a row: the default views, every
    window, every aggregate, every accumulate choice (drill-downs follow the answers)."""
    out = [ui_params("7d", "namespace", False), ui_params("7d", "namespace", "day")]
    out += [ui_params(w, "namespace", acc) for w in UI_WINDOWS for acc in (True, False, "day")]
    out += [ui_params("7d", a, acc) for a in UI_AGGREGATES for acc in (False, "day")]
    out += [ui_params("7d", "namespace", acc) for acc in UI_ACCUMULATE]
    out += [ui_params("14d", "namespace", "day", include_idle=False)]
    return out


def kubectl_query(command: str, window: str = "1d", namespace: str = "") -> str:
    """``kubectl cost <command> --window W [-n NS]``'s query (Go's url.Values.Encode)."""
    aggregation = ",".join(KUBECTL_COMMANDS[command])
    params = {"window": window, "aggregate": aggregation, "accumulate": "true"}
    params |= {"includeIdle": "true", "idle": "true"}
    if command != "label":
        params["filterNamespaces"] = namespace
    return urlencode(sorted(params.items()))
