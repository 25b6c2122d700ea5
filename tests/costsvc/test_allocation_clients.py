"""OpenCost's own clients against ``/allocation`` (tests/costsvc/opencost_clients.py): the
requests of its UI's allocation pages and its drill-down, and ``kubectl cost``, replayed over
real HTTP, on SQLite and PostgreSQL: each answer in OpenCost's shape
(tests/costsvc/allocation_checks.py) with the money of ``/v1/costs`` for the same hours."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from costsvc.db.models import Chargeback
from costsvc.rules.chargeback import IDLE, UNALLOCATED
from tests.costsvc.allocation_checks import (
    allocation_api,
    assert_money_as_v1,
    check_shape,
    decimals,
    micro,
    sums,
    ui_get,
)
from tests.costsvc.apiserver import Api
from tests.costsvc.opencost_clients import (
    DRILLDOWN,
    FILTER_PROPERTY,
    KUBECTL_COMMANDS,
    UI_PATH,
    kubectl_query,
    ui_params,
    ui_requests,
)

api = pytest.fixture(allocation_api, scope="module", params=["sqlite", "postgresql"], name="api")


def test_the_opencost_ui_s_own_request(api: Api) -> None:
    """OpenCost's UI (opencost-ui ``src/services/allocation.js``) asks ``/allocation/compute``
    with ``window``, ``aggregate``, ``includeIdle=true``, ``step=1d``, ``accumulate`` and its
    filters joined by an encoded ``+`` (``src/util.js`` ``parseFilters``)."""
    query = (
        "window=6d&aggregate=namespace&includeIdle=true&step=1d&accumulate=false"
        "&filter=" + 'namespace:"finance"%2Bcluster:"c1"'
    )
    r = api.http.get(f"/allocation/compute?{query}", headers=api.auth("finance"))
    assert r.status_code == 200, r.text
    answer = decimals(r.text)
    check_shape(answer)
    # the clock is 2026-11-20 12:00: 6d is the 15th to the 20th, one set a day
    # finance/q holds GPU-Q all its hours: no idle that day
    assert [sorted(s) for s in answer["data"]] == [["finance"], [], [], [], [], []]
    finance = answer["data"][0]["finance"]
    assert finance["window"] == {"start": "2026-11-15T00:00:00Z", "end": "2026-11-16T00:00:00Z"}
    start, end = datetime(2026, 11, 15, tzinfo=UTC), datetime(2026, 11, 16, tzinfo=UTC)
    allocated = sums(api.db_url, Chargeback.namespace, start, end)["finance"][0]
    assert micro(finance["gpuCost"]) == allocated


def test_the_opencost_ui_s_requests(api: Api) -> None:
    """Every request of the OpenCost UI's allocation pages (tests/costsvc/opencost_clients.py):
    200, OpenCost's shape, and the money of /v1/costs for the same hours."""
    for params in ui_requests():
        answer = ui_get(api, params)
        assert_money_as_v1(api, answer, [], bool(params["includeIdle"]))
    # its default view (dashboard): one set a day of the 7 days
    daily = ui_get(api, ui_params("7d", "namespace", "day"))
    assert len(daily["data"]) == 7


def test_the_opencost_ui_s_drill_down(api: Api) -> None:
    """namespace -> controllerKind -> controller -> pod -> container, clicking the first row
    each time as the UI builds its next request (drilldown, FilterBreadcrumb)."""
    window = "14d"
    aggregate, filters = "namespace", []
    seen = []
    while True:
        answer = ui_get(api, ui_params(window, aggregate, True, filters))
        assert_money_as_v1(api, answer, filters, True)
        (one,) = answer["data"]
        rows = sorted(n for n in one if IDLE not in n and UNALLOCATED not in n)
        seen.append((aggregate, rows))
        if aggregate not in DRILLDOWN or not rows:
            break
        value = "ml" if aggregate == "namespace" else rows[0]
        if aggregate == "controller":  # kind:name: the kind filter if not there, the name
            value = value.split(":", 1)[1]
        filters.append((FILTER_PROPERTY[aggregate], value))
        aggregate = DRILLDOWN[aggregate]
    assert seen[1:] == [
        ("controllerKind", ["deployment"]),
        ("controller", ["deployment:gen-server", "deployment:trainer"]),
        ("pod", ["g"]),
        ("container", ["main"]),
    ]


@pytest.mark.parametrize("command", sorted(KUBECTL_COMMANDS))
def test_kubectl_cost_requests(api: Api, command: str) -> None:
    """``kubectl cost <command> --window W --opencost`` (opencost_clients.py): 200, names that
    split into the aggregation's parts (WriteAllocationTable), minutes to scale by, money as
    /v1/costs."""
    aggregation = KUBECTL_COMMANDS[command]
    for window in ("1d", "7d", "14d", "lastweek"):
        r = api.http.get(f"{UI_PATH}?{kubectl_query(command, window)}", headers=api.auth("finance"))
        assert r.status_code == 200, r.text
        answer = decimals(r.text)
        check_shape(answer)
        (one,) = answer["data"]  # accumulate=true: allocations[0]
        for name, a in one.items():
            assert name == IDLE or len(name.split("/")) == len(aggregation), name
            assert a["minutes"] > 0  # 43200 / Minutes() when projecting a month
        assert_money_as_v1(api, answer, [], True)
    if command == "controller":
        (one,) = decimals(
            api.http.get(
                f"{UI_PATH}?{kubectl_query(command, '14d')}", headers=api.auth("finance")
            ).text
        )["data"]
        assert "c1/ml/deployment:trainer" in one and "c1/search/job:nightly" in one
