"""OpenCost's ``GET /allocation`` over real HTTP, on SQLite and PostgreSQL, with the money the
ingestion put there from the real Prometheus of history.py.

Each answer is checked field by field against OpenCost's shape: the names, order and JSON
types of ``AllocationJSON`` (opencost/opencost ``core/pkg/opencost/allocation_json.go``:
every field a ``*float64`` -> a number or null, ``properties`` an object, ``window`` an object
of two RFC 3339 strings, ``pvs``/``lbAllocations`` null, ``gpuAllocation`` an object with
``gpuRequestAverage``, ``gpuUsageAverage`` numbers and ``isGPUShared`` a bool), inside
``Response`` (``pkg/costmodel/router.go``: ``code``, ``status``, ``data`` a list of maps).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest

from costsvc.db.models import Chargeback
from costsvc.rules.chargeback import IDLE, UNALLOCATED
from tests.costsvc.allocation_checks import (
    RFC3339,
    allocation_api,
    decimals,
    fleet,
    get,
    micro,
    sums,
)
from tests.costsvc.apiserver import Api

H05 = "2026-11-10T05:00:00Z,2026-11-10T06:00:00Z"  # history.py's hand-computed hour
NOVEMBER = "2026-11-01T00:00:00Z,2026-12-01T00:00:00Z"


api = pytest.fixture(allocation_api, scope="module", params=["sqlite", "postgresql"], name="api")


def test_aggregate_namespace_the_hand_computed_hour(api: Api) -> None:
    """05:00 (history.py): ml/p holds GPU-A half the hour at 80 % (1.25, used 1.00), ml/g
    GPU-C 40 minutes with no utilisation series (1.666667, unmeasured); search/a and search/b
    hold 2 and 1 of GPU-B's 4 time-sliced replicas (1.25 + 0.625)."""
    answer = get(api, window=H05, aggregate="namespace", accumulate="true")
    (only,) = answer["data"]
    assert sorted(only) == ["ml", "search"]
    ml, search = only["ml"], only["search"]
    assert ml["gpuCost"] == Decimal("2.916667") == ml["totalCost"]
    assert ml["gpuEfficiency"] == Decimal("0.800000")  # 1.00 used of the 1.25 measured
    assert ml["gpuHours"] == Decimal("1.166667")  # 0.5 h of GPU-A + 40 min of GPU-C
    assert ml["minutes"] == 60 and ml["gpuCount"] == Decimal("1.166667")
    assert ml["gpuAllocation"]["isGPUShared"] is False
    assert ml["gpuAllocation"]["gpuUsageAverage"] == Decimal("0.933334")  # 1.166667 x 0.8
    assert ml["properties"] == {"cluster": "c1", "namespace": "ml"}
    assert (ml["window"], ml["start"], ml["end"]) == (
        {"start": "2026-11-10T05:00:00Z", "end": "2026-11-10T06:00:00Z"},
        "2026-11-10T05:00:00Z",
        "2026-11-10T06:00:00Z",
    )
    assert search["gpuCost"] == Decimal("1.875000")
    assert search["gpuAllocation"]["isGPUShared"] is True  # time-sliced replicas
    assert search["gpuHours"] == Decimal("0.750000")  # 2/4 + 1/4 of GPU-B for the hour
    assert search["gpuCostIdle"] == 0  # no shareIdle
    assert IDLE not in only  # includeIdle not asked


