"""deploy/kubernetes (and the per-process overlay) against the Kubernetes schemas and the code.

- (a) every manifest validates, strictly (no unknown field), against the Kubernetes OpenAPI
  schema, offline (kubernetes-validate); the Prometheus Operator objects structurally: the
  ServiceMonitors select the Services by label and name their ports, the PrometheusRule holds
  exactly the groups of alerts/*.rules.yml;
- (b) security: no hostPID by default, the pod-resources socket read-only, no privilege or
  capability, read-only root file systems, RBAC get/list/watch on pods and namespaces only;
- (c) consistency: every GPU_EXPORTER_* / COSTSVC_* variable exists and parses with the real
  parsers, ports, probes, the cost model ConfigMap.

docker-compose.yml and deploy/prometheus.yml: test_compose.py.
"""

from __future__ import annotations

import copy
import importlib.util
import re
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any

import pytest

from costsvc.rules.cost_model import load as load_cost_model
from tests.deploy.helpers import (
    COSTSVC_PORT,
    CRD_GROUP,
    DOCS,
    EXPORTER_PORT,
    FIELD_REF_SAMPLE,
    JOBS,
    K8S,
    K8S_VERSIONS,
    OVERLAY,
    ROOT,
    RULES,
    WORKLOADS,
    all_containers,
    check_env,
    container_env,
    costsvc_env_names,
    exporter_env_names,
    generated_configmaps,
    kustomization,
    load_yaml,
    objects,
    one,
    overlay_daemonset,
    pod_spec,
    port_of,
    program,
    resource_files,
    run_costsvc,
    run_exporter,
    validator_module,
)
from tests.deploy.tools import kustomize

# --------------------------------------------------------------------------------------------
# (a) Schemas
# --------------------------------------------------------------------------------------------


def test_kustomization_lists_every_manifest() -> None:
    listed = set(resource_files())
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk
    for name in listed:
        assert (K8S / name).is_file()


def _core_objects() -> list[tuple[str, dict[str, Any]]]:
    core = [(f, d) for f, d in DOCS if d["apiVersion"] != CRD_GROUP]
    core += [("configMapGenerator", cm) for cm in generated_configmaps()]
    core += [("overlays/per-process", overlay_daemonset())]
    return core


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(
    ("source", "obj"),
    _core_objects(),
    ids=[f"{f}:{d['kind']}/{d['metadata']['name']}" for f, d in _core_objects()],
)
def test_manifest_matches_kubernetes_schema(source: str, obj: dict[str, Any], version: str) -> None:
    kv = validator_module()
    wanted = kv.latest_version() if version == "latest" else version
    try:
        kv.validate(obj, wanted, strict=True)
    except kv.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        pytest.fail(f"{source}: {obj['kind']} {path}: {exc.message}")


def test_validator_is_strict() -> None:
    kv = validator_module()
    broken = copy.deepcopy(one("DaemonSet", "gpu-exporter"))
    pod_spec(broken)["containers"][0]["readOnlyRootFilesytem"] = True  # a typo
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, kv.latest_version(), strict=True)


def test_only_known_kinds_and_one_namespace() -> None:
    namespace = kustomization()["namespace"]
    assert [ns["metadata"]["name"] for ns in objects("Namespace")] == [namespace]
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    for name, doc in DOCS:
        if doc["kind"] not in cluster_scoped:
            assert doc["metadata"].get("namespace") == namespace, name
    kinds = {doc["kind"] for _, doc in DOCS}
    assert "Secret" not in kinds  # credentials are created by hand, never committed


def _service_for(selector: dict[str, str], namespaces: list[str]) -> dict[str, Any]:
    matches = [
        svc
        for svc in objects("Service")
        if svc["metadata"]["namespace"] in namespaces
        and selector.items() <= svc["metadata"].get("labels", {}).items()
    ]
    assert len(matches) == 1, f"{selector} selects {len(matches)} Services"
    return matches[0]


def _workload_for(service: dict[str, Any]) -> dict[str, Any]:
    selector = service["spec"]["selector"]
    matches = [
        w
        for kind in WORKLOADS
        for w in objects(kind)
        if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
    ]
    assert len(matches) == 1, f"Service {service['metadata']['name']} selects {len(matches)}"
    return matches[0]


