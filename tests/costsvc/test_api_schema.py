"""schemathesis against the app's own OpenAPI description, over real HTTP, with bounded
examples: no 5xx, every answer conforms to the schema (status codes, content types, bodies),
and — now that every protected operation declares the bearer scheme — authentication is
enforced (schemathesis's ``ignored_auth`` sends each request again without the token and with
a wrong one). As the admin (who may call everything) and as a team token; then the stateful
phase over the links schemathesis infers (create a budget or a token, then read, change,
delete it)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import CHECKS, load_all_checks, positive_data_acceptance
from sqlalchemy import create_engine, delete

from costsvc.auth.principal import CACHE
from costsvc.db.models import ApiToken, Budget, MonthClose
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


def checks() -> list[Any]:
    """Every check schemathesis has, but the one named above with its reason."""
    load_all_checks()
    found = [c for c in CHECKS.get_all() if c is not CROSS_FIELD]
    assert "ignored_auth" in {c.__name__ for c in found}
    return found


def test_every_protected_operation_declares_the_bearer_scheme(live: Api) -> None:
    spec = live.http.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": spec["components"]["securitySchemes"]["bearer"]["description"],
    }
    open_ = {("get", "/healthz")}
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if (method, path) in open_:
                assert "security" not in op
            else:
                assert op.get("security") == [{"bearer": []}], (method, path)
                assert "401" in op["responses"], (method, path)


def test_docs_are_served_from_packaged_assets(live: Api) -> None:
    """/docs and /redoc name no other host: they work with no network."""
    for page in ("/docs", "/redoc"):
        html = live.http.get(page).text
        assert "http://" not in html and "https://" not in html, page
        for asset in re.findall(r'(?:src|href)="([^"]+)"', html):
            r = live.http.get(asset)
            assert r.status_code == 200 and len(r.content) > 1000, (page, asset)


def test_swagger_ui_calls_no_validator(live: Api) -> None:
    """Swagger UI's bundle sends the spec's URL to its online validator unless the page sets
    ``validatorUrl`` to null (swagger-ui docs/usage/configuration.md): ours does, so /docs
    reaches no outside origin, whatever host serves it."""
    html = live.http.get("/docs").text
    (bundle,) = re.findall(r'<script src="([^"]+)"', html)
    assert "https://validator.swagger.io" in live.http.get(bundle).text  # its default
    (parameters,) = re.findall(r"SwaggerUIBundle\(\{(.*?)presets:", html, re.S)
    assert '"validatorUrl": null' in parameters
    origins = re.findall(r"(?:https?:)?//[^/\s\"']+", html)
    assert origins == [], origins


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
            case.call_and_validate(headers=live.auth(who), checks=checks())

        try:
            check()
        except Exception as exc:  # one operation's failure must not hide the others'
            failures.append(f"{op.method.upper()} {op.path}: {exc}")
    assert ran >= 15
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("who", ["admin", "team:a"])
def test_stateful_phase(live: Api, who: str) -> None:
    """Sequences along the links schemathesis infers from the description (a budget or a
    token created, then read, replaced, deleted), with the same checks."""
    schema = schemathesis.openapi.from_url(f"{live.base}/openapi.json")
    schema = schema.exclude(method="DELETE", path="/v1/tokens/{name}")  # SKIP, same reason
    machine = schema.as_state_machine()
    headers = live.auth(who)
    all_checks = checks()
    steps: list[tuple[str, str, bool]] = []
    failures: list[str] = []

    engine = create_engine(live.db_url)
    kept = {"admin", "finance", "prometheus", "team-a"}

    class Machine(machine):  # type: ignore[misc, valid-type]
        def setup(self) -> None:
            """Each scenario starts from the same state (hypothesis replays scenarios and
            needs them to behave alike): no budgets, closed months or tokens but the run's."""
            with engine.begin() as conn:
                conn.execute(delete(Budget))
                conn.execute(delete(MonthClose))
                conn.execute(delete(ApiToken).where(ApiToken.name.not_in(kept)))
            CACHE.clear()

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": headers}

        def step(self, input: Any) -> Any:
            steps.append((input.case.method, input.case.path, input.transition is not None))
            return super().step(input)

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            # recorded, not raised: the server's state outlives a scenario, so hypothesis
            # could not replay one to shrink it (it would call the replay flaky)
            try:
                case.validate_response(response, checks=all_checks, headers=headers)
            except Exception as exc:
                failures.append(f"{case.method} {case.formatted_path}: {exc}"[:3000])

    try:
        Machine.run(
            settings=settings(
                max_examples=15,
                stateful_step_count=6,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
        )
    finally:
        engine.dispose()
    assert steps
    assert any(linked for *_, linked in steps), "no step followed a link"
    assert not failures, "\n\n".join(failures)
