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

from tests.deploy.helpers import (
    CRD_GROUP,
    JOBS,
    K8S_VERSIONS,
    ROOT,
    RULES,
    load_yaml,
    validator_module,
)
from tests.deploy.options import DIGEST, OPTIONS
from tests.deploy.tools import BCRYPT, CHART, documents, helm_template, run, tool


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


def test_the_common_options_render_where_expected() -> None:
    docs = documents(helm_template(OPTIONS).stdout)
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    images = {
        c["image"]
        for d in docs
        if d["kind"] in ("DaemonSet", "Deployment")
        for c in [
            *d["spec"]["template"]["spec"].get("initContainers", []),
            *d["spec"]["template"]["spec"]["containers"],
        ]
    }
    assert images == {f"registry.example/gpu-finops@{DIGEST}"}  # never @sha256:...:tag
    namespaced = [d for d in docs if not d["kind"].startswith("Cluster")]
    assert {d["metadata"]["namespace"] for d in namespaced} - {"gpu-system"} == set()
    bindings = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert {s["namespace"] for b in bindings for s in b["subjects"]} == {"gpu-system"}
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRole"} == {
        "fin-exporter",
        "fin-costsvc",
    }
    ds, deploy = by[("DaemonSet", "gpu-exporter")], by[("Deployment", "gpu-costsvc")]
    assert ds["spec"]["template"]["metadata"]["annotations"] == {"example.com/scraped": "no"}
    notes = deploy["spec"]["template"]["metadata"]["annotations"]
    assert notes["example.com/team"] == "finops" and "checksum/cost-model" in notes
    sa = {k: by[("ServiceAccount", k)]["metadata"]["annotations"] for k in JOBS}
    assert sa["gpu-exporter"] == {"example.com/role": "exporter"}
    assert "eks.amazonaws.com/role-arn" in sa["gpu-costsvc"]
    spec = deploy["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "high" and spec["nodeSelector"] == {"pool": "system"}
    assert spec["tolerations"][0]["key"] == "system" and "podAntiAffinity" in spec["affinity"]
    for name, dropped in (("gpu-exporter", "DCGM_FI_PROF_.*"), ("gpu-costsvc", "costsvc_http_.*")):
        (endpoint,) = by[("ServiceMonitor", name)]["spec"]["endpoints"]
        assert endpoint["honorLabels"] is True
        assert endpoint["relabelings"][0]["action"] == "labeldrop"  # the chart's own first
        assert endpoint["relabelings"][-1] == {"targetLabel": "cluster", "replacement": "east"}
        assert endpoint["metricRelabelings"] == [{"action": "drop", "regex": dropped}]


def test_name_override_prefixes_the_cluster_scoped_objects() -> None:
    docs = documents(helm_template({"nameOverride": "gpu"}, release="team-a").stdout)
    roles = {d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRole"}
    assert roles == {"team-a-gpu-exporter", "team-a-gpu-costsvc"}


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"image": {"digest": "sha256:abc"}}, "/image/digest"),
        ({"image": {"repository": "r@sha256:" + "0" * 64}}, "/image/repository"),
        ({"namespaceOverride": "Gpu_System"}, "/namespaceOverride"),
    ],
)
def test_a_bad_option_is_refused_naming_the_field(values: dict[str, Any], named: str) -> None:
    done = helm_template(values, check=False)
    assert done.returncode != 0, f"{values} was accepted"
    assert named in done.stderr, done.stderr


def _pdb(replicas: int, **budget: Any) -> dict[str, Any]:
    return {"costsvc": {"replicas": replicas, "podDisruptionBudget": budget}}


@pytest.mark.parametrize(
    ("values", "named"),
    [
        # basic auth over plain HTTP: the password in clear text
        (
            {"exporter": {"webConfig": {"basicAuth": {"users": {"p": BCRYPT}}}}},
            "/exporter/webConfig/tls/enabled",
        ),
        (
            {"exporter": {"monitor": {"basicAuth": {"secretName": "scrape"}}}},
            "/exporter/webConfig/tls/enabled",
        ),
        # a PodDisruptionBudget that no drain gets through
        (_pdb(1, maxUnavailable=0), "/costsvc/podDisruptionBudget/maxUnavailable"),
        (_pdb(3, maxUnavailable="0%"), "/costsvc/podDisruptionBudget/maxUnavailable"),
        (_pdb(3, minAvailable="100%"), "/costsvc/podDisruptionBudget/minAvailable"),
        (_pdb(1, minAvailable=1), "costsvc.podDisruptionBudget.minAvailable: 1 of 1 replicas"),
        (_pdb(3, minAvailable=3), "costsvc.podDisruptionBudget.minAvailable: 3 of 3 replicas"),
        (_pdb(1, minAvailable="50%"), "minAvailable: 50% of 1 replicas keeps them all"),
    ],
)
def test_values_that_leak_or_block_are_refused(
    values: dict[str, Any], named: str, tmp_path: Path
) -> None:
    done = helm_template(values, check=False)
    assert done.returncode != 0, f"{values} was accepted"
    assert named in done.stderr, done.stderr
    if not named.startswith("/"):
        return  # the template's own check (`fail`): helm lint only logs those
    given = tmp_path / "values.yaml"
    given.write_text(yaml.safe_dump(values))
    linted = run(
        [tool("helm"), "lint", "--strict", str(CHART), "--values", str(given)], check=False
    )
    assert linted.returncode != 0 and named in linted.stdout + linted.stderr