def test_include_idle_and_share_idle_add_up_to_the_fleet(api: Api) -> None:
    start, end = datetime(2026, 11, 10, 5, tzinfo=UTC), datetime(2026, 11, 10, 6, tzinfo=UTC)
    total = fleet(api.db_url, start, end)
    assert total == 7_500_000  # 3 GPUs x 2.50
    plain = get(api, window=H05, aggregate="namespace", includeIdle="true")["data"][0]
    assert plain[IDLE]["gpuCost"] == Decimal("2.708333")  # 1.25 + 0.625 + 0.833333
    assert plain[IDLE]["gpuAllocation"] is None
    assert plain[IDLE]["properties"] == {"cluster": "c1"}
    assert sum(micro(a["totalCost"]) for a in plain.values()) == total
    shared = get(api, window=H05, aggregate="namespace", includeIdle="1", shareIdle="true")
    (one,) = shared["data"]
    assert IDLE not in one  # all of it had somebody to go to in cluster c1
    assert sum(micro(a["totalCost"]) for a in one.values()) == total
    # OpenCost's ShareWeighted: in proportion to allocated cost, exact to the micro-unit
    # (largest remainder): 2708333 x 2916667 / 4791667 and x 1875000 / 4791667
    ml = Fraction(2_708_333 * 2_916_667, 4_791_667)
    search = Fraction(2_708_333 * 1_875_000, 4_791_667)
    parts = {"ml": int(ml), "search": int(search)}
    left = 2_708_333 - sum(parts.values())
    for name in sorted(parts, key=lambda n: -(dict(ml=ml, search=search)[n] % 1))[:left]:
        parts[name] += 1
    for name, part in parts.items():
        assert micro(one[name]["gpuCostIdle"]) == part
        assert micro(one[name]["gpuCost"]) == micro(plain[name]["gpuCost"]) + part
    # shareIdle without includeIdle shares nothing (OpenCost computes idle only when included)
    alone = get(api, window=H05, aggregate="namespace", shareIdle="true")["data"][0]
    assert alone == {k: v for k, v in plain.items() if k != IDLE}


def test_idle_by_node_shares_each_node_s_idle_on_that_node(api: Api) -> None:
    start, end = datetime(2026, 11, 10, 5, tzinfo=UTC), datetime(2026, 11, 10, 8, tzinfo=UTC)
    window = "2026-11-10T05:00:00Z,2026-11-10T08:00:00Z"
    answer = get(
        api, window=window, aggregate="node", includeIdle="true", shareIdle="true", idleByNode="1"
    )
    (one,) = answer["data"]
    assert sum(micro(a["totalCost"]) for a in one.values()) == fleet(api.db_url, start, end)
    per_node = sums(api.db_url, Chargeback.node, start, end)
    for node, a in one.items():
        if node == IDLE:
            continue
        allocated, _, _, idle, _ = per_node[node]
        # every node with a holder takes its own idle (separate policy: idle lines per node)
        assert micro(a["gpuCost"]) == allocated + idle, node


def test_aggregate_label_team_over_the_month(api: Api) -> None:
    answer = get(api, window=NOVEMBER, aggregate="label:team", accumulate="true")
    (one,) = answer["data"]
    start, end = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
    teams = sums(api.db_url, Chargeback.team, start, end)
    expected = {t: v for t, v in teams.items() if t != IDLE}
    assert set(one) == set(expected)
    assert UNALLOCATED in one  # scratch/orphan: no team label anywhere
    for team, (allocated, used, waste, _, gpu_hours) in expected.items():
        a = one[team]
        assert micro(a["gpuCost"]) == allocated, team
        assert micro(a["gpuHours"]) == gpu_hours, team
        measured = used + waste
        eff = (Decimal(used) / measured).quantize(Decimal("0.000001")) if measured else None
        assert a["gpuEfficiency"] == eff, team
        if team != UNALLOCATED:
            assert a["properties"]["labels"] == {"team": team}
        else:
            assert "labels" not in a["properties"]
    # hostile label values come out as JSON strings, whatever they hold
    assert '=HYPERLINK("x")' in one and "チーム é" in one
    # a comma list aggregates by both, joined with "/" as OpenCost names them
    both = get(api, window=H05, aggregate="namespace,label:team", accumulate="true")
    assert sorted(both["data"][0]) == ["ml/nlp", "search/search"]


