"""docker-compose.yml, deploy/prometheus.yml, deploy/alertmanager.yml and the Dockerfile against
the code: the commands parse with the real parsers of gpu-exporter and gpu-costsvc, images are
pinned, mounted paths exist, ports and scrape targets agree, the scrape job names are those the
alert rules assume, and `promtool check config` passes with the rule files laid out as in the
container.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from costsvc.rules.cost_model import load as load_cost_model
from exporter.simulate.spec import load as load_fleet_spec
from tests.conftest import require_binary
from tests.deploy.helpers import (
    ALERTMANAGER,
    COSTSVC_PORT,
    EXPORTER_PORT,
    JOBS,
    PROMETHEUS,
    ROOT,
    RULES,
    bind_mounts,
    check_env,
    compose,
    compose_env,
    compose_program,
    dockerfile_entrypoint,
    host_path,
    load_yaml,
    one,
    pod_spec,
    port_of,
    run_costsvc,
    run_exporter,
)


def test_env_names_exist() -> None:
    for name, service in compose()["services"].items():
        check_env(compose_env(service), f"docker-compose {name}")


def test_compose_commands_parse_with_the_real_parsers() -> None:
    programs = {}
    for name, service in compose()["services"].items():
        program = compose_program(service)
        if program is None:
            continue
        programs[name] = program
        env, argv = compose_env(service), list(service.get("command", []))
        if program == "gpu-exporter":
            settings = run_exporter(argv, env)
            assert port_of(settings.listen_address) == EXPORTER_PORT
            assert settings.simulate is not None
            spec = host_path(service, str(settings.simulate))
            assert load_fleet_spec(spec).hostname
        else:
            assert program == "gpu-costsvc", name
            settings = run_costsvc(argv, env)
            assert settings.cost_model is not None
            assert load_cost_model(host_path(service, str(settings.cost_model))).versions
    assert sorted(programs.values()).count("gpu-exporter") == 2  # two simulated nodes
    fleets = {
        tuple(compose()["services"][n]["command"])
        for n, p in programs.items()
        if p == "gpu-exporter"
    }
    assert len(fleets) == 2


def test_compose_cost_service_wiring() -> None:
    services = compose()["services"]
    serve = [
        n
        for n, s in services.items()
        if compose_program(s) == "gpu-costsvc" and s["command"][0] == "serve"
    ]
    migrate = [
        n
        for n, s in services.items()
        if compose_program(s) == "gpu-costsvc" and s["command"][:2] == ["db", "upgrade"]
    ]
    assert len(serve) == 1 and len(migrate) == 1
    costsvc = services[serve[0]]
    assert costsvc["depends_on"][migrate[0]] == {"condition": "service_completed_successfully"}
    env = compose_env(costsvc)
    assert env == compose_env(services[migrate[0]])
    assert env["COSTSVC_PROMETHEUS_URL"] == "http://prometheus:9090"
    url = re.fullmatch(
        r"postgresql\+psycopg://(\w+):(\w+)@([\w-]+):5432/(\w+)", env["COSTSVC_DATABASE_URL"]
    )
    assert url, env["COSTSVC_DATABASE_URL"]
    db = services[url[3]]
    assert db["image"].startswith("postgres:") and "healthcheck" in db
    db_env = compose_env(db)
    assert (db_env["POSTGRES_USER"], db_env["POSTGRES_PASSWORD"], db_env["POSTGRES_DB"]) == (
        url[1],
        url[2],
        url[4],
    )
    for name in (*serve, *migrate):
        assert services[name]["depends_on"][url[3]] == {"condition": "service_healthy"}


def test_compose_images_pinned_and_mounts_exist() -> None:
    services = compose()["services"]
    built = set()
    for name, service in services.items():
        image = service.get("image", "")
        if "build" in service:
            assert (ROOT / service["build"] / "Dockerfile").is_file()
            built.add(image)
        repo, _, tag = image.rpartition(":")
        assert repo and tag and tag != "latest" and "/" not in tag, f"{name}: pin {image!r}"
        for source, _ in bind_mounts(service):
            assert source.exists(), f"{name}: {source} does not exist"
    assert len(built) == 1  # one image for both halves


def test_compose_ports_and_scrape_targets() -> None:
    services = compose()["services"]
    prom = load_yaml(PROMETHEUS)
    jobs = {job["job_name"]: job for job in prom["scrape_configs"]}
    assert set(jobs) >= JOBS
    wanted = {"gpu-exporter": "gpu-exporter", "gpu-costsvc": "gpu-costsvc"}
    for job, program in wanted.items():
        targets = [t for sc in jobs[job]["static_configs"] for t in sc["targets"]]
        assert targets
        for target in targets:
            host, _, port = target.rpartition(":")
            service = services[host]
            assert compose_program(service) == program, target
            env = compose_env(service)
            listen = env.get("GPU_EXPORTER_WEB_LISTEN_ADDRESS") or env["COSTSVC_LISTEN_ADDRESS"]
            assert (
                port_of(listen)
                == int(port)
                == (EXPORTER_PORT if program == "gpu-exporter" else COSTSVC_PORT)
            )
            published = [p.rpartition(":")[2] for p in service.get("ports", [])]
            assert published == [port], f"{host} publishes {published}"
    assert {h for t in jobs["gpu-exporter"]["static_configs"] for h in t["targets"]} == {
        f"{n}:{EXPORTER_PORT}" for n, s in services.items() if compose_program(s) == "gpu-exporter"
    }
    (am,) = [
        t
        for a in prom["alerting"]["alertmanagers"]
        for sc in a["static_configs"]
        for t in sc["targets"]
    ]
    assert services[am.rpartition(":")[0]]["image"].startswith("prom/alertmanager:")


def test_job_names_are_those_the_alerts_assume() -> None:
    in_rules = {m for path in RULES for m in re.findall(r'job="([^"]+)"', path.read_text())}
    assert in_rules == JOBS
    prom_jobs = {job["job_name"] for job in load_yaml(PROMETHEUS)["scrape_configs"]}
    assert in_rules <= prom_jobs


def _prometheus_service() -> dict[str, Any]:
    (svc,) = [
        s
        for s in compose()["services"].values()
        if s.get("image", "").startswith("prom/prometheus:")
    ]
    return svc


def _container_config(service: dict[str, Any], flag: str) -> str:
    (arg,) = [a for a in service["command"] if a.startswith(f"--{flag}=")]
    return arg.split("=", 1)[1]


def test_rule_files_resolve_to_the_alert_rules() -> None:
    svc = _prometheus_service()
    config = PurePosixPath(_container_config(svc, "config.file"))
    assert host_path(svc, str(config)) == PROMETHEUS
    found: set[Path] = set()
    for pattern in load_yaml(PROMETHEUS)["rule_files"]:
        path = config.parent / pattern  # relative paths are relative to the config file
        directory = host_path(svc, str(path.parent))
        found |= set(directory.glob(path.name))
    assert found == set(RULES) and found


def test_grafana_provisioning_mounts() -> None:
    (svc,) = [
        s
        for s in compose()["services"].values()
        if s.get("image", "").startswith("grafana/grafana:")
    ]
    prov = ROOT / "dashboards" / "provisioning"
    mounts = {target: source for source, target in bind_mounts(svc)}
    etc = PurePosixPath("/etc/grafana/provisioning")
    assert mounts[etc / "datasources" / "datasources.yml"] == prov / "datasources.yml"
    assert mounts[etc / "dashboards" / "dashboards.yml"] == prov / "dashboards.yml"
    (provider,) = load_yaml(prov / "dashboards.yml")["providers"]
    assert mounts[PurePosixPath(provider["options"]["path"])] == ROOT / "dashboards"
    (ds,) = load_yaml(prov / "datasources.yml")["datasources"]
    host = re.fullmatch(r"http://([\w-]+):9090", ds["url"])
    assert host and compose()["services"][host[1]] == _prometheus_service()


def test_alertmanager_config_routes_to_known_receivers() -> None:
    config = load_yaml(ALERTMANAGER)
    receivers = {r["name"] for r in config["receivers"]}

    def walk(route: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield route
        for child in route.get("routes", []):
            yield from walk(child)

    for route in walk(config["route"]):
        assert route.get("receiver", config["route"]["receiver"]) in receivers
    svc = [
        s
        for s in compose()["services"].values()
        if s.get("image", "").startswith("prom/alertmanager:")
    ]
    assert host_path(svc[0], _container_config(svc[0], "config.file")) == ALERTMANAGER


@pytest.mark.prometheus
def test_promtool_check_config(tmp_path: Path) -> None:
    """The compose Prometheus configuration with its rule files laid out as in the container."""
    promtool = require_binary("promtool")
    svc = _prometheus_service()
    config = PurePosixPath(_container_config(svc, "config.file"))
    shutil.copy(PROMETHEUS, tmp_path / config.name)
    for pattern in load_yaml(PROMETHEUS)["rule_files"]:
        sub = (config.parent / pattern).parent
        host = host_path(svc, str(sub))
        dest = tmp_path / sub.relative_to(config.parent)
        dest.mkdir(parents=True, exist_ok=True)
        for rule in host.glob(PurePosixPath(pattern).name):
            shutil.copy(rule, dest / rule.name)
    for job in load_yaml(PROMETHEUS)["scrape_configs"]:  # token files come from a volume
        if token := job.get("authorization", {}).get("credentials_file"):
            assert not PurePosixPath(token).is_absolute()
            (tmp_path / token).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / token).write_text("gfo_token\n")
    out = subprocess.run(
        [promtool, "check", "config", str(tmp_path / config.name)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(RULES)} rule files found" in out.stdout + out.stderr


def test_dockerfile_serves_both_halves() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert dockerfile_entrypoint() == ["gpu-exporter"]
    exposed = {
        int(p) for line in text.splitlines() if line.startswith("EXPOSE") for p in line.split()[1:]
    }
    assert {EXPORTER_PORT, COSTSVC_PORT} <= exposed
    (user,) = [line.split()[1] for line in text.splitlines() if line.startswith("USER")]
    assert user.isdigit() and int(user) != 0  # numeric, so runAsNonRoot can be verified
    assert pod_spec(one("Deployment", "gpu-costsvc"))["securityContext"]["runAsUser"] == int(user)
