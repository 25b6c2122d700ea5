"""deploy/helm/gpu-finops for real use (issue #46), with the real helm: as a subchart of an
umbrella chart, a GitOps-safe admin token (`helm template` renders the same objects twice),
an image by digest, the common options (overrides, annotations, scheduling, relabelings),
and the value sets the schema refuses (basic auth over plain HTTP, a PDB that blocks drains).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.tools import CHART, documents, helm_template, run, tool


def _umbrella(tmp_path: Path) -> Path:
    """A chart that depends on this one (file://), as `helm dependency build` leaves it."""
    root = tmp_path / "platform"
    (root / "charts").mkdir(parents=True)
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    (root / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": "platform",
                "version": "1.0.0",
                "dependencies": [
                    {
                        "name": chart["name"],
                        "version": chart["version"],
                        "repository": f"file://{CHART}",
                    }
                ],
            }
        )
    )
    shutil.copytree(CHART, root / "charts" / chart["name"])
    return root


@pytest.mark.parametrize(
    "values",
    [
        {},
        {
            "global": {"imageRegistry": "registry.example", "labels": {"team": "platform"}},
            "gpu-finops": {"costsvc": {"cluster": "east"}},
        },
    ],
    ids=["no-globals", "globals"],
)
def test_the_chart_renders_as_a_subchart(values: dict[str, Any], tmp_path: Path) -> None:
    """An umbrella chart's `global` reaches the subchart: its schema accepts it."""
    root = _umbrella(tmp_path)
    given = tmp_path / "values.yaml"
    given.write_text(yaml.safe_dump(values))
    done = run(
        [tool("helm"), "template", "platform", str(root), "-n", "gpu", "-f", str(given)],
        check=False,
    )
    assert done.returncode == 0, done.stderr
    kinds = {(d["kind"], d["metadata"]["name"]) for d in documents(done.stdout)}
    assert {("DaemonSet", "gpu-exporter"), ("Deployment", "gpu-costsvc")} <= kinds


def _admin_token_objects(values: dict[str, Any]) -> list[Any]:
    """What the admin token is made of: Secrets, and the cost service's pod's init
    containers and volumes."""
    docs = documents(helm_template(values).stdout)
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    spec = deploy["spec"]["template"]["spec"]
    return [
        [d for d in docs if d["kind"] == "Secret"],
        spec.get("initContainers"),
        spec["volumes"],
    ]


@pytest.mark.parametrize(
    "values",
    [{}, {"costsvc": {"adminToken": {"existingSecret": "vault-admin-token", "secretKey": "t"}}}],
    ids=["defaults", "existing-secret"],
)
def test_the_admin_token_is_the_same_on_every_render(values: dict[str, Any]) -> None:
    """GitOps (Argo CD runs `helm template`): nothing random, the user's Secret; the init
    container registers it with --ensure and warns, rather than crash-loops, on a change."""
    first, second = _admin_token_objects(values), _admin_token_objects(values)
    assert first == second
    secrets, inits, volumes = first
    assert secrets == []
    (init,) = [c for c in inits if c["name"] == "admin-token"]
    assert init["args"][-3:] == ["--ensure", "--on-conflict", "warn"]
    want = values.get("costsvc", {}).get("adminToken", {}).get("existingSecret")
    (volume,) = [v for v in volumes if v["name"] == "admin-token"]
    assert volume["secret"]["secretName"] == (want or "gpu-costsvc-admin-token")


def test_the_chart_makes_no_admin_token_while_one_is_given() -> None:
    done = helm_template({"costsvc": {"adminToken": {"create": True}}}, check=False)
    assert done.returncode != 0
    assert "/costsvc/adminToken/existingSecret" in done.stderr, done.stderr