def test_service_monitors_structure() -> None:
    monitors = objects("ServiceMonitor")
    jobs = set()
    for sm in monitors:
        assert sm["apiVersion"] == CRD_GROUP
        assert sm["metadata"]["name"] and sm["metadata"]["namespace"]
        spec = sm["spec"]
        assert set(spec) <= {"selector", "namespaceSelector", "endpoints", "jobLabel"}
        namespaces = spec.get("namespaceSelector", {}).get("matchNames")
        namespaces = namespaces or [sm["metadata"]["namespace"]]
        service = _service_for(spec["selector"]["matchLabels"], namespaces)
        # the operator's job label is the Service's name unless jobLabel says otherwise
        assert "jobLabel" not in spec
        jobs.add(service["metadata"]["name"])
        ports = {p["name"]: p for p in service["spec"]["ports"]}
        assert spec["endpoints"]
        for endpoint in spec["endpoints"]:
            assert endpoint["port"] in ports, f"{sm['metadata']['name']}: {endpoint['port']}"
            assert endpoint.get("path", "/metrics") == "/metrics"
            for key in ("interval", "scrapeTimeout"):
                assert re.fullmatch(r"\d+[smh]", endpoint[key]), endpoint[key]
            # namespace/pod/container on the series name a GPU's holder (exporter) or a
            # charged pod (cost service): the target's own labels of those names must go
            assert not endpoint.get("honorLabels", False)
            drops = [r for r in endpoint.get("relabelings", []) if r.get("action") == "labeldrop"]
            assert drops, "expected a labeldrop of the operator's namespace/pod labels"
            for label in ("namespace", "pod", "container"):
                assert any(re.fullmatch(r["regex"], label) for r in drops), label
            for label in ("job", "instance", "__address__"):
                assert not any(re.fullmatch(r["regex"], label) for r in drops), label
    assert jobs == JOBS


def test_services_reach_their_pods() -> None:
    expected = {"gpu-exporter": ("metrics", EXPORTER_PORT), "gpu-costsvc": ("http", COSTSVC_PORT)}
    assert {s["metadata"]["name"] for s in objects("Service")} == set(expected)
    for service in objects("Service"):
        name = service["metadata"]["name"]
        workload = _workload_for(service)
        (port,) = service["spec"]["ports"]
        assert (port["name"], port["port"]) == expected[name]
        container_ports = {
            p["name"]: p["containerPort"]
            for c in pod_spec(workload)["containers"]
            for p in c.get("ports", [])
        }
        assert container_ports[port["targetPort"]] == port["port"]
    # the DaemonSet's Service is headless: one endpoint per node, scraped one by one
    assert one("Service", "gpu-exporter")["spec"]["clusterIP"] == "None"


def test_prometheus_rule_is_the_rules_files() -> None:
    (rule,) = objects("PrometheusRule")
    assert rule["apiVersion"] == CRD_GROUP
    assert set(rule["spec"]) == {"groups"}
    groups = [g for path in RULES for g in load_yaml(path)["groups"]]
    assert rule["spec"]["groups"] == groups, "run: python deploy/prometheusrule.py"
    for group in rule["spec"]["groups"]:
        assert group["name"] and group["rules"]
        for r in group["rules"]:
            assert ("alert" in r) != ("record" in r) and r["expr"]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "prometheusrule", ROOT / "deploy/prometheusrule.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_prometheus_rule_file_is_the_generators_output() -> None:
    assert _generator().main(["--check"]) == 0, "run: python deploy/prometheusrule.py"


def test_kustomize_build() -> None:
    """The real kustomize (in kubectl) builds the base and the overlay."""
    base_docs = kustomize(K8S)
    over_docs = kustomize(OVERLAY)
    dashboards = sorted((ROOT / "dashboards").glob("*.json"))
    assert len(base_docs) == len(DOCS) + len(generated_configmaps()) + len(dashboards)
    (ds,) = [d for d in over_docs if d["kind"] == "DaemonSet"]
    assert ds == overlay_daemonset()
    assert [d for d in over_docs if d["kind"] != "DaemonSet"] == [
        d for d in base_docs if d["kind"] != "DaemonSet"
    ]


# --------------------------------------------------------------------------------------------
# (b) Security
# --------------------------------------------------------------------------------------------


def test_daemonset_default_has_no_host_namespaces() -> None:
    spec = pod_spec(one("DaemonSet", "gpu-exporter"))
    for key in ("hostPID", "hostNetwork", "hostIPC"):
        assert not spec.get(key, False), key


