"""The OpenCost UI's "Infra Assets" page against gpu-costsvc, over real HTTP, on SQLite and
PostgreSQL, with a finance and a team token. The UI's request (opencost/opencost-ui at 5babf86
``app/services/assets.ts`` ``_doFetch``: ``GET ${BASE_URL}/assets`` with ``window``,
``aggregate``, ``includeIdle``, ``accumulate``, ``step``, in that order, axios' encoding; the
page's defaults ``app/components/scoped-views.tsx`` ``DEFAULT_ASSETS_FILTERS``: ``7d``,
``assetType``, accumulate and includeIdle true; ``step`` ``1d``) and what it reads of the answer
(``app/lib/assets-api.ts`` ``parseAssetsResponse``: ``data`` one map, each asset's ``type``,
``totalCost``, ``properties``, ``end``). OpenCost's answer: ``pkg/costmodel/handlers.go``
``ComputeAssetsHandler`` (``WrapData`` of one ``AssetSet``), ``core/pkg/opencost/asset_json.go``
``Node.MarshalJSON`` (the fields and their order)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from costsvc.db.models import GpuPresence
from tests.costsvc.allocation_checks import allocation_api, decimals
from tests.costsvc.apiserver import Api
from tests.costsvc.history import H100
from tests.costsvc.opencost_clients import axios_query

api = pytest.fixture(allocation_api, scope="module", params=["sqlite", "postgresql"], name="api")
WINDOW = "14d"  # the clock is 2026-11-20 12:00: every hour of history.py
NODE_FIELDS = [
    "type",
    "properties",
    "labels",
    "window",
    "start",
    "end",
    "minutes",
    "nodeType",
    "cpuCores",
    "ramBytes",
    "cpuCoreHours",
    "ramByteHours",
    "GPUHours",
    "cpuBreakdown",
    "ramBreakdown",
    "preemptible",
    "discount",
    "cpuCost",
    "gpuCost",
    "gpuCount",
    "ramCost",
    "adjustment",
    "totalCost",
]


def ui_assets(api: Api, who: str, window: str = WINDOW) -> Any:
    """The UI's request, its parameters in _doFetch's order."""
    params = {
        "window": window,
        "aggregate": "assetType",
        "includeIdle": True,
        "accumulate": True,
        "step": "1d",
    }
    return api.http.get(f"/assets?{axios_query(params)}", headers=api.auth(who))


def gpus_by_hand(api: Api) -> dict[tuple[str, str], list[tuple[int, int, int]]]:
    """(cluster, node) -> each GPU-hour's (price, µs present, cost) as the ingest kept it."""
    engine = create_engine(api.db_url)
    g = GpuPresence
    out: dict[tuple[str, str], list[tuple[int, int, int]]] = {}
    with engine.connect() as conn:
        for r in conn.execute(select(g.cluster, g.node, g.price, g.present_us, g.cost)):
            out.setdefault((r[0], r[1]), []).append((r[2], r[3], r[4]))
    engine.dispose()
    return out


