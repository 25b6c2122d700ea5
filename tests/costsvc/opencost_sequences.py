"""The OpenCost UI's and kubectl-cost's request sequences, view by view, as data: each request
in the order the client sends it, its path and query as the client writes them, and where in
the client's source it comes from. tests/costsvc/test_opencost_replay.py replays them through
``gpu-costsvc opencost-proxy``.

Sources: opencost/opencost-ui v1.121.0 (5babf86, the tag's commit; paths under ``app/``) and
kubecost/kubectl-cost at 3f74536 (paths under ``pkg/``). The UI's axios client has the base URL
``/model`` (``services/api-client.ts:3``) and encodes its params in the object's order
(tests/costsvc/opencost_clients.py ``axios_query``); a service answers a second identical
request from its 30 s cache or the one in flight (``services/allocation.ts:54-66``,
``services/assets.ts:42-50``), so the widgets of one view that share a query send it once.
kubectl-cost writes its query with Go's ``url.Values.Encode`` (keys sorted).

Each request is read as its client reads it (``READS``): ``allocation`` (``lib/legacy-util.ts``
``rangeToCumulative``/``cumulativeToTotals``, the table and chart), ``assets``
(``lib/assets-api.ts`` ``parseAssetsResponse``), ``suggest``
(``services/report-filter-autocomplete.ts`` ``parseSuggestionList``), ``configs``
(kubectl-cost ``pkg/query/configapi.go``: ``data.currencyCode``). A request the client does
not need (``needed=False``) is one whose failure it absorbs, the source line saying how; the
replay sends it and requires no answer. ``clicks`` names the row of the previous answer that
the user clicks to send a drill-down request: it must be in that answer.

What is not replayed: the pages for cloud bills and external costs (``routes/legacy/cloud.tsx``,
``external-costs.tsx``: gpu-costsvc keeps neither), and ``kubectl cost node``, which reads
Kubecost's ``/model/assets`` (``pkg/query/assetsapi.go``: ``data`` a list of sets; OpenCost's
is one map, ``pkg/costmodel/handlers.go`` ``ComputeAssetsHandler``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlencode

from tests.costsvc.opencost_clients import axios_query

QUOTE, ESCAPED = '"', '\\"'
READS = ("allocation", "assets", "suggest", "configs", "none")
Filters = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Step:
    source: str  # file:line in the client's source
    path: str  # as the client sends it (under /model)
    query: str  # as the client encodes it
    reads: str  # one of READS
    filters: Filters = ()  # the allocation filter sent (the money check's)
    needed: bool = True  # False: the client absorbs a failure (the source says how)
    clicks: str = ""  # the row of the previous answer clicked to send it


def ui_allocation(
    source: str,
    window: str,
    aggregate: str,
    accumulate: object = None,
    filters: Filters = (),
    include_idle: bool = True,
    metrics: str = "",
    clicks: str = "",
) -> Step:
    """``services/allocation.ts:90-109`` ``_doFetch``: window, aggregate, includeIdle, metrics
    (when given), accumulate (a bool, or a non-empty string), filter (``lib/legacy-util.ts:266``
    ``parseFilters``: ``prop:"value"`` joined with ``+``, duplicates once, ``"`` escaped)."""
    params: dict[str, object] = {"window": window, "aggregate": aggregate}
    params["includeIdle"] = include_idle
    if metrics:
        params["metrics"] = metrics
    if isinstance(accumulate, bool) or accumulate:
        params["accumulate"] = accumulate
    if filters:
        escaped = (f'{p}:"{v.replace(QUOTE, ESCAPED)}"' for p, v in filters)
        params["filter"] = "+".join(dict.fromkeys(escaped))
    path = "/model/allocation/compute"
    return Step(source, path, axios_query(params), "allocation", filters, clicks=clicks)


def ui_assets(
    source: str, window: str, aggregate: str = "assetType", filters: Filters = ()
) -> Step:
    """``services/assets.ts:64-88``: window, aggregate, includeIdle, accumulate, step (defaults
    true, true, ``1d``), filter (when the report has one, ``parseFilters``)."""
    params: dict[str, object] = {"window": window, "aggregate": aggregate, "includeIdle": True}
    params |= {"accumulate": True, "step": "1d"}
    if filters:
        params["filter"] = "+".join(f'{p}:"{v}"' for p, v in filters)
    return Step(source, "/model/assets", axios_query(params), "assets", filters)


def ui_suggest(
    source: str,
    window: str,
    field: str,
    search: str = "",
    filters: Filters = (),
    layer: str = "allocation",
) -> Step:
    """``services/report-filter-autocomplete.ts:99-110``: window, field (its alias resolved),
    limit 25, search (when typed), filter (the report's other filters), to the layer's
    endpoint (``:5-9``: ``/allocation/autocomplete``, ``/assets/autocomplete``)."""
    params: dict[str, object] = {"window": window, "field": field, "limit": 25}
    if search:
        params["search"] = search
    if filters:
        params["filter"] = "+".join(f'{p}:"{v}"' for p, v in filters)
    path = f"/model/{layer}/autocomplete"
    return Step(source, path, axios_query(params), "suggest", filters)


def summary_cards_other_halves(window: str) -> list[Step]:
    """The summary cards' cloud-bill and external-cost requests, beside the allocation one
    (``components/cost-summary-cards.tsx:100-120``, ``Promise.allSettled``: a failure counts
    0, ``:142-156``); gpu-costsvc keeps neither, the proxy answers 404."""
    cloud = axios_query(
        {
            "window": window,
            "aggregate": "provider",
            "costMetric": "AmortizedNetCost",
            "filter": "",
            "limit": 1000,
        }
    )
    src = "services/cloud-cost.ts:86-90"
    steps = [Step(src, f"/model/cloudCost/view/{v}", cloud, "none", needed=False) for v in VIEWS]
    steps.append(Step(src, "/model/cloudCost/status", "", "none", needed=False))
    external = axios_query(
        {
            "window": window,
            "aggregate": "domain",
            "costType": "blended",
            "filter": "",
            "sortBy": "cost",
            "sortDirection": "desc",
        }
    )
    src = "services/external-costs.ts:42-50"
    steps.append(Step(src, "/model/customCost/total", external, "none", needed=False))
    return steps


VIEWS = ("table", "totals", "graph")
DRILL = (("namespace", "ml"), ("controllerKind", "deployment"), ("controllerName", "gen-server"))


def dashboard() -> list[Step]:
    """The new allocation page (``routes/dashboard.tsx``): its summary cards, chart and table
    with the shared filters (``components/scoped-views.tsx:36-42``: 7d, namespace, accumulate
    ``day``, idle included); a window, an aggregate, the table's drill-down (``components/
    cost-allocation-table.tsx:240-281``: namespace -> controllerKind -> controller -> pod ->
    container; a controller row ``kind:name`` adds the kind only when no kind filter is
    there), back to the top, the idle toggle and the accumulate menu (``scoped-views.tsx:248``,
    ``types/report.ts:33-41``)."""
    table = "components/cost-allocation-table.tsx:201-209"
    steps = [ui_allocation("components/cost-summary-cards.tsx:101-105", "7d", "namespace", "day")]
    steps += summary_cards_other_halves("7d")
    steps.append(ui_allocation(table, "14d", "namespace", "day"))
    steps += summary_cards_other_halves("14d")
    steps += [ui_allocation(table, "14d", a, "day") for a in ("node", "controller", "namespace")]
    drill = "components/cost-allocation-table.tsx:254-281"
    steps += [
        ui_allocation(drill, "14d", "controllerKind", "day", DRILL[:1], clicks="ml"),
        ui_allocation(drill, "14d", "controller", "day", DRILL[:2], clicks="deployment"),
        ui_allocation(drill, "14d", "pod", "day", DRILL, clicks="deployment:gen-server"),
        ui_allocation(drill, "14d", "container", "day", (*DRILL, ("pod", "g")), clicks="g"),
    ]
    top = "components/cost-allocation-table.tsx:285-291"
    steps.append(ui_allocation(top, "14d", "namespace", "day"))
    steps.append(ui_allocation(table, "14d", "namespace", "day", include_idle=False))
    steps += [ui_allocation(table, "14d", "namespace", a) for a in ("hour", "week", "all")]
    return steps


def legacy() -> list[Step]:
    """The legacy Cost Allocation page (``routes/legacy/allocation.tsx``): its defaults
    (``:96-98``: 7d, namespace, ``acc`` absent = false, a bool sent; idle unset = true,
    ``services/allocation.ts:90``), "Entire window" (``:379-381``), a window (``:365-368``),
    the drill-down (``:278-323``), the breadcrumb's top (``:254-259``), the idle box
    (``:330-334``) and an aggregate (``:371-376``, the filter dropped)."""
    page = "routes/legacy/allocation.tsx:199-203"
    drill = "routes/legacy/allocation.tsx:278-323"
    return [
        ui_allocation(page, "7d", "namespace", False),
        ui_allocation(page, "7d", "namespace", True),
        ui_allocation(page, "14d", "namespace", True),
        ui_allocation(drill, "14d", "controllerKind", True, DRILL[:1], clicks="ml"),
        ui_allocation(drill, "14d", "controller", True, DRILL[:2], clicks="deployment"),
        ui_allocation(drill, "14d", "pod", True, DRILL, clicks="deployment:gen-server"),
        ui_allocation(drill, "14d", "container", True, (*DRILL, ("pod", "g")), clicks="g"),
        ui_allocation("routes/legacy/allocation.tsx:254-259", "14d", "namespace", True),
        ui_allocation(page, "14d", "namespace", True, include_idle=False),
        ui_allocation(page, "14d", "controller", False, include_idle=False),
    ]


def day_range(now: datetime, days_back: int, days: int) -> str:
    """``lib/report-window-range.ts:11-54``: UTC days ``[00:00:00, 23:59:59]`` as
    ``start,end`` (``getYesterdayUtcRange``: back 1, 1 day; ``getLastNDaysUtcInclusive(n)``:
    back 0, n days)."""
    last = now.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=days_back)
    first = last - timedelta(days=days - 1)
    end = last + timedelta(hours=23, minutes=59, seconds=59)
    return f"{first:%Y-%m-%dT%H:%M:%SZ},{end:%Y-%m-%dT%H:%M:%SZ}"


