"""The real Prometheus scraping the real exporter (over the fake NVML), and promtool's lint."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.catalogue import COLLECTORS
from exporter.collection import Exporter
from exporter.nvml.boundary import Nvml
from exporter.simulate.fake_nvml import FakeNvml
from exporter.simulate.spec import expand, load
from tests.conftest import require_binary
from tests.procs import ROOT, Process, start_exporter
from tests.prom import Prometheus

H100 = ROOT / "examples" / "fleet-h100x8.yaml"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    binary = require_binary("prometheus")
    exporter, port = start_exporter("--simulate", str(H100), "--collect-interval", "1s")
    prom = Prometheus(binary, tmp_path_factory.mktemp("prom"), [f"127.0.0.1:{port}"])
    try:
        prom.wait_ready()
        prom.until(lambda: prom.query("DCGM_FI_DEV_GPU_TEMP"), 30, "first scrape")
        yield prom
    finally:
        prom.stop()
        exporter.stop()


@pytest.mark.parametrize(
    "expr",
    [
        "DCGM_FI_DEV_GPU_TEMP",
        "avg(DCGM_FI_DEV_GPU_TEMP)",
        "DCGM_FI_DEV_POWER_USAGE",
        "sum(DCGM_FI_DEV_POWER_USAGE)",
        "DCGM_FI_DEV_SM_CLOCK * 1000000",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
    ],
)
def test_queries_answer(prometheus: Prometheus, expr: str) -> None:
    result = prometheus.query(expr)
    assert result, expr
    if not expr.startswith(("avg(", "sum(")):
        assert len(result) == 8
        assert {r["metric"]["gpu"] for r in result} == {str(i) for i in range(8)}


def test_label_values(prometheus: Prometheus) -> None:
    gpus = expand(load(H100))
    assert set(prometheus.label_values("gpu")) >= {str(i) for i in range(8)}
    assert set(prometheus.label_values("UUID")) == {g.uuid for g in gpus}
    assert prometheus.label_values("modelName") == ["NVIDIA H100 80GB HBM3"]
    assert prometheus.label_values("Hostname") == ["gpu-node-h100-01"]


def test_stored_values_match_the_spec(prometheus: Prometheus) -> None:
    spec = load(H100).gpus[0]
    total = prometheus.query("DCGM_FI_DEV_FB_TOTAL")
    assert {float(r["value"][1]) for r in total} == {spec.memory_total_mib}
    reserved = prometheus.query("DCGM_FI_DEV_FB_RESERVED")
    assert {float(r["value"][1]) for r in reserved} == {spec.memory_reserved_mib}
    limit = prometheus.query("DCGM_FI_DEV_ENFORCED_POWER_LIMIT")
    assert {float(r["value"][1]) for r in limit} == {spec.power_limit_w}
    sm = prometheus.query("DCGM_FI_DEV_SM_CLOCK * 1000000")
    assert {float(r["value"][1]) for r in sm} <= {1980e6, 1755e6}
    # the energy counter only goes up, from the spec's starting value
    energy = prometheus.query("min(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION)")
    assert float(energy[0]["value"][1]) >= spec.energy_mj_at_start
    up = prometheus.query("gpu_device_up == 1")
    assert len(up) == 8


# promtool's lint rules that dcgm-exporter's own names break. They are the contract (dashboards
# and alerts in the wild use these names), so they are allowed — on DCGM series only.
DCGM_LINTS = (
    re.compile(r'^(DCGM_FI_\w+) counter metrics should have "_total" suffix$'),
    re.compile(r"^(\w+) label names should be written in 'snake_case' not 'camelCase'$"),
    re.compile(
        r"^(DCGM_FI_DEV_PCIE_REPLAY_COUNTER) metric name should not include type "
        r"'counter'$"
    ),
)


def _exposition() -> str:
    spec = load(ROOT / "examples" / "fleet-mixed.yaml")
    exporter = Exporter(Nvml(FakeNvml(spec)), spec.hostname, COLLECTORS, 5.0)
    exporter.collect_once()
    return exporter.exposition.body("text").decode()


def _promtool(text: str) -> tuple[int, list[str]]:
    promtool = require_binary("promtool")
    done = subprocess.run(
        [promtool, "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, (done.stdout + done.stderr).strip().splitlines()


def test_promtool_finds_only_the_lints_dcgm_names_imply() -> None:
    text = _exposition()
    _rc, problems = _promtool(text)
    assert not any("error while linting" in p for p in problems), problems
    dcgm_counters = set(re.findall(r"^# TYPE (DCGM_FI_\w+) counter$", text, re.M))
    counter_lints = set()
    for line in problems:
        matched = [rx.match(line) for rx in DCGM_LINTS]
        assert any(matched), f"unexpected promtool problem: {line}"
        if matched[0]:
            counter_lints.add(matched[0].group(1))
    assert counter_lints == dcgm_counters
    # the only camelCase label name anywhere is DCGM's modelName
    label_names = set(re.findall(r"[{,]([A-Za-z_][A-Za-z0-9_]*)=\"", text))
    assert {n for n in label_names if re.search(r"[a-z][A-Z]", n)} == {"modelName"}


def test_promtool_finds_nothing_wrong_with_our_own_series() -> None:
    text = _exposition()
    ours = []
    keep = False
    for line in text.splitlines(keepends=True):
        if line.startswith("# HELP "):
            keep = not line.startswith("# HELP DCGM_")
        if keep:
            ours.append(line.replace("modelName=", "model_name="))
    rc, problems = _promtool("".join(ours))
    assert rc == 0 and problems == [], problems
    assert "gpu_device_up" in "".join(ours)


def test_prometheus_process_helper_reports_a_crash(tmp_path: Path) -> None:
    """The helper must not hang when the server dies (guards the fixtures above)."""
    proc = Process(["sh", "-c", "echo boom; exit 3"])
    with pytest.raises(AssertionError, match="boom"):
        proc.wait_for("never printed", timeout=10)