def test_the_infra_assets_page_gets_the_gpu_nodes_at_the_chargeback_s_cost(api: Api) -> None:
    r = ui_assets(api, "finance")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    answer = decimals(r.text)
    assert list(answer) == ["code", "status", "data"] and answer["code"] == 200
    assets: dict[str, Any] = answer["data"]
    by_hand = gpus_by_hand(api)
    assert by_hand and len(assets) == len(by_hand)
    for key, asset in assets.items():
        assert list(asset) == NODE_FIELDS
        props = asset["properties"]
        cluster, node = props["cluster"], props["name"]
        # asset.go key: provider/account/project/category/cluster/type/service/providerID/name
        parts = ["", "", "", "Compute", cluster, "Node", "Kubernetes", "", node]
        assert key == "/".join(p or "__undefined__" for p in parts)
        assert asset["type"] == "Node" and props["category"] == "Compute"
        hours = by_hand[(cluster, node)]
        # each GPU-hour's charge is its price x the time present (to the micro-unit), and the
        # node's gpuCost is their sum
        for price, present_us, cost in hours:
            assert abs(Decimal(price) * present_us / 3_600_000_000 - cost) <= 1
        assert asset["gpuCost"] == asset["totalCost"] == Decimal(sum(c for *_, c in hours)) / 10**6
        gpu_hours = Decimal(sum(us for _, us, _ in hours)) / 3_600_000_000
        assert asset["GPUHours"] == gpu_hours.quantize(Decimal("0.000001"))
        assert asset["gpuCount"] > 0 and asset["minutes"] > 0
        assert asset["cpuCost"] == asset["ramCost"] == asset["cpuCores"] == 0
        assert asset["cpuBreakdown"] is None  # unknown: the UI shows no utilisation
        datetime.fromisoformat(asset["end"])  # the UI's lastModified
    # the fleet's total, as /v1/costs has it, by hand: Σ over the GPUs = every team's + idle
    rows = api.get("/v1/costs", window=WINDOW, group_by="team").json()["rows"]
    fleet = sum(Decimal(row["total_cost"]) for row in rows)
    assert fleet > 0
    assert sum(a["totalCost"] for a in assets.values()) == fleet


def test_a_window_with_no_gpu_is_an_empty_set(api: Api) -> None:
    r = ui_assets(api, "finance", "2026-01-01T00:00:00Z,2026-01-02T00:00:00Z")
    assert r.status_code == 200, r.text
    assert r.json() == {"code": 200, "status": "success", "data": {}}


@pytest.mark.parametrize("who", ["team:nlp", "metrics"])
def test_a_team_token_is_refused_a_node_s_cost_is_every_team_s(api: Api, who: str) -> None:
    r = ui_assets(api, who)
    assert r.status_code == 403, r.text
    assert api.http.get("/assets", params={"window": WINDOW}).status_code == 401


def test_a_bad_window_is_a_plain_400(api: Api) -> None:
    r = api.get("/assets", window="nonsense")
    assert r.status_code == 400 and r.headers["content-type"].startswith("text/plain")
    assert r.text.startswith("Invalid 'window' parameter")


def filtered(api: Api, text: str) -> dict[str, Any]:
    r = api.get("/assets", window=WINDOW, filter=text)
    assert r.status_code == 200, (text, r.text)
    data: dict[str, Any] = decimals(r.text)["data"]
    return data


def test_the_asset_filter_keeps_the_nodes_it_matches(api: Api) -> None:
    """OpenCost's asset filter fields that apply (costsvc/opencost/assets.py): each answer the
    nodes of gpus_by_hand whose field matches, and a cluster's nodes cost what /v1/costs
    says that cluster cost."""
    nodes = set(gpus_by_hand(api))  # (cluster, node)
    clusters = {c for c, _ in nodes}
    assert len(clusters) == 2 and len(nodes) > 2  # c1 and c2: the filters can tell them apart
    everything = filtered(api, "")
    assert filtered(api, 'assetType:"node"') == everything  # the type in lower case
    assert filtered(api, 'assetType:"Node"') == {}  # compared as OpenCost compares it
    assert filtered(api, 'category!:"Compute"') == {} and filtered(api, 'service:"Kubernetes"')
    assert filtered(api, 'cluster:"__unallocated__"') == {}  # every node has its cluster
    rows = api.get("/v1/costs", window=WINDOW, group_by="cluster").json()["rows"]
    for cluster in clusters:
        got = filtered(api, f'cluster:"{cluster}"')
        assert {(a["properties"]["cluster"], a["properties"]["name"]) for a in got.values()} == {
            n for n in nodes if n[0] == cluster
        }
        [row] = [r for r in rows if r["group"]["cluster"] == cluster]
        assert sum(a["totalCost"] for a in got.values()) == Decimal(row["total_cost"])
    cluster, node = sorted(nodes)[0]
    one = filtered(api, f'cluster:"{cluster}"+name:"{node}"')
    assert [a["properties"]["name"] for a in one.values()] == [node]
    # label[<key>], the key sanitised as OpenCost's PrometheusKeySanitizePass
    h100 = filtered(api, f'label[nvidia.com/gpu.product]~:"{H100[:11]}"')
    assert h100 and set(h100) == {
        k for k, a in everything.items() if H100 in a["labels"].get("nvidia_com_gpu_product", "")
    }
    either = filtered(api, f'name:"{node}"|cluster!:"{cluster}"')
    assert set(either) == set(one) | {
        k for k, a in everything.items() if a["properties"]["cluster"] != cluster
    }


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('provider:"AWS"', "field 'provider' does not apply"),
        ('team:"nlp"', "field 'team' does not apply"),
        ('account:"1"+cluster:"c1"', "field 'account' does not apply"),
        ('label:"x"', "label without a key"),
        ('namespace:"ml"', "expect filter field"),
        ('cluster:"c1', "unterminated string"),
    ],
)
def test_an_asset_filter_field_that_does_not_apply_is_a_400_naming_it(
    api: Api, text: str, says: str
) -> None:
    r = api.get("/assets", window=WINDOW, filter=text)
    assert r.status_code == 400 and r.headers["content-type"].startswith("text/plain")
    assert r.text.startswith("Invalid filter:") and says in r.text, r.text


