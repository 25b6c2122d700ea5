"""Through a real Prometheus scrape: sum by (namespace, pod) (gpu_allocation_share) gives the
GPU fractions each pod holds, in each scenario (one exporter process per simulated node)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.conftest import require_binary
from tests.procs import ROOT, Process, start_exporter
from tests.prom import Prometheus

H100 = {"model": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559}


def claim(ns: str, name: str, ids: list[str], resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    return {
        "namespace": ns,
        "name": name,
        "containers": [{"name": "main", "devices": [{"resource": resource, "ids": ids}]}],
    }


SCENARIOS: dict[str, tuple[dict[str, Any], dict[tuple[str, str], float]]] = {
    "whole": (
        {
            "gpus": [{**H100, "count": 8}],
            "pods": [claim("a", f"whole-{i}", [f"gpu{i}"]) for i in range(8)],
        },
        {("a", f"whole-{i}"): 1.0 for i in range(8)},
    ),
    "mig7": (
        {
            "gpus": [{**H100, "mig": [{"profile": "1g.10gb", "gi_id": 7 + i} for i in range(7)]}],
            "pods": [
                claim("b", f"mig-{i}", [f"gpu0/gi{7 + i}"], "nvidia.com/mig-1g.10gb")
                for i in range(7)
            ],
        },
        {("b", f"mig-{i}"): 1 / 7 for i in range(7)},
    ),
    "migmix": (
        {
            "gpus": [
                {
                    **H100,
                    "mig": [
                        {"profile": "3g.40gb", "gi_id": 2},
                        {"profile": "2g.20gb", "gi_id": 3},
                        {"profile": "1g.10gb", "gi_id": 9},
                        {"profile": "1g.10gb", "gi_id": 10},
                    ],
                }
            ],
            "pods": [
                claim("c", "mix-3g", ["gpu0/gi2"], "nvidia.com/mig-3g.40gb"),
                claim("c", "mix-2g", ["gpu0/gi3"], "nvidia.com/mig-2g.20gb"),
                claim("c", "mix-1g", ["gpu0/gi9", "gpu0/gi10"], "nvidia.com/mig-1g.10gb"),
            ],
        },
        {("c", "mix-3g"): 3 / 7, ("c", "mix-2g"): 2 / 7, ("c", "mix-1g"): 2 / 7},
    ),
    "sliced": (
        {
            "gpus": [{**H100, "time_slicing_replicas": 4}],
            "pods": [
                claim("d", "ts-a", ["gpu0::0", "gpu0::1"], "nvidia.com/gpu.shared"),
                claim("d", "ts-b", ["gpu0::2"], "nvidia.com/gpu.shared"),
                claim("d", "ts-c", ["gpu0::3"], "nvidia.com/gpu.shared"),
            ],
        },
        {("d", "ts-a"): 0.5, ("d", "ts-b"): 0.25, ("d", "ts-c"): 0.25},
    ),
}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    binary = require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("scenarios")
    exporters: list[Process] = []
    targets = []
    try:
        for name, (raw, _) in SCENARIOS.items():
            path = tmp / f"{name}.yaml"
            path.write_text(yaml.safe_dump({"hostname": f"node-{name}", **raw}))
            proc, port = start_exporter("--simulate", str(path), "--collect-interval", "1s")
            exporters.append(proc)
            targets.append(f"127.0.0.1:{port}")
        shared, port = start_exporter(
            "--simulate", str(ROOT / "examples/fleet-shared.yaml"), "--collect-interval", "1s"
        )
        exporters.append(shared)
        targets.append(f"127.0.0.1:{port}")
        (tmp / "prom").mkdir()
        prom = Prometheus(binary, tmp / "prom", targets)
        try:
            prom.wait_ready()
            prom.until(
                lambda: (
                    len(prom.query("count by (Hostname) (gpu_allocation_share)")) == len(targets)
                ),
                30,
                "every node scraped",
            )
            yield prom
        finally:
            prom.stop()
    finally:
        for e in exporters:
            e.stop()


def fractions(prom: Prometheus, namespace: str) -> dict[tuple[str, str], float]:
    result = prom.query(
        f'sum by (namespace, pod) (gpu_allocation_share{{namespace="{namespace}"}})'
    )
    return {(r["metric"]["namespace"], r["metric"]["pod"]): float(r["value"][1]) for r in result}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_sum_by_pod_gives_the_held_fractions(prometheus: Prometheus, scenario: str) -> None:
    expected = SCENARIOS[scenario][1]
    namespace = next(iter(expected))[0]
    assert fractions(prometheus, namespace) == pytest.approx(expected)
    per_gpu = prometheus.query(
        f'sum by (UUID) (gpu_allocation_share{{Hostname="node-{scenario}"}})'
    )
    assert all(float(r["value"][1]) <= 1.0 + 1e-9 for r in per_gpu)


def test_shared_example_node(prometheus: Prometheus) -> None:
    got = {}
    for ns in ("nlp", "vision", "sandbox", "search"):
        got.update(fractions(prometheus, ns))
    assert got == pytest.approx(
        {
            ("nlp", "llama-ft-0"): 3 / 7,
            ("vision", "detector-7f9c"): 2 / 7,
            ("sandbox", "notebook-ana"): 1 / 7,
            ("search", "ranker-0"): 0.5,
            ("search", "ranker-1"): 0.25,
            ("vision", "embed-batch"): 0.25,
            ("nlp", "pretrain-0"): 2.0,
        }
    )
    sm = prometheus.query('gpu_container_sm_utilization_ratio{pod="ranker-1"}')
    assert [float(r["value"][1]) for r in sm] == [pytest.approx(0.15)]
    unmapped = prometheus.query('gpu_unattributed_processes{Hostname="gpu-node-shared-01"} > 0')
    assert [r["metric"]["gpu"] for r in unmapped] == ["1"]