def test_any_pod_label_from_the_label_history(api: Api) -> None:
    """label:<key> for a key that is no owner label: the pod's labels as the watcher kept
    them (its latest during the set), else its namespace's, else __unallocated__."""
    (one,) = get(api, window=H05, aggregate="label:app")["data"]
    assert {name: a["gpuCost"] for name, a in one.items()} == {
        "trainer2": Decimal("1.250000"),  # relabelled at 05:30: the latest in the hour
        "gen": Decimal("1.666667"),
        "search": Decimal("1.250000"),
        "searchspace": Decimal("0.625000"),  # no app label: its namespace's
    }
    assert one["gen"]["properties"]["labels"] == {"app": "gen"}
    (named,) = get(api, window=H05, aggregate="label:app.kubernetes.io/name")["data"]
    assert sorted(named) == [UNALLOCATED, "gen-x"]
    (same,) = get(api, window=H05, aggregate="label:app_kubernetes_io_name")["data"]
    assert sorted(same) == sorted(named)  # OpenCost's sanitised key names the same label
    (ml,) = get(api, window=H05, aggregate="pod", filter='label[app]<~:"train"')["data"]
    assert sorted(ml) == ["p"]
    # before any history (the 11th's hostile pods): nobody has the label
    (evil,) = get(api, window="2026-11-11T09:00:00Z,2026-11-11T10:00:00Z", aggregate="label:app")[
        "data"
    ]
    assert sorted(evil) == [UNALLOCATED]


def test_step_one_day_and_accumulate(api: Api) -> None:
    window = "2026-11-10T00:00:00Z,2026-11-16T00:00:00Z"
    daily = get(api, window=window, step="1d", aggregate="cluster", includeIdle="true")
    assert len(daily["data"]) == 6
    day0 = datetime(2026, 11, 10, tzinfo=UTC)
    for i, one in enumerate(daily["data"]):
        start, end = day0 + timedelta(days=i), day0 + timedelta(days=i + 1)
        for a in one.values():
            assert a["window"] == {"start": f"{start:{RFC3339}}", "end": f"{end:{RFC3339}}"}
        assert sum(micro(a["totalCost"]) for a in one.values()) == fleet(api.db_url, start, end)
    for i, one in enumerate(daily["data"]):
        start, end = day0 + timedelta(days=i), day0 + timedelta(days=i + 1)
        clusters = sums(api.db_url, Chargeback.cluster, start, end)
        idle = sums(api.db_url, Chargeback.team, start, end).get(IDLE, (0, 0, 0, 0, 0))[3]
        assert sorted(one) == sorted({*clusters, *([IDLE] if idle else [])} - {""}), i
        for cluster, (allocated, *_) in clusters.items():
            assert micro(one[cluster]["gpuCost"]) == allocated
    # 10th: c1, c2 and idle; 11th: the hostile pods hold their GPUs all hour; 15th: finance
    assert [len(d) for d in daily["data"]] == [3, 1, 0, 0, 0, 1]
    accumulated = get(
        api, window=window, step="day", aggregate="cluster", includeIdle="true", accumulate="true"
    )
    (one,) = accumulated["data"]
    for name, a in one.items():
        assert a["window"] == {"start": "2026-11-10T00:00:00Z", "end": "2026-11-16T00:00:00Z"}
        assert a["gpuCost"] == sum(d[name]["gpuCost"] for d in daily["data"] if name in d)
        assert a["gpuHours"] == sum(d[name]["gpuHours"] for d in daily["data"] if name in d)
    assert one["c1"]["start"] == "2026-11-10T05:00:00Z"  # its first hour with a holder
    assert one["c1"]["end"] == "2026-11-15T13:00:00Z"  # its last (finance/q until 13:00)
    # the same as one set over the whole window (default step: the window)
    whole = get(api, window=window, aggregate="cluster", includeIdle="true")["data"][0]
    assert {k: a["totalCost"] for k, a in whole.items()} == {
        k: a["totalCost"] for k, a in one.items()
    }


def test_filters(api: Api) -> None:
    ml = get(api, window=H05, aggregate="pod", filter='namespace:"ml"')["data"][0]
    assert sorted(ml) == ["g", "p"]
    not_ml = get(api, window=H05, aggregate="pod", filter='namespace!:"ml"')["data"][0]
    assert sorted(not_ml) == ["a", "b"]
    teams = get(api, window=H05, aggregate="pod", filter='label[team]:"nlp" + pod<~:"p"')["data"][0]
    assert sorted(teams) == ["p"]
    either = get(api, window=H05, aggregate="pod", filter='(pod:"a" | pod:"g")')["data"][0]
    assert sorted(either) == ["a", "g"]
    listed = get(api, window=H05, aggregate="pod", filter='pod:"a","g" + cluster:"c1"')
    assert sorted(listed["data"][0]) == ["a", "g"]
    # idle: the share of what matched (OpenCost's idle filtration): 2.708333 x 1.25 / 4.791667
    with_idle = get(api, window=H05, aggregate="pod", filter='pod:"a"', includeIdle="true")
    assert with_idle["data"][0][IDLE]["gpuCost"] == Decimal("0.706522")
    nothing = get(api, window=H05, filter='cluster:"nowhere"', includeIdle="true")
    assert nothing["data"] == [{}]