def reports(now: datetime) -> list[Step]:
    """The report builder (``routes/report-builder.tsx:53`` ``runReport``): a new allocation
    report (``types/report.ts:214-222``: yesterday, accumulate ``day``, idle, total cost by
    namespace; ``services/report-query.ts:380-394``, ``metrics`` the measures), the "Last 14
    days" preset (``lib/report-window-range.ts:78``), a namespace filter typed with the
    suggestions (``components/report-filter-value-input.tsx:66-83``: on focus, then per word
    typed, 400 ms apart), run; GPU and total cost by controller with the suggestions for a
    controller filter (``controller`` asked as ``controllerName``,
    ``report-filter-autocomplete.ts:12-18``); then an Infra Assets report
    (``types/report.ts:242-248``, ``report-query.ts:492-500``), then filtered on a cluster
    with the suggestions (its filter menu: ``types/report.ts`` ``ASSETS_GROUPING_OPTIONS``)."""
    yesterday, last14 = day_range(now, 1, 1), day_range(now, 0, 14)
    run = "services/report-query.ts:389-394"
    typed = "components/report-filter-value-input.tsx:76-83"
    ml = (("namespace", "ml"),)
    return [
        ui_allocation(run, yesterday, "namespace", "day", metrics="totalCost"),
        ui_allocation(run, last14, "namespace", "day", metrics="totalCost"),
        ui_suggest(typed, last14, "namespace"),
        ui_suggest(typed, last14, "namespace", "m"),
        ui_allocation(run, last14, "namespace", "day", ml, metrics="totalCost"),
        ui_allocation(run, last14, "controller", "all", ml, metrics="gpuCost,totalCost"),
        ui_suggest(typed, last14, "controllerName", "", ml),
        ui_assets("services/report-query.ts:496-500", last14),
        ui_suggest(typed, last14, "cluster", layer="assets"),
        ui_assets("services/report-query.ts:496-500", last14, filters=(("cluster", "c2"),)),
    ]


