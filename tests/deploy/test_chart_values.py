"""deploy/helm/gpu-finops's values with the real helm: a bad value fails with the field named
(values.schema.json); values.yaml and the schema describe the same values, each documented;
deploy/sync.py keeps the chart's copies and docs/deploy.md's table of values current."""

from __future__ import annotations

import json
import runpy
from typing import Any

import pytest
from jsonschema import Draft7Validator

from tests.deploy.helpers import ROOT, load_yaml
from tests.deploy.tools import BCRYPT, CHART, helm_template


def _script(name: str) -> dict[str, Any]:
    """The globals of deploy/NAME.py (deploy/ holds scripts, not a package)."""
    return runpy.run_path(str(ROOT / "deploy" / f"{name}.py"), run_name=name)


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"exporter": {"enabled": "yes"}}, "/exporter/enabled"),
        ({"exporter": {"priorityClass": "x"}}, "'priorityClass'"),  # a typo of a name
        ({"exporter": {"collectInterval": "5 seconds"}}, "/exporter/collectInterval"),
        (
            {"exporter": {"webConfig": {"tls": {"enabled": True}}}},
            "/exporter/webConfig/tls/existingSecret",
        ),
        (
            {"exporter": {"webConfig": {"basicAuth": {"users": {"p": "plain"}}}}},
            "/exporter/webConfig/basicAuth/users/p",
        ),
        (
            {"exporter": {"webConfig": {"basicAuth": {"users": {"p": BCRYPT}}}}},
            "/exporter/monitor/basicAuth/secretName",
        ),
        ({"exporter": {"monitor": {"kind": "Probe"}}}, "/exporter/monitor/kind"),
        ({"costsvc": {"replicas": 0}}, "/costsvc/replicas"),
        ({"costsvc": {"source": "dcgm"}}, "/costsvc/source"),
        ({"costsvc": {"prometheusUrl": "prometheus:9090"}}, "/costsvc/prometheusUrl"),
        (
            {"costsvc": {"database": {"sqlite": {"enabled": True}}, "replicas": 2}},
            "/costsvc/replicas",
        ),
        (
            {"costsvc": {"database": {"sqlite": {"enabled": True}}, "migrations": "hookJob"}},
            "/costsvc/migrations",
        ),
        ({"costsvc": {"cluster": "east west"}}, "/costsvc/cluster"),
        # Kueue's served versions only (costsvc/kit/settings.py kueue_api_version)
        ({"costsvc": {"kueue": {"apiVersion": "v1"}}}, "/costsvc/kueue/apiVersion"),
        ({"dashboards": {"labelValue": 1}}, "/dashboards/labelValue"),
    ],
)
def test_a_bad_value_is_refused_naming_the_field(values: dict[str, Any], named: str) -> None:
    done = helm_template(values, check=False)
    assert done.returncode != 0, f"{values} was accepted"
    assert named in done.stderr, done.stderr


def test_every_value_is_in_the_schema_and_documented() -> None:
    """values.yaml and values.schema.json describe the same values (the schema refuses any
    other), and each leaf has a description; docs/deploy.md's table is made from them
    (deploy/sync.py --check, test_sync below)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = load_yaml(CHART / "values.yaml")
    assert Draft7Validator(schema).is_valid(values)

    def walk(node: dict[str, Any], value: Any, path: str) -> None:
        props = node.get("properties")
        if props and node.get("additionalProperties") is False:
            assert set(value) == set(props), path
            for key, sub in props.items():
                walk(sub, value[key], f"{path}.{key}")
        else:
            assert node.get("description") or node.get("allOf"), path

    walk(schema, values, "")


def test_sync_keeps_every_copy_and_the_docs_current() -> None:
    """The chart's copies (alerts, dashboards, cost model), the kustomize PrometheusRule and
    dashboards, and docs/deploy.md's table of values are what deploy/sync.py makes."""
    assert _script("sync")["main"](["--check"]) == 0, "run: python deploy/sync.py"


def test_the_values_table_has_a_row_per_value() -> None:
    doc = (ROOT / "docs" / "deploy.md").read_text()
    schema = json.loads((CHART / "values.schema.json").read_text())
    paths = [p for p, _ in _script("values_doc")["rows"](schema)]
    assert len(paths) > 60
    for path in paths:
        assert f"| `{path}` |" in doc, path
