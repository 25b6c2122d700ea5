"""Kueue's LocalQueues in deploy/ (docs/deploy.md, "Kueue's LocalQueues"; docs/queues.md):
the chart's `costsvc.kueue.apiVersion` and the plain manifests' overlays/kueue set
COSTSVC_KUEUE_API_VERSION and the ClusterRole's `localqueues` rule together, and neither
without it (least privilege); a bad version stops `gpu-costsvc serve` naming the setting.
test_chart.py validates the value set "kueue" (helm lint, kubernetes-validate, the CRDs)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.deploy.helpers import K8S, K8S_VERSIONS, ROOT, costsvc_settings, validator_module
from tests.deploy.tools import CHART, documents, helm_template, kustomize, run, tool

KUEUE_OVERLAY = ROOT / "deploy" / "overlays" / "kueue"
# the rule `serve` needs to list and watch LocalQueues (costsvc/queues/kube_watch.py:
# group kueue.x-k8s.io, plural localqueues; kubernetes-sigs/kueue
# apis/kueue/v1beta2/groupversion_info.go)
RULE = {
    "apiGroups": ["kueue.x-k8s.io"],
    "resources": ["localqueues"],
    "verbs": ["get", "list", "watch"],
}
VAR = "COSTSVC_KUEUE_API_VERSION"


def _costsvc(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cost service's ClusterRole and its serve container."""
    (role,) = [
        d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-costsvc")
    ]
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = [
        c for c in deploy["spec"]["template"]["spec"]["containers"] if c["name"] == "gpu-costsvc"
    ]
    return role, container


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v.get("value", "") for v in container["env"]}


def _kueue_rules(role: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in role["rules"] if "kueue.x-k8s.io" in r["apiGroups"]]


def test_the_chart_without_the_value_neither_watches_nor_may_read_local_queues() -> None:
    role, container = _costsvc(documents(helm_template().stdout))
    assert VAR not in _env(container)
    assert _kueue_rules(role) == []
    assert costsvc_settings({}).kueue_api_version is None


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_the_chart_with_the_value_sets_the_variable_and_the_rule(version: str) -> None:
    done = helm_template({"costsvc": {"kueue": {"apiVersion": version}}})
    role, container = _costsvc(documents(done.stdout))
    assert _env(container)[VAR] == version
    assert _kueue_rules(role) == [RULE]
    # what gpu-costsvc makes of it, with its own settings parser
    assert costsvc_settings({VAR: version}).kueue_api_version == version


@pytest.mark.parametrize("version", ["", "v1beta1"])
def test_the_notes_name_the_version_only_when_set(version: str) -> None:
    args = [tool("helm"), "install", "gpu-finops", str(CHART), "-n", "gpu-finops"]
    args += ["--dry-run=client", "--set", f"costsvc.kueue.apiVersion={version}"]
    notes = run(args).stdout.split("NOTES:", 1)[1]
    said = "watches the LocalQueues of kueue.x-k8s.io/" in notes
    assert said == bool(version)
    assert ("kueue.x-k8s.io/v1beta1 " in notes) == bool(version)


def test_the_kueue_overlay_adds_the_rule_and_the_variable_only() -> None:
    base, over = kustomize(K8S), kustomize(KUEUE_OVERLAY)
    base_role, base_container = _costsvc(base)
    role, container = _costsvc(over)
    assert _kueue_rules(base_role) == [] and VAR not in _env(base_container)
    assert _kueue_rules(role) == [RULE]
    assert costsvc_settings({VAR: _env(container)[VAR]}).kueue_api_version == "v1beta2"
    # nothing else differs: take the two additions out again
    undone = copy.deepcopy(over)
    role_u, container_u = _costsvc(undone)
    role_u["rules"].remove(RULE)
    container_u["env"] = [v for v in container_u["env"] if v["name"] != VAR]
    assert undone == base


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_kueue_overlay_matches_the_kubernetes_schema(version: str) -> None:
    kv = validator_module()
    role, _ = _costsvc(kustomize(KUEUE_OVERLAY))
    (deploy,) = [d for d in kustomize(KUEUE_OVERLAY) if d["kind"] == "Deployment"]
    for obj in (role, deploy):
        kv.validate(obj, version, strict=True)


def test_a_bad_version_stops_serve_naming_the_setting(tmp_path: Any) -> None:
    env = {
        **os.environ,
        "COSTSVC_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}",
        VAR: "v1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "costsvc.cli", "serve"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"gpu-costsvc: error: {VAR}: "), done.stderr
    assert "v1beta1" in done.stderr and "v1beta2" in done.stderr