def test_default_aggregation_names_five_parts(api: Api) -> None:
    """No aggregate: OpenCost's cluster/node/namespace/pod/container (kubectl-cost splits the
    name in five); each line keeps its holding's container."""
    (one,) = get(api, window=H05)["data"]
    assert all(len(name.split("/")) == 5 for name in one)
    assert {name.split("/")[3] for name in one} == {"a", "b", "g", "p"}
    assert all(name.endswith("/main") for name in one)
    assert one["c1/node-A/ml/p/main"]["properties"] == {
        "cluster": "c1",
        "node": "node-A",
        "container": "main",
        "controller": "trainer",
        "controllerKind": "deployment",
        "namespace": "ml",
        "pod": "p",
    }
    compute = api.get("/allocation/compute", window=H05)
    assert compute.status_code == 200 and decimals(compute.text)["data"] == [one]


def test_team_tokens_see_their_team_only(api: Api) -> None:
    mine = get(api, "team:nlp", window=NOVEMBER, aggregate="label:team", includeIdle="true")
    assert sorted(mine["data"][0]) == ["nlp"]
    by_ns = get(api, "team:nlp", window=NOVEMBER, aggregate="namespace", accumulate="true")
    assert sorted(by_ns["data"][0]) == ["ml"]
    other = get(api, "team:nlp", window=NOVEMBER, filter='label[team]:"search"')
    assert other["data"] == [{}]
    shared = get(api, "team:search", window=H05, includeIdle="true", shareIdle="true")
    # its own allocations, and none of the fleet's idle (not attributed to it by the policy)
    assert {name.split("/")[2] for name in shared["data"][0]} == {"search"}
    assert all(a["gpuCostIdle"] == 0 for a in shared["data"][0].values())
    assert api.get("/allocation", who=None, window=H05).status_code == 401


@pytest.mark.parametrize(
    ("params", "plain", "says"),
    [
        ({}, True, "Invalid 'window' parameter: illegal window: "),
        ({"window": "fortnight"}, True, "Invalid 'window' parameter: illegal window: fortnight"),
        ({"window": "1700000000,1600000000"}, True, "illegal window"),
        ({"window": "900d"}, True, "longer than"),
        ({"window": "99999d"}, True, "illegal window"),  # before 1970
        ({"window": "99999999999999w"}, True, "illegal window"),  # past any clock
        ({"window": "1d offset 99999999999w"}, True, "illegal window"),
        ({"window": "0001-01-01T00:00:00Z,0001-01-02T00:00:00Z"}, True, "illegal window"),
        ({"window": "1d", "step": "99999999999h"}, False, "longer than"),
        ({"window": "1d", "step": "bogus"}, False, "Invalid step parameter: invalid step"),
        ({"window": "1d", "step": "30m"}, False, "whole number of hours"),
        ({"window": "1d", "step": "0h"}, False, "whole number of hours"),
        ({"window": "90d", "step": "1h"}, False, "at most 1000"),
        ({"window": "1d", "accumulateBy": "often"}, False, "Invalid 'accumulateBy' parameter"),
        ({"window": "1d", "filter": 'namespace:"a" + pod:"b" | node:"c"'}, False, "Expected"),
        ({"window": "1d", "filter": '(namespace:"a"'}, False, "Invalid filter"),
        ({"window": "1d", "filter": 'namespace:"a")'}, False, "without matching"),
        ({"window": "1d", "filter": 'colour:"red"'}, False, "expect filter field"),
        ({"window": "1d", "filter": 'label:"x"'}, False, "label without a key"),
        ({"window": "1d", "filter": 'annotation:"x"'}, False, "annotation without a key"),
        ({"window": "1d", "filter": 'namespace:"unterminated'}, False, "unterminated"),
        ({"window": "1d", "filter": "(" * 40 + 'pod:"a"' + ")" * 40}, False, "nested"),
        ({"window": "1d", "filter": 'pod:"' + "x" * 5000 + '"'}, False, "longer than"),
        (
            {"window": "1d", "includeProportionalAssetResourceCosts": "true"},
            False,
            "bad request - includeIdle must be set true",
        ),
    ],
)
def test_bad_parameters_are_400_as_opencost_answers_them(
    api: Api, params: dict[str, str], plain: bool, says: str
) -> None:
    r = api.get("/allocation", **params)
    assert r.status_code == 400, r.text
    if plain:  # OpenCost's http.Error
        assert r.headers["content-type"].startswith("text/plain")
        assert says in r.text and r.text.endswith("\n")
    else:  # OpenCost's WriteError
        body = r.json()
        assert body["code"] == 400 and body["message"].startswith("Error: ")
        assert says in body["message"], body