def test_per_process_overlay_adds_host_pid_only() -> None:
    base, overlay = one("DaemonSet", "gpu-exporter"), overlay_daemonset()
    assert pod_spec(overlay)["hostPID"] is True
    del pod_spec(overlay)["hostPID"]
    assert overlay == base


def test_host_paths_are_the_read_only_pod_resources_socket() -> None:
    for kind in WORKLOADS:
        for workload in objects(kind):
            volumes = {v["name"]: v for v in pod_spec(workload).get("volumes", [])}
            host = {n for n, v in volumes.items() if "hostPath" in v}
            if workload["metadata"]["name"] != "gpu-exporter":
                assert not host, workload["metadata"]["name"]
                continue
            assert host == {"pod-resources"}
            assert volumes["pod-resources"]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
            (container,) = pod_spec(workload)["containers"]
            mounts = [m for m in container["volumeMounts"] if m["name"] == "pod-resources"]
            assert mounts and all(m.get("readOnly") is True for m in mounts)
            socket = container_env(container)["GPU_EXPORTER_POD_RESOURCES_SOCKET"]
            assert PurePosixPath(socket).parent == PurePosixPath(mounts[0]["mountPath"])


def test_containers_hold_no_privilege() -> None:
    for workload, container in all_containers():
        where = f"{workload['metadata']['name']}/{container['name']}"
        sc = container.get("securityContext", {})
        assert sc.get("privileged", False) is False, where
        assert sc.get("allowPrivilegeEscalation") is False, where
        assert sc.get("readOnlyRootFilesystem") is True, where
        assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
        assert not sc.get("capabilities", {}).get("add"), where
        assert "resources" in container and {"requests", "limits"} <= set(container["resources"])
        pod_sc = pod_spec(workload).get("securityContext", {})
        assert pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", where


def test_non_root_where_possible() -> None:
    """runAsNonRoot is true wherever it is set; only the exporter runs as uid 0, to reach the
    kubelet's root-only pod-resources socket (with no capabilities, see above)."""
    for workload, container in all_containers():
        pod_sc = pod_spec(workload).get("securityContext", {})
        sc = {**pod_sc, **container.get("securityContext", {})}
        for ctx in (pod_sc, container.get("securityContext", {})):
            if "runAsNonRoot" in ctx:
                assert ctx["runAsNonRoot"] is True
        if workload["metadata"]["name"] == "gpu-exporter":
            assert sc.get("runAsUser") == 0
        else:
            assert sc.get("runAsNonRoot") is True and sc.get("runAsUser", 0) != 0


def test_rbac_is_read_only_pods_namespaces_and_resourceslices() -> None:
    roles = {r["metadata"]["name"]: r for r in objects("ClusterRole") + objects("Role")}
    assert not objects("Role") and not objects("RoleBinding")
    allowed = {
        "": {"pods", "namespaces", "resourcequotas"},
        "resource.k8s.io": {"resourceslices"},
        "apps": {"replicasets"},  # workloads and quotas: docs/rightsizing.md
        "batch": {"jobs"},
        "kueue.x-k8s.io": {"localqueues"},  # a LocalQueue's ClusterQueue: docs/queues.md
    }
    for role in roles.values():
        for rule in role["rules"]:
            (group,) = rule["apiGroups"]  # one API group per rule: each can be dropped alone
            assert set(rule["verbs"]) <= {"get", "list", "watch"}
            assert set(rule["resources"]) <= allowed[group]
            assert "resourceNames" not in rule and "nonResourceURLs" not in rule
    granted: dict[str, set[str]] = {}
    for binding in objects("ClusterRoleBinding"):
        assert binding["roleRef"]["kind"] == "ClusterRole"
        role = roles[binding["roleRef"]["name"]]
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount"
            granted.setdefault(subject["name"], set()).update(
                res for rule in role["rules"] for res in rule["resources"]
            )
    # the exporter watches its node's pods and ResourceSlices (DRA); the cost service pods and
    # namespaces (labels), ReplicaSets and Jobs (workloads) and ResourceQuotas
    # (docs/rightsizing.md); Kueue's LocalQueues only in overlays/kueue (test_kueue.py)
    costsvc = {"pods", "namespaces", "resourcequotas", "replicasets", "jobs"}
    assert granted == {"gpu-exporter": {"pods", "resourceslices"}, "gpu-costsvc": costsvc}
    accounts = {sa["metadata"]["name"] for sa in objects("ServiceAccount")}
    for kind in WORKLOADS:
        for workload in objects(kind):
            assert pod_spec(workload)["serviceAccountName"] in accounts


