"""The OpenCost UI's and kubectl-cost's request sequences (tests/costsvc/opencost_sequences.py,
each request cited to its source), replayed in order through ``gpu-costsvc opencost-proxy`` in
front of the API, on SQLite and PostgreSQL, with a finance token and with a team token in the
proxy's token file. Each answer is read as its client reads it: the fields the client's code
dereferences exist with the types it uses, the money equals ``/v1/costs`` (the same token's)
for the same hours, and a team token's answers hold its team only (``/assets`` is refused it:
the page shows its "Could not load assets", docs/api.md). A request the sequence needs that is
not served fails the replay, naming its source (shown on a proxy with a path removed)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from costsvc.kit.times import hour_floor, iso_z, parse_utc
from costsvc.opencost import proxy as proxy_module
from costsvc.rules.chargeback import IDLE
from tests.costsvc.allocation_checks import (
    HOURS,
    decimals,
    label_history,
    matches,
    micro,
    owner_history,
)
from tests.costsvc.apiserver import NOV20, Api, Clock, serve
from tests.costsvc.conftest import fresh_database
from tests.costsvc.history import H100, MODEL, ingest_with
from tests.costsvc.opencost_sequences import Step, sequences
from tests.prom import Prometheus, free_port

WHO = ("finance", "team:nlp")
COST_MODEL = (
    'versions: [{effective_from: "2026-11-01T00:00:00Z", '
    f'prices: [{{model: "{H100}", hourly: "2.50"}}]}}]\n'
)  # history.py's MODEL, as a file: /getConfigs reads the served model's currency
# what the UI's code dereferences of an allocation, as a number (lib/legacy-util.ts:17-36
# rangeToCumulative, services/report-query.ts:88-90 the measures, the tables' columns)
NUMBERS = (
    "minutes",
    "cpuCost",
    "gpuCost",
    "ramCost",
    "pvCost",
    "networkCost",
    "sharedCost",
    "externalCost",
    "totalCost",
    "cpuCoreUsageAverage",
    "cpuCoreRequestAverage",
    "ramByteUsageAverage",
    "ramByteRequestAverage",
    "cpuEfficiency",
    "ramEfficiency",
)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    prometheus: Prometheus,
) -> Iterator[Api]:
    """tests/costsvc/allocation_checks.py's history, served with its cost model as a file."""
    tmp = tmp_path_factory.mktemp("replay")
    model = tmp / "cost.yaml"
    model.write_text(COST_MODEL)
    with fresh_database(request.param, request, tmp) as url:
        owner_history(url)
        ingest_with(prometheus.url, url, MODEL, HOURS)
        label_history(url)
        with serve(url, Clock(NOV20), ["nlp", "search"], cost_model=model) as running:
            yield running


