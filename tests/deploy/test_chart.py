"""deploy/helm/gpu-finops with the real helm (and kustomize, in the real kubectl):

- `helm lint --strict`, and `helm template` of the defaults and of the value sets below, every
  object validated offline for Kubernetes 1.30 and 1.34 (kubernetes-validate, strict) and the
  Prometheus Operator's objects against its CRDs' schemas (tests/deploy/crds);
- the chart's default objects equal deploy/kubernetes's (one source of truth);
- a bad value fails with the field named (values.schema.json): test_chart_values.py;
- what each value set changes, checked with the real parsers of the two programs.
"""

from __future__ import annotations

import base64
import copy
import json
import re
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator

from exporter import webconfig
from tests.deploy.helpers import (
    CRD_GROUP,
    JOBS,
    K8S,
    K8S_VERSIONS,
    RULES,
    check_env,
    container_env,
    load_yaml,
    run_costsvc,
    run_exporter,
    validator_module,
)
from tests.deploy.options import OPTIONS
from tests.deploy.tools import BCRYPT, CHART, documents, helm_template, kustomize, run, tool
from tests.tlscerts import CA

CRDS = Path(__file__).resolve().parent / "crds"
HELM_LABELS = {  # what Helm adds to what deploy/kubernetes has
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
}

VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    # the cost service on NVIDIA's dcgm-exporter and kube-state-metrics, no exporter of ours
    "costsvc-on-dcgm-exporter": {
        "exporter": {"enabled": False},
        "costsvc": {"source": "dcgm-exporter"},
        "monitoring": {"labels": {"release": "kube-prometheus-stack"}},
    },
    "exporter-only": {
        "costsvc": {"enabled": False},
        "exporter": {
            "hostPID": True,
            "podLabels": ["team", "project"],
            "monitor": {"kind": "PodMonitor"},
        },
    },
    "postgresql-3-replicas": {
        "costsvc": {
            "replicas": 3,
            "migrations": "hookJob",
            "clusters": ["east"],
            "cluster": "east",
            "adminToken": {"existingSecret": "my-admin-token"},
            "ingress": {
                "enabled": True,
                "className": "nginx",
                "host": "gpu.example.com",
                "tlsSecret": "gpu-tls",
            },
            "podDisruptionBudget": {"maxUnavailable": 1},
        },
    },
    "tls-web-config": {
        "exporter": {
            "webConfig": {
                "tls": {
                    "enabled": True,
                    "existingSecret": "gpu-exporter-tls",
                    "minVersion": "TLS13",
                },
                "basicAuth": {"users": {"prometheus": BCRYPT}},
            },
            "monitor": {"basicAuth": {"secretName": "gpu-exporter-scrape"}},
        },
        "monitoring": {"labels": {"release": "kps"}},
    },
    # an image by digest, and the common options (test_chart_options.py)
    "digest-and-options": OPTIONS,
    # the driver and container toolkit without the GPU Operator (docs/deploy.md)
    "no-gpu-operator": {
        "exporter": {
            "runtimeClassName": "",
            "affinity": None,
            "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
        },
    },
    # Kueue's LocalQueues watched: the env var and the ClusterRole's rule (test_kueue.py)
    "kueue": {"costsvc": {"kueue": {"apiVersion": "v1beta2"}}},
    "sqlite": {
        "costsvc": {"database": {"sqlite": {"enabled": True, "storageClassName": "standard"}}},
        "networkPolicy": {"enabled": False},
        "dashboards": {"namespace": "monitoring"},
    },
}


@cache
def rendered(name: str) -> tuple[dict[str, Any], ...]:
    return tuple(documents(helm_template(VALUE_SETS[name]).stdout))


def objects(name: str, kind: str) -> list[dict[str, Any]]:
    return [d for d in rendered(name) if d["kind"] == kind]


def one(name: str, kind: str, obj: str | None = None) -> dict[str, Any]:
    (found,) = [d for d in objects(name, kind) if obj is None or d["metadata"]["name"] == obj]
    return found


