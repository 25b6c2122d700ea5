"""What tests/costsvc/test_allocation_api.py and test_allocation_clients.py ask and check
each ``/allocation`` answer against: the cost service they ask (:func:`allocation_api`),
OpenCost's shape (test_allocation_api.py's docstring cites where each part comes from), and
what they read and write beside the API: the owner and label histories, the chargeback's sums,
the fleet's cost, the answers of ``/v1/costs`` an OpenCost client's money must equal."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select

from costsvc.advice.repository import OwnerHistory
from costsvc.db.migrate import upgrade
from costsvc.db.models import Chargeback, GpuPresence
from costsvc.labels.history import LabelHistory
from costsvc.opencost.aggregates import opencost_kind
from costsvc.rules.chargeback import IDLE
from tests.costsvc.apiserver import NOV20, Api, Clock, serve
from tests.costsvc.conftest import fresh_database
from tests.costsvc.history import ELEVENTH, FIFTEENTH, HOUR, HOUR2, HOUR3, MODEL, ingest_with
from tests.costsvc.opencost_clients import UI_PATH, axios_query
from tests.prom import Prometheus

FIELDS = [
    "name",
    "properties",
    "window",
    "start",
    "end",
    "minutes",
    "cpuCores",
    "cpuCoreRequestAverage",
    "cpuCoreLimitAverage",
    "cpuCoreUsageAverage",
    "cpuCoreHours",
    "cpuCost",
    "cpuCostAdjustment",
    "cpuCostIdle",
    "cpuEfficiency",
    "gpuCount",
    "gpuHours",
    "gpuCost",
    "gpuCostAdjustment",
    "gpuCostIdle",
    "gpuEfficiency",
    "networkTransferBytes",
    "networkReceiveBytes",
    "networkCost",
    "networkCrossZoneCost",
    "networkCrossRegionCost",
    "networkInternetCost",
    "networkCostAdjustment",
    "loadBalancerCost",
    "loadBalancerCostAdjustment",
    "pvBytes",
    "pvByteHours",
    "pvCost",
    "pvs",
    "pvCostAdjustment",
    "ramBytes",
    "ramByteRequestAverage",
    "ramByteLimitAverage",
    "ramByteUsageAverage",
    "ramByteHours",
    "ramCost",
    "ramCostAdjustment",
    "ramCostIdle",
    "ramEfficiency",
    "externalCost",
    "sharedCost",
    "totalCost",
    "totalEfficiency",
    "proportionalAssetResourceCosts",
    "lbAllocations",
    "sharedCostBreakdown",
    "gpuAllocation",
]
NOT_NUMBERS = {
    "name",
    "properties",
    "window",
    "start",
    "end",
    "pvs",
    "proportionalAssetResourceCosts",
    "lbAllocations",
    "sharedCostBreakdown",
    "gpuAllocation",
}
CPU_RAM_AND_THE_REST = [
    f
    for f in FIELDS
    if f not in NOT_NUMBERS
    and not f.startswith("gpu")
    and f not in ("minutes", "totalCost", "totalEfficiency")
]
RFC3339 = "%Y-%m-%dT%H:%M:%SZ"
EFFICIENCIES = ("gpuEfficiency", "totalEfficiency")  # null where nothing was measured


def decimals(text: str) -> Any:
    """The answer with its numbers as Decimal: exact, as written."""
    return json.loads(text, parse_float=Decimal, parse_int=Decimal)


def check_shape(answer: dict[str, Any]) -> None:
    """OpenCost's Response and AllocationJSON, field by field."""
    assert list(answer) == ["code", "status", "data"]
    assert answer["code"] == 200 and answer["status"] == "success"
    assert isinstance(answer["data"], list)
    for allocation_set in answer["data"]:
        assert isinstance(allocation_set, dict)
        for name, a in allocation_set.items():
            assert list(a) == FIELDS, name
            assert a["name"] == name
            assert isinstance(a["properties"], dict)
            assert list(a["window"]) == ["start", "end"]
            for t in (a["start"], a["end"], a["window"]["start"], a["window"]["end"]):
                datetime.strptime(t, RFC3339)  # RFC 3339, UTC
            for f in FIELDS:
                if f in NOT_NUMBERS or (f in EFFICIENCIES and a[f] is None):
                    continue
                assert isinstance(a[f], Decimal), (name, f, a[f])
            for f in CPU_RAM_AND_THE_REST:
                assert a[f] == 0, f  # outside our scope: zero, as documented
            assert a["pvs"] is None and a["lbAllocations"] is None
            assert a["totalCost"] == a["gpuCost"]
            # GPU-aware: the efficiency of what is priced (GPUs), unknown where unmeasured
            assert a["totalEfficiency"] == a["gpuEfficiency"]
            if name == IDLE:
                assert a["gpuAllocation"] is None
                continue
            g = a["gpuAllocation"]
            assert list(g) == ["gpuRequestAverage", "gpuUsageAverage", "isGPUShared"]
            assert isinstance(g["gpuRequestAverage"], Decimal)
            assert g["gpuUsageAverage"] is None or isinstance(g["gpuUsageAverage"], Decimal)
            assert isinstance(g["isGPUShared"], bool)
            assert g["gpuRequestAverage"] == a["gpuCount"]


def micro(value: Decimal) -> int:
    return int(value * 1_000_000)