def test_controller_dimensions(api: Api) -> None:
    """Each line's pod's controller as at that hour: ml/p a Deployment's (kube-state-metrics:
    pod -> ReplicaSet -> Deployment), ml/g the watcher's Deployment (its history wins over
    kube-state-metrics' StatefulSet), search/a a CronJob's (OpenCost: kind job, the CronJob's
    name), search/b none."""
    (one,) = get(api, window=H05, aggregate="controller")["data"]
    assert {n: a["gpuCost"] for n, a in one.items()} == {
        "deployment:trainer": Decimal("1.250000"),
        "deployment:gen-server": Decimal("1.666667"),
        "job:nightly": Decimal("1.250000"),
        UNALLOCATED: Decimal("0.625000"),
    }
    (kinds,) = get(api, window=H05, aggregate="controllerKind", includeIdle="true")["data"]
    assert sorted(kinds) == sorted(["deployment", "job", UNALLOCATED, IDLE])
    assert kinds["deployment"]["properties"]["controllerKind"] == "deployment"
    (deps,) = get(api, window=H05, aggregate="namespace,deployment")["data"]
    assert sorted(deps) == ["ml/gen-server", "ml/trainer", f"search/{UNALLOCATED}"]
    (jobs,) = get(api, window=H05, aggregate="JOB", filter='controllerKind:"job"')["data"]
    assert sorted(jobs) == ["nightly"]  # names compare case-insensitively, as ParseProperty
    (named,) = get(api, window=H05, aggregate="pod", filter='controllerName:"trainer"')["data"]
    assert sorted(named) == ["p"]
    # /v1/costs and the CSV carry it too
    r = api.get(
        "/v1/costs", start="2026-11-10T05:00:00Z", end="2026-11-10T06:00:00Z", group_by="workload"
    )
    by_workload = {x["group"]["workload"]: x["allocated_cost"] for x in r.json()["rows"]}
    assert by_workload["Deployment/trainer"] == "1.250000"
    assert by_workload["CronJob/nightly"] == "1.250000"
    assert by_workload[""] == "0.625000"  # search/b, and idle capacity (no allocated cost)
    csv_text = api.get("/v1/reports/chargeback.csv", month="2026-11").text
    header, *lines = csv_text.splitlines()
    assert header.endswith(",co2e_kg,container,workload")
    assert any(line.endswith(",main,Deployment/gen-server") for line in lines)