@pytest.mark.parametrize(
    ("values", "spec"),
    [
        (_pdb(3, minAvailable=2), {"minAvailable": 2}),
        (_pdb(3, minAvailable="50%"), {"minAvailable": "50%"}),
        (_pdb(1, maxUnavailable="100%"), {"maxUnavailable": "100%"}),
    ],
)
def test_a_budget_that_lets_drains_through(values: dict[str, Any], spec: dict[str, Any]) -> None:
    docs = documents(helm_template(values).stdout)
    (pdb,) = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert {k: v for k, v in pdb["spec"].items() if k != "selector"} == spec


@pytest.mark.parametrize("enabled", [True, False])
def test_the_metrics_token_is_registered_from_the_secret_the_monitor_reads(enabled: bool) -> None:
    """The cost service's ServiceMonitor sends the token of costsvc.monitor.tokenSecret, which
    an init container registers (role metrics); without the monitor, neither."""
    monitor = {"enabled": enabled, "tokenSecret": "prom-token", "tokenKey": "t", "tokenName": "p"}
    docs = documents(helm_template({"costsvc": {"monitor": monitor}}).stdout)
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    spec = deploy["spec"]["template"]["spec"]
    inits = {c["name"]: c for c in spec["initContainers"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    if not enabled:
        assert "metrics-token" not in inits and "metrics-token" not in volumes
        assert [m["metadata"]["name"] for m in monitors] == ["gpu-exporter"]
        return
    args = inits["metrics-token"]["args"]
    assert args[:6] == ["token", "create", "--name", "p", "--role", "metrics"]
    assert args[args.index("--from-file") + 1] == "/etc/gpu-costsvc/metrics-token/t"
    assert volumes["metrics-token"]["secret"]["secretName"] == "prom-token"
    (costsvc,) = [m for m in monitors if m["metadata"]["name"] == "gpu-costsvc"]
    (endpoint,) = costsvc["spec"]["endpoints"]
    assert endpoint["authorization"]["credentials"] == {"name": "prom-token", "key": "t"}


def _notes(values: dict[str, Any], tmp_path: Path) -> str:
    given = tmp_path / "values.yaml"
    given.write_text(yaml.safe_dump(values))
    args = [tool("helm"), "install", "gpu-finops", str(CHART), "-n", "gpu-finops"]
    done = run([*args, "--dry-run=client", "--values", str(given)])
    return done.stdout.split("NOTES:", 1)[1]


def test_without_the_gpu_operator(tmp_path: Path) -> None:
    """The defaults' GPU Operator assumptions are values, and the notes name them; the
    no-gpu-operator value set (test_chart.py: linted, validated) has none of them."""
    from tests.deploy.test_chart import VALUE_SETS

    values = VALUE_SETS["no-gpu-operator"]
    (ds,) = [d for d in documents(helm_template(values).stdout) if d["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert "runtimeClassName" not in spec and "affinity" not in spec
    assert spec["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    said = "It assumes the NVIDIA GPU Operator: the RuntimeClass nvidia and GPU nodes labelled"
    assert said in _notes({}, tmp_path)
    assert "GPU Operator" not in _notes(values, tmp_path)


SPLIT: dict[str, dict[str, Any]] = {  # two releases, one namespace (docs/deploy.md)
    "gpu-exporter": {"costsvc": {"enabled": False}},
    "gpu-costs": {"exporter": {"enabled": False}, "monitoring": {"fleet": False}},
}


def test_a_split_install_ships_everything_once() -> None:
    """The exporter and the cost service as two releases in one namespace: no object of one
    collides with one of the other, every alert and every dashboard is loaded exactly once,
    and every object is valid for Kubernetes 1.30 and 1.34."""
    kv = validator_module()
    rendered = {r: documents(helm_template(v, release=r).stdout) for r, v in SPLIT.items()}
    keys = [
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
        for docs in rendered.values()
        for d in docs
    ]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    every = [r for p in RULES for g in load_yaml(p)["groups"] for r in g["rules"]]
    shipped = [
        r
        for docs in rendered.values()
        for d in docs
        if d["kind"] == "PrometheusRule"
        for g in d["spec"]["groups"]
        for r in g["rules"]
    ]
    assert sorted(r["alert"] for r in shipped) == sorted(r["alert"] for r in every)
    exporter_rules = [
        r["alert"]
        for d in rendered["gpu-exporter"]
        if d["kind"] == "PrometheusRule"
        for g in d["spec"]["groups"]
        for r in g["rules"]
    ]
    assert "CostServiceDown" not in exporter_rules and "GPUBudgetExceeded" not in exporter_rules
    boards = sorted(p.name for p in (ROOT / "dashboards").glob("*.json"))
    maps = [
        key
        for docs in rendered.values()
        for d in docs
        if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"]["labels"]
        for key in d["data"]
    ]
    assert sorted(maps) == boards
    exporter_boards = [
        k for d in rendered["gpu-exporter"] if d["kind"] == "ConfigMap" for k in d["data"]
    ]
    assert "gpu-finops.json" not in exporter_boards  # the money: the cost service's
    problems = []
    for docs in rendered.values():
        for obj in docs:
            if obj["apiVersion"] == CRD_GROUP:
                continue
            for version in K8S_VERSIONS:
                try:
                    kv.validate(obj, version, strict=True)
                except kv.ValidationError as exc:
                    problems.append(
                        f"{version} {obj['kind']}/{obj['metadata']['name']}: {exc.message}"
                    )
    assert not problems, "\n".join(problems)
