"""Loading deploy/kubernetes, the per-process overlay and docker-compose.yml for the tests, and
checking their commands and environments with the real parsers of gpu-exporter and gpu-costsvc."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any
from unittest import mock

import pytest
import yaml

from costsvc.cli import UsageError as CostsvcUsageError
from costsvc.cli import build_parser as costsvc_parser
from costsvc.kit.settings import Settings as CostsvcSettings
from exporter import flags as exporter_cli
from exporter.catalogue import OFF_BY_DEFAULT

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
OVERLAY = ROOT / "deploy" / "overlays" / "per-process"
COMPOSE = ROOT / "docker-compose.yml"
PROMETHEUS = ROOT / "deploy" / "prometheus.yml"
ALERTMANAGER = ROOT / "deploy" / "alertmanager.yml"
RULES = sorted((ROOT / "alerts").glob("*.rules.yml"))

EXPORTER_PORT, COSTSVC_PORT = 9400, 8080
JOBS = {"gpu-exporter", "gpu-costsvc"}  # the scrape jobs the alert rules assume
K8S_VERSIONS = ("1.30", "1.34")  # the oldest the chart supports, and a recent one
CRD_GROUP = "monitoring.coreos.com/v1"
WORKLOADS = ("DaemonSet", "Deployment")
FIELD_REF_SAMPLE = "gpu-node-1"  # stands for a downward-API value (spec.nodeName)
SECRET_SAMPLE = "postgresql+psycopg://costsvc:secret@postgres:5432/costsvc"


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def kustomization() -> dict[str, Any]:
    return load_yaml(K8S / "kustomization.yaml")


def resource_files() -> list[str]:
    """The files kustomization.yaml lists (its folders are other kustomizations: the chart's
    dashboards, tests/deploy/test_chart.py)."""
    return [name for name in kustomization()["resources"] if not (K8S / name).is_dir()]


def _documents() -> list[tuple[str, dict[str, Any]]]:
    """(file, object) for every object of the files kustomization.yaml lists."""
    out = []
    for name in resource_files():
        text = (K8S / name).read_text(encoding="utf-8")
        out += [(name, doc) for doc in yaml.safe_load_all(text) if doc]
    return out


DOCS = _documents()


def objects(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in DOCS if doc["kind"] == kind]


def one(kind: str, name: str) -> dict[str, Any]:
    (found,) = [doc for doc in objects(kind) if doc["metadata"]["name"] == name]
    return found


def generated_configmaps() -> list[dict[str, Any]]:
    """The ConfigMaps kustomize generates (configMapGenerator), before the name hash."""
    kust = kustomization()
    out = []
    for gen in kust.get("configMapGenerator", []):
        data = {}
        for item in gen.get("files", []):
            key, _, path = item.rpartition("=")
            data[key or Path(path).name] = (K8S / path).read_text(encoding="utf-8")
        meta = {"name": gen["name"], "namespace": kust["namespace"]}
        if gen.get("options", {}).get("labels"):
            meta["labels"] = gen["options"]["labels"]
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    return out


def merge_patch(base: Any, patch: Any) -> Any:
    """A strategic-merge patch of maps only (what the overlay's patch uses)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = merge_patch(base[key], value) if key in base else value
        return out
    return copy.deepcopy(patch)


def overlay_daemonset() -> dict[str, Any]:
    kust = load_yaml(OVERLAY / "kustomization.yaml")
    assert kust["resources"] == ["../../kubernetes"]
    (patch,) = kust["patches"]
    assert patch["target"] == {"kind": "DaemonSet", "name": "gpu-exporter"}
    return merge_patch(one("DaemonSet", "gpu-exporter"), load_yaml(OVERLAY / patch["path"]))


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(workload)
    return [*spec.get("initContainers", []), *spec["containers"]]


def all_containers() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for kind in WORKLOADS:
        for workload in objects(kind):
            for container in containers(workload):
                yield workload, container


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's environment, a downward-API or Secret value replaced by a sample."""
    out = {}
    for var in container.get("env", []):
        if "value" in var:
            out[var["name"]] = str(var["value"])
        elif "fieldRef" in var.get("valueFrom", {}):
            out[var["name"]] = FIELD_REF_SAMPLE
        else:
            assert "secretKeyRef" in var["valueFrom"], var
            out[var["name"]] = SECRET_SAMPLE
    return out


def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE)


def compose_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def dockerfile_entrypoint() -> list[str]:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    (line,) = [ln for ln in text.splitlines() if ln.startswith("ENTRYPOINT")]
    return json.loads(line.removeprefix("ENTRYPOINT"))