def test_database_url_comes_from_a_secret() -> None:
    for _, container in all_containers():
        if program(container.get("command")) != "gpu-costsvc":
            continue
        (var,) = [v for v in container["env"] if v["name"] == "COSTSVC_DATABASE_URL"]
        assert "value" not in var and var["valueFrom"]["secretKeyRef"]["name"]


# --------------------------------------------------------------------------------------------
# (c) Consistency with the code
# --------------------------------------------------------------------------------------------


def test_env_names_exist() -> None:
    assert "GPU_EXPORTER_KUBERNETES_NODE_NAME" in exporter_env_names()  # the table is read
    assert "COSTSVC_LISTEN_ADDRESS" in costsvc_env_names()
    for workload, container in all_containers():
        check_env(container_env(container), f"{workload['metadata']['name']}/{container['name']}")


def test_kubernetes_commands_parse_and_ports_match() -> None:
    exporter = one("DaemonSet", "gpu-exporter")
    (container,) = pod_spec(exporter)["containers"]
    assert program(container.get("command")) == "gpu-exporter"
    settings = run_exporter(container.get("args", []), container_env(container))
    assert port_of(settings.listen_address) == EXPORTER_PORT
    assert settings.kube_node_name == settings.hostname == FIELD_REF_SAMPLE
    (port,) = container["ports"]
    assert port["containerPort"] == EXPORTER_PORT
    env = {v["name"]: v for v in container["env"]}
    for name in ("GPU_EXPORTER_KUBERNETES_NODE_NAME", "GPU_EXPORTER_HOSTNAME"):
        assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "metrics"}
    assert not pod_spec(exporter).get("enableServiceLinks", True)

    costsvc = one("Deployment", "gpu-costsvc")
    assert costsvc["spec"]["replicas"] == 1
    spec = pod_spec(costsvc)
    assert not spec.get("enableServiceLinks", True)
    init, admin, metrics = spec["initContainers"]
    assert [*init["command"], *init["args"]] == ["gpu-costsvc", "db", "upgrade"]
    run_costsvc(init["args"], container_env(init))
    # the admin token and Prometheus's of Secrets, registered once, a changed one not taken
    # (tests/costsvc/test_replica_start.py, test_cli_ensure_token.py)
    (monitor,) = one("ServiceMonitor", "gpu-costsvc")["spec"]["endpoints"]
    scraped = monitor["authorization"]["credentials"]
    for container, role, secret in (
        (admin, "admin", "gpu-costsvc-admin-token"),
        (metrics, "metrics", scraped["name"]),
    ):
        args = container["args"]
        assert container["command"] == ["gpu-costsvc"] and args[:2] == ["token", "create"]
        assert args[args.index("--role") + 1] == role and "--ensure" in args
        run_costsvc(args, container_env(container))
        token_file = PurePosixPath(args[args.index("--from-file") + 1])
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == container["name"]]
        assert token_file.parent == PurePosixPath(mount["mountPath"]) and mount["readOnly"]
        (volume,) = [v for v in spec["volumes"] if v["name"] == container["name"]]
        assert volume["secret"]["secretName"] == secret
    assert token_file.name == scraped["key"]
    (main,) = spec["containers"]
    assert main["command"] == ["gpu-costsvc"] and main["args"][0] == "serve"
    settings = run_costsvc(main["args"], container_env(main))
    assert port_of(settings.listen_address) == COSTSVC_PORT
    (port,) = main["ports"]
    assert (port["name"], port["containerPort"]) == ("http", COSTSVC_PORT)
    for probe in ("startupProbe", "readinessProbe"):
        assert main[probe]["httpGet"] == {"path": "/healthz", "port": "http"}


def test_cost_model_config_map_is_mounted_and_valid(tmp_path: Path) -> None:
    (cm,) = generated_configmaps()
    spec = pod_spec(one("Deployment", "gpu-costsvc"))
    (volume,) = [v for v in spec["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == cm["metadata"]["name"]
    (item,) = volume["configMap"]["items"]
    assert item["key"] in cm["data"]
    (main,) = spec["containers"]
    (mount,) = [m for m in main["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    assert container_env(main)["COSTSVC_COST_MODEL"] == f"{mount['mountPath']}/{item['path']}"
    path = tmp_path / "cost-model.yaml"
    path.write_text(cm["data"][item["key"]], encoding="utf-8")
    assert load_cost_model(path).versions