def pod(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


# --------------------------------------------------------------------------------------------
# lint, schemas
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", VALUE_SETS)
def test_helm_lint_strict(name: str, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(VALUE_SETS[name]))
    done = run([tool("helm"), "lint", "--strict", str(CHART), "--values", str(values)], check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", VALUE_SETS)
def test_rendered_objects_match_the_kubernetes_schema(name: str, version: str) -> None:
    kv = validator_module()
    problems = []
    core = [d for d in rendered(name) if d["apiVersion"] != CRD_GROUP]
    assert core
    for obj in core:
        try:
            kv.validate(obj, version, strict=True)
        except kv.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            problems.append(f"{obj['kind']}/{obj['metadata']['name']} {where}: {exc.message}")
    assert not problems, "\n".join(problems)


def _strict(node: Any) -> Any:
    """A CRD's structural schema as JSON Schema that refuses unknown fields (what the API
    server's strict field validation does; it would prune them silently otherwise)."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if node.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def crd_validator(kind: str) -> Draft7Validator:
    crd = json.loads((CRDS / f"{kind.lower()}.json").read_text())
    assert crd["kind"] == kind and crd["apiVersion"] == CRD_GROUP
    return Draft7Validator(_strict(crd["openAPIV3Schema"]))


def _crd_errors(obj: dict[str, Any]) -> list[str]:
    errors = crd_validator(obj["kind"]).iter_errors(obj)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]


@pytest.mark.parametrize("name", VALUE_SETS)
def test_prometheus_operator_objects_match_their_crds(name: str) -> None:
    crs = [d for d in rendered(name) if d["apiVersion"] == CRD_GROUP]
    assert crs
    for obj in crs:
        assert not _crd_errors(obj), (obj["kind"], _crd_errors(obj))


def test_crd_validation_is_strict() -> None:
    sm = copy.deepcopy(one("defaults", "ServiceMonitor", "gpu-exporter"))
    sm["spec"]["endpoints"][0]["scrapeTimout"] = "10s"  # a typo
    sm["spec"]["endpoints"][0]["interval"] = 15  # not a duration string
    errors = "\n".join(_crd_errors(sm))
    assert "scrapeTimout" in errors and "interval" in errors


# --------------------------------------------------------------------------------------------
# one source of truth: the chart's defaults are deploy/kubernetes
# --------------------------------------------------------------------------------------------


def _normalised(docs: Any, hashed: dict[str, str]) -> dict[tuple[str, str], Any]:
    """Objects by (kind, name), less what Helm adds (its labels, checksum annotations) and
    kustomize's name hash of generated ConfigMaps (``hashed``: hashed name -> name)."""
    text = json.dumps(list(docs))
    for long, short in hashed.items():
        text = text.replace(f'"{long}"', f'"{short}"')
    out = {}
    for obj in json.loads(text):
        metas = [obj["metadata"], obj.get("spec", {}).get("template", {}).get("metadata")]
        for meta in filter(None, metas):
            for key in HELM_LABELS & set(meta.get("labels", {})):
                del meta["labels"][key]
            notes = meta.get("annotations", {})
            for key in [k for k in notes if k.startswith("checksum/")]:
                del notes[key]
            if "annotations" in meta and not notes:
                del meta["annotations"]
        out[(obj["kind"], obj["metadata"]["name"])] = obj
    return out


def test_chart_defaults_render_what_deploy_kubernetes_renders() -> None:
    """Release gpu-finops in namespace gpu-finops, default values, against
    `kubectl kustomize deploy/kubernetes`. The only difference allowed: the Namespace
    (kustomize makes it, Helm installs into one); the admin token's Secret is yours in both
    (like the database's)."""
    base = kustomize(K8S)
    hashed = {
        d["metadata"]["name"]: re.sub(r"-[a-z0-9]{10}$", "", d["metadata"]["name"])
        for d in base
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("gpu-costsvc-cost-model-")
    }
    assert len(hashed) == 1  # the cost model, hash-named so that a change rolls the pods
    kust = _normalised(base, hashed)
    chart = _normalised(rendered("defaults"), {})
    assert kust.pop(("Namespace", "gpu-finops"))["metadata"]["labels"]
    assert sorted(chart) == sorted(kust)
    for key, obj in kust.items():
        assert chart[key] == obj, f"{key}: the chart and deploy/kubernetes differ"


def test_the_equality_test_sees_a_difference() -> None:
    """A value that changes a default is a difference the comparison reports."""
    changed = documents(helm_template({"exporter": {"collectInterval": "10s"}}).stdout)
    a = _normalised(changed, {})[("DaemonSet", "gpu-exporter")]
    b = _normalised(rendered("defaults"), {})[("DaemonSet", "gpu-exporter")]
    assert a != b


# --------------------------------------------------------------------------------------------
# what the value sets do
# --------------------------------------------------------------------------------------------


def test_every_alert_and_every_dashboard() -> None:
    (rule,) = objects("defaults", "PrometheusRule")
    assert rule["spec"]["groups"] == [g for p in RULES for g in load_yaml(p)["groups"]]
    boards = {p.name: p.read_text() for p in (CHART.parents[2] / "dashboards").glob("*.json")}
    maps = [
        d
        for d in objects("defaults", "ConfigMap")
        if "grafana_dashboard" in d["metadata"]["labels"]
    ]
    assert {k: v for m in maps for k, v in m["data"].items()} == boards
    for m in maps:
        assert m["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert m["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    moved = [
        d for d in objects("sqlite", "ConfigMap") if "grafana_dashboard" in d["metadata"]["labels"]
    ]
    assert {d["metadata"]["namespace"] for d in moved} == {"monitoring"}


def test_cost_service_only_on_dcgm_exporter() -> None:
    name = "costsvc-on-dcgm-exporter"
    assert not objects(name, "DaemonSet") and not objects(name, "PodMonitor")
    assert [d["metadata"]["name"] for d in objects(name, "ServiceMonitor")] == ["gpu-costsvc"]
    (main,) = pod(one(name, "Deployment"))["containers"]
    assert run_costsvc(main["args"], container_env(main)).source == "dcgm-exporter"
    for kind in ("ServiceMonitor", "PrometheusRule"):
        for obj in objects(name, kind):
            assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # every alert but those about our exporter (GPUExporterDown would fire: no target)
    every = [r for p in RULES for g in load_yaml(p)["groups"] for r in g["rules"]]
    kept = [r for g in one(name, "PrometheusRule")["spec"]["groups"] for r in g["rules"]]
    ours = ('job="gpu-exporter"', "gpu_exporter_")
    assert kept == [r for r in every if not any(s in r["expr"] for s in ours)]
    assert len(kept) < len(every)
    (policy,) = objects(name, "NetworkPolicy")
    assert policy["metadata"]["name"] == "gpu-costsvc"


def test_exporter_only_with_host_pid_and_a_pod_monitor() -> None:
    name = "exporter-only"
    assert not objects(name, "Deployment") and not objects(name, "ServiceMonitor")
    ds = one(name, "DaemonSet")
    assert pod(ds)["hostPID"] is True and pod(ds)["priorityClassName"] == "system-node-critical"
    (container,) = pod(ds)["containers"]
    check_env(container_env(container), "exporter-only")
    settings = run_exporter([], container_env(container))
    assert settings.pod_labels == ("team", "project")
    monitor = one(name, "PodMonitor")
    # the operator names the job after the pod label jobLabel names: the alerts' job
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
    assert (
        pod(ds) and ds["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] in JOBS
    )


def test_postgresql_with_three_replicas() -> None:
    name = "postgresql-3-replicas"
    deploy = one(name, "Deployment")
    assert deploy["spec"]["replicas"] == 3 and deploy["spec"]["strategy"]["type"] == "RollingUpdate"
    spec = pod(deploy)
    admin, metrics = spec["initContainers"]  # the schema is the hook Job's
    for registers in (admin, metrics):
        run_costsvc(registers["args"], container_env(registers))
    (volume,) = [v for v in spec["volumes"] if v["name"] == "admin-token"]
    assert volume["secret"]["secretName"] == "my-admin-token"
    assert not objects(name, "Secret")  # the user's token, not one of the chart's
    (job,) = objects(name, "Job")
    assert "pre-install" in job["metadata"]["annotations"]["helm.sh/hook"]
    (upgrade,) = pod(job)["containers"]
    assert upgrade["args"] == ["db", "upgrade"]
    (main,) = spec["containers"]
    env = container_env(main)
    assert env["COSTSVC_DATABASE_URL"].startswith("postgresql")
    assert run_costsvc(main["args"], env).clusters == ["east"]
    assert one(name, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    ingress = one(name, "Ingress")
    assert ingress["spec"]["rules"][0]["host"] == "gpu.example.com"
    assert ingress["spec"]["tls"] == [{"secretName": "gpu-tls", "hosts": ["gpu.example.com"]}]


def test_sqlite_on_a_volume() -> None:
    name = "sqlite"
    deploy = one(name, "Deployment")
    assert deploy["spec"]["replicas"] == 1 and deploy["spec"]["strategy"]["type"] == "Recreate"
    claim = one(name, "PersistentVolumeClaim")
    spec = pod(deploy)
    (main,) = spec["containers"]
    url = container_env(main)["COSTSVC_DATABASE_URL"]
    (mount,) = [m for m in main["volumeMounts"] if m["name"] == "data"]
    assert PurePosixPath(url.removeprefix("sqlite:///")).parent == PurePosixPath(mount["mountPath"])
    (volume,) = [v for v in spec["volumes"] if v["name"] == "data"]
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert not objects(name, "NetworkPolicy")


def test_tls_web_config_is_what_the_exporter_reads(tmp_path: Path) -> None:
    """The chart's web-config.yml, with the Secret's files where the pod mounts them, loads
    in the real exporter; the monitor scrapes https with the Secret's CA and basic auth; the
    probes stop asking /health (it needs the password)."""
    name = "tls-web-config"
    ds = one(name, "DaemonSet")
    (container,) = pod(ds)["containers"]
    env = container_env(container)
    check_env(env, name)
    settings = run_exporter([], env)
    assert settings.web_config_file is not None
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert PurePosixPath(str(settings.web_config_file)).parent == PurePosixPath(
        mounts["web-config"]
    )
    volumes = {v["name"]: v for v in pod(ds)["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "gpu-exporter-tls"
    secret = one(name, "Secret", volumes["web-config"]["secret"]["secretName"])
    text = secret["stringData"][settings.web_config_file.name]
    ca = CA(tmp_path)
    issued = ca.issue("tls", ("gpu-exporter.gpu-finops.svc",))
    issued.cert.rename(tmp_path / "tls.crt")
    issued.key.rename(tmp_path / "tls.key")
    local = tmp_path / "web-config.yml"
    local.write_text(text.replace(mounts["tls"] + "/", f"{tmp_path}/"))
    config = webconfig.load(local)
    assert config.tls is not None and set(config.users) == {"prometheus"}
    assert config.tls.minimum_version.name == "TLSv1_3"
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["tcpSocket"] == {"port": "metrics"}
    (endpoint,) = one(name, "ServiceMonitor", "gpu-exporter")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": "gpu-exporter-tls", "key": "ca.crt"}
    assert endpoint["tlsConfig"]["serverName"] == "gpu-exporter.gpu-finops.svc"
    assert endpoint["basicAuth"]["password"] == {"name": "gpu-exporter-scrape", "key": "password"}
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/web-config"])


def test_tls_without_basic_auth_keeps_the_health_probes_over_https() -> None:
    values = {"exporter": {"webConfig": {"tls": {"enabled": True, "existingSecret": "t"}}}}
    docs = documents(helm_template(values).stdout)
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    (container,) = pod(ds)["containers"]
    assert container["readinessProbe"]["httpGet"] == {
        "path": "/health",
        "port": "metrics",
        "scheme": "HTTPS",
    }


def test_the_admin_token_secret_is_random_and_kept_on_uninstall() -> None:
    """costsvc.adminToken.create: the chart's Secret, random (kept by lookup on upgrades)."""
    values = {"costsvc": {"adminToken": {"create": True, "existingSecret": ""}}}
    first, second = (documents(helm_template(values).stdout) for _ in range(2))
    (made,) = [d for d in first if d["kind"] == "Secret"]
    (again,) = [d for d in second if d["kind"] == "Secret"]
    token = base64.b64decode(made["data"]["token"]).decode()
    assert re.fullmatch(r"gfo_[A-Za-z0-9]{43}", token)
    assert again["data"] != made["data"]  # new on a fresh install (kept by lookup after)
    assert made["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_notes_say_how_to_get_the_token_and_open_the_pages() -> None:
    done = run(
        [tool("helm"), "install", "gpu-finops", str(CHART), "-n", "gpu-finops", "--dry-run=client"]
    )
    notes = done.stdout.split("NOTES:", 1)[1]
    assert "get secret gpu-costsvc-admin-token -o jsonpath='{.data.token}' | base64 -d" in notes
    assert "port-forward service/gpu-costsvc 8080:8080" in notes
    assert "monitoring.labels.release" in notes