def program(entrypoint: list[str] | None) -> str:
    return (entrypoint or dockerfile_entrypoint())[0]


def compose_program(service: dict[str, Any]) -> str | None:
    """gpu-exporter / gpu-costsvc for the services that run the project's image."""
    if "build" not in service:
        return None
    return program(service.get("entrypoint"))


def bind_mounts(service: dict[str, Any]) -> list[tuple[Path, PurePosixPath]]:
    out = []
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            out.append(((ROOT / source).resolve(), PurePosixPath(target)))
    return out


def host_path(service: dict[str, Any], container_path: str) -> Path:
    """Where a path inside a compose container comes from in the repository."""
    wanted = PurePosixPath(container_path)
    for source, target in bind_mounts(service):
        if wanted == target or target in wanted.parents:
            return source / wanted.relative_to(target)
    if "build" in service and wanted.parts[:2] == ("/", "app"):  # COPY'd into /app
        return ROOT / wanted.relative_to("/app")
    raise AssertionError(f"{container_path} is not mounted in {service}")


def port_of(listen_address: str) -> int:
    return int(listen_address.rpartition(":")[2])


def validator_module() -> ModuleType:
    try:
        import kubernetes_validate  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        why = "kubernetes-validate is not installed (the `test` extra of pyproject.toml)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why)
    return kubernetes_validate


def exporter_env_names() -> set[str]:
    names = set()
    for action in exporter_cli.build_parser()._actions:
        for flag in action.option_strings:
            if flag.startswith("--") and not flag.startswith("--no-"):
                names.add(exporter_cli.env_name(flag))
    return names - {exporter_cli.env_name("--help"), exporter_cli.env_name("--version")}


def costsvc_env_names() -> set[str]:
    return {"COSTSVC_" + name.upper() for name in CostsvcSettings.model_fields}


def _exporter_defaults() -> dict[str, str]:
    """Each flag's environment twin -> its default as text (collectors: on/off)."""
    out = {}
    for action in exporter_cli.build_parser()._actions:
        for flag in action.option_strings:
            if flag.startswith("--collector."):
                name = flag.removeprefix("--collector.")
                out[exporter_cli.env_name(flag)] = str(name not in OFF_BY_DEFAULT).lower()
            elif flag.startswith("--") and not flag.startswith("--no-"):
                out[exporter_cli.env_name(flag)] = str(action.default)
    return out


def check_env(env: dict[str, str], where: str) -> None:
    """Every GPU_EXPORTER_* / COSTSVC_* name exists; an exporter twin set to anything but its
    flag's default changes the settings gpu-exporter parses (so it is really read)."""
    exporter_names, costsvc_names = exporter_env_names(), costsvc_env_names()
    defaults = _exporter_defaults()
    baseline = exporter_cli.parse_settings([], {})
    for name, value in env.items():
        if name.startswith(exporter_cli.ENV_PREFIX):
            assert name in exporter_names, f"{where}: {name} is no gpu-exporter flag's twin"
            if value.lower() != defaults[name].lower():
                parsed = exporter_cli.parse_settings([], {name: value})
                assert parsed != baseline, f"{where}: gpu-exporter ignores {name}={value}"
        if name.startswith("COSTSVC_"):
            assert name in costsvc_names, f"{where}: {name} is no gpu-costsvc setting"


def costsvc_settings(env: dict[str, str]) -> CostsvcSettings:
    """The settings gpu-costsvc makes of this environment (JSON values decoded, validators
    run), as it reads them: from the environment; an unknown name is refused."""
    unknown = {k for k in env if k.startswith("COSTSVC_")} - costsvc_env_names()
    assert not unknown, f"no such gpu-costsvc setting: {sorted(unknown)}"
    outside = {k: v for k, v in os.environ.items() if not k.startswith("COSTSVC_")}
    with mock.patch.dict(os.environ, {**outside, **env}, clear=True):
        return CostsvcSettings()


def run_exporter(argv: list[str], env: dict[str, str]) -> exporter_cli.Settings:
    try:
        return exporter_cli.parse_settings(argv, env)
    except exporter_cli.UsageError as exc:
        pytest.fail(f"gpu-exporter {argv} with {env}: {exc}")


def run_costsvc(argv: list[str], env: dict[str, str]) -> CostsvcSettings:
    try:
        costsvc_parser().parse_args(argv)
    except CostsvcUsageError as exc:
        pytest.fail(f"gpu-costsvc {argv}: {exc}")
    return costsvc_settings(env)