def assets_page() -> list[Step]:
    """The Infra Assets page (``components/assets-visualization.tsx:66-73``, its defaults
    ``components/scoped-views.tsx:87-92``: 7d, assetType), then Last 14 days."""
    src = "components/assets-visualization.tsx:66-73"
    return [ui_assets(src, "7d"), ui_assets(src, "14d")]


KUBECTL = {  # pkg/cmd/cost.go, label.go: the aggregation each command asks
    "namespace": "cluster,namespace",
    "deployment": "cluster,namespace,deployment",
    "controller": "cluster,namespace,controller",
    "pod": "cluster,namespace,pod",
    "label": "cluster,label:app",
}


SOURCES = {  # the command's file, its currency request's lines, its allocation request's
    "aggregated": ("pkg/cmd/aggregatedcommandbuilder.go", "64-71", "73-84"),
    "label": ("pkg/cmd/label.go", "72-79", "81-90"),
}


def kubectl_cost() -> list[Step]:
    """``kubectl cost <command> --window W [-n NS]`` with its default ``--allocation-path
    /model/allocation`` (``pkg/query/options.go:110``): the currency first
    (``pkg/cmd/aggregatedcommandbuilder.go:64-71``, ``label.go:72-79``: a failure is logged
    and "" shown), then the allocations (``aggregatedcommandbuilder.go:73-84``: accumulate,
    includeIdle and idle from ``--idle``, default true, filterNamespaces; ``label.go:81-90``
    without filterNamespaces). OpenCost's handler reads ``filter`` only
    (opencost/opencost ``pkg/costmodel/handlers.go:31``; ``filterNamespaces`` is Kubecost's v1
    form): ``-n ml`` changes nothing there, nor here, so its money is every namespace's.
    ``--opencost`` asks ``/allocation/compute`` instead (``options.go:22,64-68``); the
    currency stays at ``model/getConfigs`` (``configapi.go:39``)."""
    steps = []
    for command, aggregate, window, namespace, path in (
        ("namespace", KUBECTL["namespace"], "1d", "", "/model/allocation"),
        ("namespace", KUBECTL["namespace"], "14d", "", "/model/allocation"),
        ("namespace", KUBECTL["namespace"], "14d", "", "/allocation/compute"),  # --opencost
        ("deployment", KUBECTL["deployment"], "14d", "ml", "/model/allocation"),
        ("controller", KUBECTL["controller"], "7d", "", "/model/allocation"),
        ("pod", KUBECTL["pod"], "14d", "", "/model/allocation"),
        ("label", KUBECTL["label"], "14d", None, "/model/allocation"),
    ):
        src, currency, ask = SOURCES["label" if command == "label" else "aggregated"]
        steps.append(Step(f"{src}:{currency}", "/model/getConfigs", "", "configs"))
        params = {"window": window, "aggregate": aggregate, "accumulate": "true"}
        params |= {"includeIdle": "true", "idle": "true"}
        if namespace is not None:
            params["filterNamespaces"] = namespace
        query = urlencode(sorted(params.items()))
        steps.append(Step(f"{src}:{ask}", path, query, "allocation"))
    return steps


def sequences(now: datetime) -> dict[str, list[Step]]:
    """Every view's sequence, ``now`` the clock the UI's day ranges are built from."""
    return {
        "dashboard": dashboard(),
        "legacy": legacy(),
        "reports": reports(now),
        "assets": assets_page(),
        "kubectl-cost": kubectl_cost(),
    }