def suggest(api: Api, who: str = "finance", **params: str) -> Any:
    """The report builder's request (opencost-ui report-filter-autocomplete.ts:99-110)."""
    return api.get("/assets/autocomplete", who, window=WINDOW, limit="25", **params)


def test_the_report_builder_s_asset_suggestions(api: Api) -> None:
    """What a filter on each field would match, as the filter reads it: the clusters and
    nodes of gpus_by_hand, ``node`` for the type (``type`` is how the UI asks ``assetType``),
    nothing for the fields these assets lack; ``search``, ``filter`` and ``limit`` narrow it."""
    nodes = set(gpus_by_hand(api))
    clusters = sorted({c for c, _ in nodes})

    def values(**params: str) -> list[str]:
        r = suggest(api, **params)
        assert r.status_code == 200, r.text
        body = r.json()
        assert list(body) == ["code", "data"] and body["code"] == 200
        got: list[str] = body["data"]["data"]  # parseSuggestionList's data.data
        return got

    assert values(field="cluster") == clusters
    assert values(field="type") == values(field="assetType") == ["node"]
    assert values(field="category") == ["Compute"]
    assert values(field="name") == sorted({n for _, n in nodes}, key=str.encode)
    assert values(field="provider") == values(field="providerID") == values(field="account") == []
    assert values(field="cluster", search=clusters[1].upper()) == [clusters[1]]
    assert values(field="cluster", filter=f'cluster!:"{clusters[0]}"') == clusters[1:]
    assert values(field="name", filter=f'cluster:"{clusters[0]}"') == sorted(
        {n for c, n in nodes if c == clusters[0]}, key=str.encode
    )
    r = api.get("/assets/autocomplete", window=WINDOW, field="name", limit="1")
    assert len(r.json()["data"]["data"]) == 1


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"field": "namespace"}, "invalid field: unrecognized field: namespace"),
        ({}, "invalid field: field is required"),
        ({"field": "cluster", "limit": "1001"}, "limit of 1000"),
        ({"field": "cluster", "filter": 'provider:"x"'}, "field 'provider' does not apply"),
        ({"field": "cluster", "window": "soon"}, "Invalid 'window' parameter"),
    ],
)
def test_a_bad_suggestion_request_is_a_plain_400(
    api: Api, params: dict[str, str], says: str
) -> None:
    r = api.get("/assets/autocomplete", **{"window": WINDOW, **params})
    assert r.status_code == 400 and r.headers["content-type"].startswith("text/plain")
    assert says in r.text, r.text


def test_a_team_token_gets_no_asset_suggestions(api: Api) -> None:
    assert suggest(api, "team:nlp", field="cluster").status_code == 403
    assert api.http.get("/assets/autocomplete", params={"field": "cluster"}).status_code == 401
