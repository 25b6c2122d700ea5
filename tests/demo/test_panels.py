"""Every panel of every dashboard has data on the demo (issue #23, Build 6): each target's
PromQL, with the dashboard's variables at "All" and Grafana's intervals as Grafana works them
out for the demo's Prometheus, evaluated against the demo's Prometheus now and over the last
hour. A panel whose description says when it is empty ("Empty when ...") may be empty now,
never over the whole hour."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.dashboards.exprs import dashboards, iter_panels, substitute
from tests.demo.conftest import READY_WITHIN, STEP, Demo

# the demo is started by the first test of the package (tests/demo/conftest.py) and stopped
# after the last: within their time-outs
pytestmark = pytest.mark.timeout(READY_WITHIN + 120)
# Grafana: $__rate_interval = max($__interval + scrape interval, 4 x scrape interval); the
# demo scrapes (and its history was scraped) every STEP seconds
INTERVALS = {
    "__rate_interval": f"{4 * STEP}s",
    "__interval": f"{STEP}s",
    "__interval_ms": str(STEP * 1000),
    "__range": "1h",
    "__range_s": "3600",
}
BOARDS = [
    (name, panel)
    for name, board in dashboards().items()
    for panel in iter_panels(board["panels"])
    if panel["type"] != "row"
]
PANELS = [pytest.param(panel, id=f"{name}:{panel['title']}") for name, panel in BOARDS]


def may_be_empty_now(panel: dict[str, Any]) -> bool:
    return "Empty when " in panel["description"]


@pytest.fixture(scope="module")
def answers(demo: Demo) -> dict[str, tuple[bool, bool]]:
    """Per expression (and instant or hour): whether it has data, once Prometheus has scraped
    the cost service's /metrics; asked a few at a time."""
    assert demo.await_query('up{job="gpu-costsvc"} == 1', 60), "the cost service unscraped"
    now = time.time()
    exprs = {substitute(t["expr"], INTERVALS) for _, p in BOARDS for t in p["targets"]}

    def ask(expr: str) -> tuple[bool, bool]:
        hour = demo.query(expr, start=now - 3600, end=now, step=STEP)
        return bool(hour), bool(demo.query(expr, time=now))

    with ThreadPoolExecutor(4) as pool:
        return dict(zip(exprs, pool.map(ask, exprs), strict=True))


def test_the_panels_are_all_here() -> None:
    assert len(BOARDS) >= 100
    assert [p["title"] for _, p in BOARDS if may_be_empty_now(p)] == [
        "XID errors by code"  # an XID is an event: none in the last rate window is normal
    ]


@pytest.mark.parametrize("panel", PANELS)
def test_every_panel_has_data(answers: dict[str, tuple[bool, bool]], panel: dict[str, Any]) -> None:
    for target in panel["targets"]:
        expr = substitute(target["expr"], INTERVALS)
        hour, now = answers[expr]
        assert hour, f"{panel['title']} {target['refId']}: no data over the last hour: {expr}"
        if not may_be_empty_now(panel):
            assert now, f"{panel['title']} {target['refId']}: no data now: {expr}"
