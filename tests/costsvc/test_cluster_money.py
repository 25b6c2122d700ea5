"""A team's money per cluster on the cost service's /metrics (costsvc/metrics/series.py): the
money series carry the ``cluster`` each line ran in, the month-end forecast comes in parts per
cluster that sum to the API's forecast exactly (costsvc/costs/queries.py
``forecast_by_cluster``), a team token still sees only its team, and the FinOps dashboard's
``$cluster`` splits a team's money by cluster (its panels evaluated by promtool). SQLite and
PostgreSQL; the hours are written as the ingest writes them (costsvc/db/lines.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.core import Metric
from sqlalchemy import Engine, create_engine

from costsvc.auth.tokens import Principal
from costsvc.costs.queries import forecast, forecast_by_cluster
from costsvc.db.lines import write_lines
from costsvc.db.migrate import upgrade
from costsvc.metrics.series import FLEET, collect, scoped
from costsvc.rules.lines import Line
from tests.costsvc.conftest import fresh_database
from tests.dashboards.test_dashboards import expr_of
from tests.prom import promtool_test

NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)
# (hour, cluster, team, allocated micro-units)
HOURS = [
    (datetime(2026, 11, 5, 0, tzinfo=UTC), "east", "a", 2_000_000),
    (datetime(2026, 11, 18, 10, tzinfo=UTC), "east", "a", 1_000_000),
    (datetime(2026, 11, 18, 11, tzinfo=UTC), "east", "a", 1_000_000),
    (datetime(2026, 11, 19, 11, tzinfo=UTC), "west", "a", 3_000_000),
    (datetime(2026, 11, 19, 11, tzinfo=UTC), "west", "b", 4_000_000),
    (datetime(2026, 11, 20, 11, tzinfo=UTC), "west", "a", 500_000),
]
# By hand. The last ingested hour is 11-20 11:00, so the trend hours are the 168 from 11-13
# 12:00 to 11-20 12:00, and 252 hours (10.5 days) are left to 12-01 00:00.
# Team a: month to date east 2 + 1 + 1 = 4.000000, west 3 + 0.5 = 3.500000 (7.500000);
# in the trend hours east 2.000000, west 3.500000 (5.500000): 5_500_000 / 168 = 32738.09
# -> 32738 an hour; forecast 7_500_000 + 32738 x 252 = 7_500_000 + 8_249_976 = 15_749_976.
# The 8_249_976 ahead split 2 : 3.5 (= 4 : 7): east 8_249_976 x 4 / 11 = 2_999_991.27,
# west x 7 / 11 = 5_249_984.73 -> the unit left to the larger remainder: 2_999_991 and
# 5_249_985. Parts: east 6_999_991, west 8_749_985; sum 15_749_976.
FORECAST_A = 15_749_976
PARTS_A = {"east": 6_999_991, "west": 8_749_985}
MTD_A = {"east": 4_000_000, "west": 3_500_000}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    with fresh_database(request.param, request, tmp_path_factory.mktemp("clusters")) as url:
        upgrade(url)
        engine = create_engine(url)
        by_hour: dict[tuple[datetime, str], list[Line]] = {}
        for hour, cluster, team, allocated in HOURS:
            line = Line(cluster, team, "", "", f"ns-{team}", f"{team}-0", allocated=allocated)
            by_hour.setdefault((hour, cluster), []).append(line)
        with engine.begin() as conn:
            for (hour, cluster), lines in sorted(by_hour.items()):
                write_lines(conn, hour, {cluster}, lines, "USD")
        yield engine
        engine.dispose()


def samples(families: list[Metric], name: str) -> dict[tuple[tuple[str, str], ...], float]:
    [family] = [f for f in families if f.name == name]
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples}


def test_the_forecast_s_parts_per_cluster_sum_to_the_api_s(engine: Engine) -> None:
    with engine.connect() as conn:
        assert forecast(conn, NOW, "a").forecast == FORECAST_A
        assert forecast_by_cluster(conn, NOW, "a") == PARTS_A
        assert sum(PARTS_A.values()) == FORECAST_A
        # team b ran in one cluster: its part is its whole forecast
        assert forecast_by_cluster(conn, NOW, "b") == {"west": forecast(conn, NOW, "b").forecast}


def test_the_money_series_carry_the_cluster(engine: Engine) -> None:
    families = collect(engine, NOW)
    cost = samples(families, "costsvc_cost_month_to_date")
    for cluster, micro in MTD_A.items():
        key = (("cluster", cluster), ("currency", "USD"), ("project", ""), ("stage", ""))
        assert cost[(*key, ("team", "a"))] == micro / 1e6
    parts = samples(families, "costsvc_cost_forecast_month_end")
    assert parts == {
        (("cluster", c), ("currency", "USD"), ("team", "a")): v / 1e6 for c, v in PARTS_A.items()
    } | {(("cluster", "west"), ("currency", "USD"), ("team", "b")): parts_b(engine) / 1e6}
    # a team token: its team's samples, in every cluster, and nothing of team b (the fleet's
    # families aside: no team in them)
    mine = scoped(families, Principal("t", "team", "a"))
    for family in (f for f in mine if f.name not in FLEET):
        assert all(s.labels.get("team") == "a" for s in family.samples), family.name
    assert {dict(k)["cluster"] for k in samples(mine, "costsvc_cost_month_to_date")} == {
        "east",
        "west",
    }


def parts_b(engine: Engine) -> int:
    with engine.connect() as conn:
        return forecast(conn, NOW, "b").forecast


def exposition_series(families: list[Metric], *names: str) -> list[dict[str, str]]:
    return [
        {
            "series": s.name
            + "{"
            + ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(s.labels.items()))
            + "}",
            "values": f"{s.value!r}x2",
        }
        for f in families
        if f.name in names
        for s in f.samples
    ]


def test_the_dashboard_s_cluster_splits_a_team_s_money(engine: Engine, tmp_path: Path) -> None:
    """The FinOps dashboard's *Projected month end* and *Attributed to teams* for team a, with
    ``$cluster`` east, west and All: the parts by hand above, and their sums."""
    families = collect(engine, NOW)
    series = exposition_series(
        families, "costsvc_cost_forecast_month_end", "costsvc_cost_month_to_date"
    )
    cases: list[dict[str, Any]] = []
    for cluster, forecast_micro, mtd_micro in (
        ("east", PARTS_A["east"], MTD_A["east"]),
        ("west", PARTS_A["west"], MTD_A["west"]),
        (".*", FORECAST_A, sum(MTD_A.values())),
    ):
        values = {"cluster": cluster, "team": "a", "currency": "USD"}
        for title, micro in (
            ("Projected month end", forecast_micro),
            ("Attributed to teams", mtd_micro),
        ):
            expr = expr_of("gpu-finops.json", title, values=values)
            cases.append(
                {
                    "expr": f"round(({expr}) * 1000000)",  # micro-units, the money's precision
                    "eval_time": "1m",
                    "exp_samples": [{"labels": "{}", "value": micro}],
                }
            )
    promtool_test(tmp_path, {"interval": "1m", "input_series": series, "promql_expr_test": cases})