def test_aggregates_opencost_accepts_are_answered(api: Api) -> None:
    """What OpenCost accepts is a 200 (a 400 only where OpenCost says 400): unknown names are
    dropped (OpenCost's ParseAggregationProperties), service/annotation have no value here,
    nothing left (or all) is one allocation named ""."""
    (dropped,) = get(api, window=H05, aggregate="namespace,colour,cronjob,providerID")["data"]
    assert sorted(dropped) == ["ml", "search"]
    for nothing in ("colour", "all"):
        (one,) = get(api, window=H05, aggregate=nothing)["data"]
        assert list(one) == [""] and one[""]["gpuCost"] == Decimal("4.791667")
    for unknown in ("service", "annotation:owner", "label:"):
        (one,) = get(api, window=H05, aggregate=unknown)["data"]
        assert list(one) == [UNALLOCATED], unknown
    (product,) = get(api, window=H05, aggregate="product")["data"]  # OpenCost's label app
    assert sorted(product) == ["gen", "search", "searchspace", "trainer2"]
    weeks = get(api, window="month", accumulate="week", aggregate="cluster")["data"]
    assert len(weeks) == 3  # Sunday weeks from the 1st to the 22nd; data from the 10th
    assert [w["c1"]["window"]["start"] for w in weeks if w] == [
        "2026-11-08T00:00:00Z",
        "2026-11-15T00:00:00Z",
    ]
    for window in ("month", "week", "lastmonth", "30m", "1d offset 1d"):
        get(api, window=window)  # every window form without a step


def test_filtered_idle_and_shared_idle_gpu_hours_by_hand(api: Api) -> None:
    """05:00 (history.py): allocated ml 2.916667 (p 1.25 + g 1.666667), search 1.875 (a 1.25
    + b 0.625), 4.791667 in all; idle 2.708333 and 1.083333 GPU-hours (GPU-A half an hour,
    a quarter of GPU-B's replicas, GPU-C's 20 minutes between its two holds)."""
    (plain,) = get(api, window=H05, aggregate="namespace", includeIdle="true")["data"]
    assert (plain[IDLE]["gpuCost"], plain[IDLE]["gpuHours"]) == (
        Decimal("2.708333"),
        Decimal("1.083333"),
    )
    # filter namespace:"ml": the idle share of what matched, by allocated cost (OpenCost's
    # idle filtration): 2.708333 x 2.916667 / 4.791667 = 1.6485506 -> 1.648551 and
    # 1.083333 x 2.916667 / 4.791667 = 0.6594201 -> 0.659420
    (ml,) = get(
        api, window=H05, aggregate="namespace", filter='namespace:"ml"', includeIdle="true"
    )["data"]
    assert sorted(ml) == sorted(["ml", IDLE])
    assert (ml[IDLE]["gpuCost"], ml[IDLE]["gpuHours"]) == (Decimal("1.648551"), Decimal("0.659420"))
    # shareIdle: the same shares go onto ml, cost and GPU-hours (0.5 + 0.666667 of its own)
    (shared,) = get(api, window=H05, aggregate="namespace", includeIdle="true", shareIdle="true")[
        "data"
    ]
    assert shared["ml"]["gpuCostIdle"] == Decimal("1.648551")
    assert shared["ml"]["gpuHours"] == Decimal("1.166667") + Decimal("0.659420")
    assert shared["search"]["gpuHours"] == Decimal("0.750000") + Decimal("0.423913")
    assert IDLE not in shared
    # with a filter too: shares computed over all allocations, only ml's shown, no __idle__
    (both,) = get(
        api,
        window=H05,
        aggregate="namespace",
        filter='namespace:"ml"',
        includeIdle="true",
        shareIdle="true",
    )["data"]
    assert both == {"ml": shared["ml"]}


def test_accumulate_day_sums_to_accumulate_true(api: Api) -> None:
    """accumulate=day over 7 days: 7 daily sets whose sum is the accumulate=true answer,
    exactly, allocation by allocation."""
    window = "2026-11-09T00:00:00Z,2026-11-16T00:00:00Z"
    params = {"window": window, "aggregate": "namespace", "includeIdle": "true"}
    daily = get(api, accumulate="day", **params)["data"]
    assert len(daily) == 7
    assert [d[next(iter(d))]["window"]["start"] for d in daily if d] == [
        "2026-11-10T00:00:00Z",
        "2026-11-11T00:00:00Z",
        "2026-11-15T00:00:00Z",
    ]
    (whole,) = get(api, accumulate="true", **params)["data"]
    for name, a in whole.items():
        for f in ("gpuCost", "gpuHours", "totalCost", "gpuCostIdle"):
            assert a[f] == sum(d[name][f] for d in daily if name in d), (name, f)
    assert sorted(whole) == sorted({n for d in daily for n in d})