def owner_history(url: str) -> None:
    """ml/g's owners as the Kubernetes watcher keeps them (costsvc/advice/kube_owners.py), before
    the ingest: a ReplicaSet of the Deployment gen-server. kube-state-metrics says a StatefulSet
    (history.py): the API's history wins."""
    upgrade(url)
    engine = create_engine(url)
    owners = OwnerHistory(engine, "c1")
    since = datetime(2026, 11, 10, 4, tzinfo=UTC)
    owners.observe_pod("u-g", "ml", "g", ("ReplicaSet", "gen-server-5f7c9"), since, since)
    owners.observe_controller(
        "ml", "ReplicaSet", "gen-server-5f7c9", ("Deployment", "gen-server"), since
    )
    engine.dispose()


def label_history(url: str) -> None:
    """Pod labels as the Kubernetes watcher keeps them, written after the ingest (the money
    does not change): ml/p app=trainer, relabelled app=trainer2 at 05:30; ml/g app=gen and
    app.kubernetes.io/name=gen-x; search/a app=search; search/b none, its namespace
    app=searchspace."""
    engine = create_engine(url)
    history = LabelHistory(engine, "c1")
    since = datetime(2026, 11, 10, 4, tzinfo=UTC)
    history.observe_pod("u-p", "ml", "p", {"app": "trainer"}, since, since)
    history.observe_pod("u-p", "ml", "p", {"app": "trainer2"}, HOUR + timedelta(minutes=30))
    history.observe_pod("u-g", "ml", "g", {"app": "gen", "app.kubernetes.io/name": "gen-x"}, since)
    history.observe_pod("u-a", "search", "a", {"app": "search"}, since)
    history.observe_pod("u-b", "search", "b", {"team": "ignored-here"}, since)
    history.observe_namespace("search", {"app": "searchspace"}, since)
    engine.dispose()


def get(api: Api, who: str = "finance", **params: Any) -> Any:
    r = api.get("/allocation", who=who, **params)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    answer = decimals(r.text)
    check_shape(answer)
    return answer


def sums(url: str, column: Any, start: datetime, end: datetime) -> dict[str, tuple[int, ...]]:
    """(allocated, used, waste, idle, gpu_hours) per value of ``column``, straight from the
    chargeback table."""
    engine = create_engine(url)
    c = Chargeback
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                column,
                func.sum(c.allocated),
                func.sum(c.used),
                func.sum(c.waste),
                func.sum(c.idle),
                func.sum(c.gpu_hours),
            )
            .where(c.hour >= start, c.hour < end)
            .group_by(column)
        ).all()
    engine.dispose()
    return {r[0]: tuple(int(v) for v in r[1:]) for r in rows}


def fleet(url: str, start: datetime, end: datetime) -> int:
    engine = create_engine(url)
    with engine.connect() as conn:
        total = conn.execute(
            select(func.sum(GpuPresence.cost)).where(
                GpuPresence.hour >= start, GpuPresence.hour < end
            )
        ).scalar()
    engine.dispose()
    return int(total or 0)


def v1_hours(api: Api, start: str, end: str) -> list[dict[str, Any]]:
    """/v1/costs by hour and by every dimension a client filters on."""
    r = api.get(
        "/v1/costs",
        start=start,
        end=end,
        step="hour",
        group_by="namespace,controller_kind,controller,pod,container",
    )
    assert r.status_code == 200, r.text
    rows: list[dict[str, Any]] = r.json()["rows"]
    return rows


def matches(group: dict[str, str], filters: list[tuple[str, str]]) -> bool:
    """An OpenCost UI filter (prop:"value" joined with +) against /v1/costs' groups."""
    values = {
        "namespace": group["namespace"],
        "pod": group["pod"],
        "container": group["container"],
        "controllerName": group["controller"],
        "controllerKind": opencost_kind(group["controller_kind"]) if group["controller"] else "",
    }
    return all(values[p] == v for p, v in filters)


def assert_money_as_v1(
    api: Api, answer: dict[str, Any], filters: list[tuple[str, str]], idle: bool
) -> None:
    """Each set's money is /v1/costs' for the same hours: Σ allocated (and, with idle and no
    filter, the whole fleet's cost)."""
    for one in answer["data"]:
        if not one:
            continue
        window = next(iter(one.values()))["window"]
        rows = v1_hours(api, window["start"], window["end"])
        allocated = sum(
            micro(Decimal(r["allocated_cost"])) for r in rows if matches(r["group"], filters)
        )
        got = sum(micro(a["gpuCost"] - a["gpuCostIdle"]) for n, a in one.items() if n != IDLE)
        assert got == allocated, (window, filters)
        if idle and not filters:
            total = sum(micro(Decimal(r["total_cost"])) for r in rows)
            assert sum(micro(a["totalCost"]) for a in one.values()) == total, window


def ui_get(api: Api, params: dict[str, object]) -> dict[str, Any]:
    r = api.http.get(f"{UI_PATH}?{axios_query(params)}", headers=api.auth("finance"))
    assert r.status_code == 200, (params, r.text)
    answer = decimals(r.text)
    check_shape(answer)
    for one in answer["data"]:  # what rangeToCumulative / the table read
        for a in one.values():
            assert a["minutes"] >= 0 and a["window"]["start"] and a["name"] is not None
    return answer


HOURS = [HOUR, HOUR2, HOUR3, ELEVENTH, FIFTEENTH, FIFTEENTH + timedelta(hours=1)]


def allocation_api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, prometheus: Prometheus
) -> Iterator[Api]:
    """The allocation tests' ``api`` fixture: history.py's :data:`HOURS` ingested into a fresh
    database of the kind ``request.param`` names, the Kubernetes owners written before and the
    label history after, served with the clock at NOV20 and tokens for teams nlp and search."""
    with fresh_database(request.param, request, tmp_path_factory.mktemp("oc")) as url:
        owner_history(url)
        ingest_with(prometheus.url, url, MODEL, HOURS)
        label_history(url)
        with serve(url, Clock(NOV20), ["nlp", "search"]) as running:
            yield running