@contextmanager
def running_proxy(api: Api, token_file: Path) -> Iterator[httpx.Client]:
    """``gpu-costsvc opencost-proxy`` (costsvc/opencost/proxy.py) on loopback in front of
    ``api``, a client of it."""
    port = free_port()
    hosts = proxy_module.own_hosts("127.0.0.1", port, [])
    app = proxy_module.build_app(api.base, proxy_module.TokenFile(token_file), hosts)
    server = uvicorn.Server(uvicorn.Config(app, "127.0.0.1", port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:  # uvicorn sets it once listening
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.01)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            yield client
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("proxy") / "token"


@pytest.fixture(scope="module")
def proxy(api: Api, token_file: Path) -> Iterator[httpx.Client]:
    token_file.write_text(api.tokens["finance"] + "\n")
    with running_proxy(api, token_file) as client:
        yield client


def hour_ceil(text: str) -> str:
    t = parse_utc(text)
    return iso_z(t if t == hour_floor(t) else hour_floor(t) + timedelta(hours=1))


def v1_hours(api: Api, who: str, start: str, end: str) -> list[dict[str, Any]]:
    """/v1/costs by hour and by every dimension a client filters on, as ``who`` sees it, for
    the hours an OpenCost window counts: those starting in [start, end)
    (costsvc/opencost/queries.py; the report builder's days end at 23:59:59)."""
    group_by = "namespace,controller_kind,controller,pod,container"
    start, end = hour_ceil(start), hour_ceil(end)
    r = api.get("/v1/costs", who, start=start, end=end, step="hour", group_by=group_by)
    assert r.status_code == 200, r.text
    rows: list[dict[str, Any]] = r.json()["rows"]
    return rows


def team_namespaces(api: Api, who: str) -> set[str]:
    rows = api.get("/v1/costs", who, window="30d", group_by="namespace").json()["rows"]
    return {row["group"]["namespace"] for row in rows}


def read_allocation(api: Api, who: str, step: Step, body: Any) -> set[str]:
    """What the allocation pages read (lib/legacy-util.ts, components/cost-allocation-*.tsx,
    services/report-query.ts:396-440), and the money: each set's allocated cost is
    /v1/costs' for its hours and the step's filter; with idle and no filter (finance), its
    Totals row (legacy-util.ts:87-127, Σ totalCost) the fleet's cost. Returns the rows' names."""
    assert body["code"] == 200 and isinstance(body["data"], list)
    idle = "includeIdle=true" in step.query
    mine = team_namespaces(api, who) if who != "finance" else None
    names: set[str] = set()
    for one in body["data"]:
        assert isinstance(one, dict)
        for name, a in one.items():
            assert a["name"] == name and isinstance(name, str)
            for field in NUMBERS:
                assert isinstance(a[field], Decimal), (name, field, a[field])
            assert a["totalEfficiency"] is None or isinstance(a["totalEfficiency"], Decimal)
            assert isinstance(a["window"]["start"], str) and isinstance(a["start"], str)
            assert isinstance(a["properties"], dict)  # legacy/Details.jsx reads cluster, node
            if mine is not None:
                assert a["properties"].get("namespace", next(iter(mine))) in mine, name
                assert name != IDLE or a["totalCost"] == 0, a
            names.add(name)
        if not one:
            continue
        window = next(iter(one.values()))["window"]
        rows = v1_hours(api, who, window["start"], window["end"])
        allocated = sum(
            micro(Decimal(r["allocated_cost"])) for r in rows if matches(r["group"], step.filters)
        )
        got = sum(micro(a["gpuCost"] - a["gpuCostIdle"]) for n, a in one.items() if n != IDLE)
        assert got == allocated, (window, step.filters)
        if idle and not step.filters and mine is None:
            total = sum(micro(Decimal(r["total_cost"])) for r in rows)
            assert sum(micro(a["totalCost"]) for a in one.values()) == total, window
    return names


def read_assets(api: Api, who: str, step: Step, body: Any) -> set[str]:
    """lib/assets-api.ts:61-119 parseAssetsResponse: ``data`` one map; each asset's type,
    totalCost, properties (name, cluster, provider, category), labels, the breakdowns (null or
    an object with ``idle``), preemptible, ``end`` (``new Date(end).toISOString()`` throws on
    a bad date); their sum (report-query.ts:502) the fleet's cost by /v1/costs."""
    data = body["data"]
    assert isinstance(data, dict)
    total = Decimal(0)
    for asset in data.values():
        assert isinstance(asset["type"], str) and isinstance(asset["totalCost"], Decimal)
        props = asset["properties"]
        assert all(isinstance(props.get(k, ""), str) for k in ("name", "cluster", "category"))
        assert isinstance(asset["labels"], dict) and isinstance(asset["preemptible"], Decimal)
        for breakdown in (asset["cpuBreakdown"], asset["ramBreakdown"]):
            assert breakdown is None or isinstance(breakdown.get("idle"), Decimal)
        datetime.fromisoformat(asset["end"])
        total += asset["totalCost"]
    for field, value in step.filters:  # the report's filter: the nodes it keeps, some
        assert data and all(a["properties"][field] == value for a in data.values()), (field, value)
    if data and not step.filters:
        window = next(iter(data.values()))["window"]
        rows = v1_hours(api, who, window["start"], window["end"])
        assert micro(total) == sum(micro(Decimal(r["total_cost"])) for r in rows)
    return set(data)


def read_suggest(api: Api, who: str, step: Step, body: Any) -> set[str]:
    """services/report-filter-autocomplete.ts:69-80 parseSuggestionList: ``data.data``, the
    strings in it. Each is a value of the field among the allocations ``who`` may read in
    the window under the step's filter, and holds what was typed."""
    values = body["data"]["data"]
    assert values and all(isinstance(v, str) for v in values), body
    query = dict(part.split("=", 1) for part in step.query.split("&"))
    field, search = query["field"], query.get("search", "")
    if step.path.endswith("/assets/autocomplete"):  # the Infra Assets report's: its nodes'
        nodes = api.get("/assets", who, window=query["window"]).json()["data"].values()
        assert set(values) == {a["properties"][field] for a in nodes}, values
        return set(values)
    aggregate = {"controllerName": "controller"}.get(field, field)
    params = {"window": query["window"], "aggregate": aggregate, "accumulate": "true"}
    if "filter" in query:
        params["filter"] = "+".join(f'{p}:"{v}"' for p, v in step.filters)
    answer = api.get("/allocation/compute", who, **params).json()["data"]
    names = {n.split(":", 1)[-1] for one in answer for n in one if n != IDLE}
    assert set(values) <= names, (values, names)
    assert all(search.lower() in v.lower() for v in values)
    return set(values)


def read_configs(api: Api, who: str, step: Step, body: Any) -> set[str]:
    """kubectl-cost pkg/query/configapi.go: ``data.currencyCode``, the currency of the money
    it shows: /v1/costs'."""
    currency = body["data"]["currencyCode"]
    rows = api.get("/v1/costs", who, window="30d", group_by="namespace").json()["rows"]
    assert rows and {r["currency"] for r in rows} == {currency}
    return set()


READERS: dict[str, Callable[[Api, str, Step, Any], set[str]]] = {
    "allocation": read_allocation,
    "assets": read_assets,
    "suggest": read_suggest,
    "configs": read_configs,
}


def replay(client: httpx.Client, api: Api, who: str, steps: list[Step]) -> tuple[int, int, int]:
    """Send each request in order as its client does; check each answer as it reads it.
    Returns how many answers were checked, how many were lists (of allocations, assets or
    values) and how many of those held a row."""
    checked, lists, rows, previous = 0, 0, 0, set[str]()
    for step in steps:
        where = f"{step.source}: {step.path}?{step.query}"
        r = client.get(f"{step.path}?{step.query}" if step.query else step.path)
        if not step.needed:  # the client absorbs the failure (the step's source)
            assert r.status_code in (200, 404), (where, r.status_code)
            continue
        checked += 1
        if step.path.startswith("/model/assets") and who != "finance":
            assert r.status_code == 403, (where, r.text)  # a node's cost is every team's
            continue
        assert r.status_code == 200, (where, r.status_code, r.text[:300])
        assert r.headers["content-type"] == "application/json", where
        if step.clicks:
            assert step.clicks in previous, (where, step.clicks, previous)
        previous = READERS[step.reads](api, who, step, decimals(r.text))
        lists += step.reads != "configs"
        rows += bool(previous - {IDLE})
    return checked, lists, rows


@pytest.mark.parametrize("view", ["dashboard", "legacy", "reports", "assets", "kubectl-cost"])
@pytest.mark.parametrize("who", WHO)
def test_the_client_s_sequence_replays(
    api: Api, proxy: httpx.Client, token_file: Path, who: str, view: str
) -> None:
    token_file.write_text(api.tokens[who] + "\n")
    steps = sequences(NOV20)[view]
    checked, lists, rows = replay(proxy, api, who, steps)
    assert checked == len([s for s in steps if s.needed])
    # most lists hold rows (and a drill-down's click is a row of the answer before it)
    assert rows >= lists / 2, (rows, lists)


def test_a_team_sees_less_than_finance(api: Api) -> None:
    """The team checks above can fail: team nlp's namespaces are fewer than the fleet's."""
    assert team_namespaces(api, "team:nlp") < team_namespaces(api, "finance")


@pytest.mark.parametrize(
    ("removed", "view", "stops_at"),
    [
        (
            "/allocation/autocomplete",
            "reports",
            "report-filter-value-input.tsx:76-83: /model/allocation/autocomplete",
        ),
        (
            "/assets/autocomplete",
            "reports",
            "report-filter-value-input.tsx:76-83: /model/assets/autocomplete",
        ),
        ("/assets", "assets", "assets-visualization.tsx:66-73: /model/assets"),
        ("/getConfigs", "kubectl-cost", "aggregatedcommandbuilder.go:64-71: /model/getConfigs"),
        ("/allocation/compute", "dashboard", "cost-summary-cards.tsx:101-105: /model/allocation"),
    ],
)
def test_a_missing_endpoint_fails_the_replay(
    api: Api,
    token_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    removed: str,
    view: str,
    stops_at: str,
) -> None:
    """A proxy without one of the paths a sequence needs (planted): the replay stops at the
    first request for it, named by its source line, with the proxy's 404."""
    token_file.write_text(api.tokens["finance"] + "\n")
    monkeypatch.setattr(proxy_module, "PATHS", tuple(p for p in proxy_module.PATHS if p != removed))
    with running_proxy(api, token_file) as client, pytest.raises(AssertionError) as failed:
        replay(client, api, "finance", sequences(NOV20)[view])
    assert stops_at in str(failed.value) and "404" in str(failed.value), str(failed.value)
