"""One MIG geometry rule, end to end: an A30 (4 compute and 4 memory slices, not 7 and 8) in
MIG mode as 4 x 1g.6gb, every instance held all hour by its own team's pod. The exporter runs
in simulate mode over the fake NVML (its geometry read as from a real A30), an hour of its
scrapes goes into a real Prometheus, and the cost service ingests it through our series and
through the dcgm-exporter source (the same exporter's DCGM-compatible series, which carry no
geometry: the per-model table decides), on the compute and the memory basis, into SQLite and
PostgreSQL: each team pays 1/4 of the GPU and nothing is idle."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from costsvc.rules.cost_model import CostModel, parse
from demo.cluster import pod_labels
from demo.history import Clock, FamilyFiles, simulated_node
from exporter.simulate.spec import load
from tests.costsvc.conftest import fresh_database, prometheus_over
from tests.costsvc.history import ingest_with
from tests.costsvc.history_checks import assert_every_hour_adds_up, by_team
from tests.prom import Prometheus

A30 = "NVIDIA A30"
HOUR = datetime(2026, 11, 18, 10, tzinfo=UTC)
TEAMS = ("a", "b", "c", "d")
UP = "# TYPE up gauge\nup 1"
EXPORTER = 'job="gpu-exporter",instance="a30-node:9400"'
KSM = 'job="kube-state-metrics",instance="ksm:8080"'
PRICE = 2_000_000  # 2.00 per GPU-hour: a quarter is 0.500000
SPEC = {
    "hostname": "a30-node",
    "epoch": (HOUR - timedelta(minutes=2)).isoformat(),
    "gpus": [
        {
            "model": A30,
            "memory_total_mib": 24576,
            "utilization": {"gpu": 0},
            "mig": [
                {"profile": "1g.6gb", "gi_id": gi, "memory_used_mib": 1000} for gi in (1, 2, 3, 4)
            ],
        }
    ],
    "pods": [
        {
            "namespace": f"ns-{team}",
            "name": f"pod-{team}",
            "labels": {"team": team},
            "containers": [
                {
                    "name": "main",
                    "devices": [{"resource": "nvidia.com/mig-1g.6gb", "ids": [f"gpu0/gi{gi}"]}],
                }
            ],
        }
        for gi, team in enumerate(TEAMS, 1)
    ],
}


def model(basis: str) -> CostModel:
    return parse(
        {
            "policies": {"mig_share_basis": basis},
            "versions": [
                {
                    "effective_from": "2026-11-01T00:00:00Z",
                    "prices": [{"model": A30, "hourly": "2.00"}],
                }
            ],
        }
    )


@pytest.fixture(scope="module")
def a30(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, str]]:
    """A real Prometheus holding an hour (and a minute either side) of the A30 node's scrapes,
    every 15 s, with kube-state-metrics' pod labels; and the exposition of one collection."""
    work = tmp_path_factory.mktemp("a30")
    spec_path = work / "fleet-a30.yaml"
    spec_path.write_text(yaml.safe_dump(SPEC, sort_keys=False))
    spec = load(spec_path)
    start = HOUR.timestamp() - 60
    clock = Clock(start)
    built = simulated_node(spec_path, clock)
    families = FamilyFiles(work / "families")
    exposition = ""
    try:
        while clock.t <= HOUR.timestamp() + 3660:
            built.exporter.collect_once()
            body = built.exporter.exposition.body("openmetrics").decode()
            exposition = exposition or body
            stamp = int(clock.t)
            families.add(body, stamp, EXPORTER)
            families.add("\n".join(pod_labels([spec], clock.t - HOUR.timestamp())), stamp, KSM)
            for target in (EXPORTER, KSM):
                families.add(UP, stamp, target)
            clock.t += 15
    finally:
        built.exporter.close()
        built.stop()
    families.write(work / "history.om")
    for prom in prometheus_over(work, int(HOUR.timestamp())):
        yield prom, exposition


def test_the_exporter_publishes_the_a30s_geometry_and_quarter_shares(
    a30: tuple[Prometheus, str],
) -> None:
    prom, exposition = a30
    info = prom.query(f"gpu_mig_instance_info @ {int(HOUR.timestamp()) + 600}")
    assert len(info) == 4
    for s in info:
        m = s["metric"]
        assert (m["compute_slices"], m["memory_slices"]) == ("1", "1")
        assert (m["gpu_compute_slices"], m["gpu_memory_slices"]) == ("4", "4")
    shares = prom.query(f"gpu_allocation_share @ {int(HOUR.timestamp()) + 600}")
    assert sorted(float(s["value"][1]) for s in shares) == [0.25] * 4
    memory = prom.query(f"gpu_allocation_memory_share @ {int(HOUR.timestamp()) + 600}")
    assert sorted(float(s["value"][1]) for s in memory) == [0.25] * 4
    assert 'kind="mig_geometry"} 0' in exposition


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
@pytest.mark.parametrize("source", ["gpu-exporter", "dcgm-exporter"])
@pytest.mark.parametrize("basis", ["compute", "memory"])
def test_an_a30_split_in_four_bills_a_quarter_each_and_no_idle(
    a30: tuple[Prometheus, str],
    request: pytest.FixtureRequest,
    tmp_path: Path,
    kind: str,
    source: str,
    basis: str,
) -> None:
    prom, _ = a30
    with fresh_database(kind, request, tmp_path) as url:
        ingest_with(prom.url, url, model(basis), [HOUR], source=source)
        teams = by_team(url)
        assert_every_hour_adds_up(url)
    assert {t: v[0] for t, v in teams.items() if t in TEAMS} == dict.fromkeys(TEAMS, PRICE // 4)
    assert sum(v[3] for v in teams.values()) == 0  # no idle: every slice was held
    assert set(teams) == set(TEAMS)


def test_the_h200_profiles_are_those_a_real_h200_reports() -> None:
    """The H200's row of the table against NVML on a real H200 (recorded by
    scripts/record_nvml.py --mig): names, slices and usable memory (NVML's memorySizeMB, not
    the gigabytes of the names)."""
    import json

    from kube.mig_profiles import BY_MODEL

    recording = json.loads(
        (Path(__file__).parents[1] / "exporter/data/nvml-h200-580.159.04-mig.json").read_text()
    )
    real = {
        (f := c["result"]["fields"])["name"].removeprefix("MIG "): f
        for c in recording["calls"]
        if c["call"] == "nvmlDeviceGetGpuInstanceProfileInfoById"
    }
    table = BY_MODEL["NVIDIA H200"]
    assert (table.compute_slices, table.memory_slices) == (7, 8)
    assert {p.name for p in table.profiles} == {n for n in real if not n.endswith("+me")}
    for p in table.profiles:
        assert p.compute_slices == real[p.name]["sliceCount"], p.name
        assert p.memory_bytes == real[p.name]["memorySizeMB"] << 20, p.name
