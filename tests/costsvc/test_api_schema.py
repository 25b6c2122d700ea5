"""schemathesis against the app's own OpenAPI description, over real HTTP, with bounded
examples: no 5xx, and every answer conforms to the schema (status codes, content types,
bodies). As the admin (who may call everything) and as a team token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import positive_data_acceptance

from tests.costsvc.apiserver import NOV20, Api, Clock, serve
from tests.costsvc.history import HOUR3, MODEL, ingest_with
from tests.prom import Prometheus


@pytest.fixture(scope="module")
def live(prometheus: Prometheus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    work: Path = tmp_path_factory.mktemp("schema")
    url = f"sqlite:///{work / 'schema.db'}"
    ingest_with(prometheus.url, url, MODEL, [HOUR3])
    model = work / "cost-model.yaml"
    model.write_text(yaml.safe_dump(MODEL.document()))
    with serve(url, Clock(NOV20), ["a"], cost_model=model) as api:
        yield api


SETTINGS = settings(
    max_examples=20, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
# a request valid field by field may still be refused with a 400 naming the rule it breaks
# (end before start, a window and a start at once, a group named twice): OpenAPI cannot say so
CROSS_FIELD = positive_data_acceptance
SKIP = {("DELETE", "/v1/tokens/{name}")}  # revoking tokens would pull the rug from the run


@pytest.mark.parametrize("who", ["admin", "team:a"])
def test_the_api_keeps_its_own_schema(live: Api, who: str) -> None:
    """Every operation, bounded examples each; the failures of all operations are reported
    together (schemathesis's default checks: no 5xx, documented status codes and content
    types, bodies valid against the response schemas)."""
    schema = schemathesis.openapi.from_url(f"{live.base}/openapi.json")
    failures: list[str] = []
    ran = 0
    for result in schema.get_all_operations():
        op = result.ok()
        if (op.method.upper(), op.path) in SKIP:
            continue
        ran += 1

        @given(case=op.as_strategy())
        @SETTINGS
        def check(case: Any) -> None:
            case.call_and_validate(headers=live.auth(who), excluded_checks=[CROSS_FIELD])

        try:
            check()
        except Exception as exc:  # one operation's failure must not hide the others'
            failures.append(f"{op.method.upper()} {op.path}: {exc}")
    assert ran >= 15
    assert not failures, "\n\n".join(failures)
