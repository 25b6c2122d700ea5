"""A MIG GPU's geometry as the exporter reads it from NVML (exporter/nvml/boundary.py
``mig_geometry``): the profile with the most slices, its placement's memory slices, or — when
the placements are refused (an unprivileged exporter) — its memory over the one-slice
profile's; when NVML does not tell, no share is published and the error is counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from demo.history import Clock, simulated_node
from tests.exporter.helpers import samples

GI2 = "gpu0/gi2"
A30 = {
    "model": "NVIDIA A30",
    "memory_total_mib": 24576,
    "mig": [{"profile": "2g.12gb", "gi_id": 1}, {"profile": "1g.6gb", "gi_id": 2}],
}
H100 = {
    "model": "NVIDIA H100 80GB HBM3",
    "memory_total_mib": 81559,
    "mig": [{"profile": "3g.40gb", "gi_id": 2}],
}


def _scrape(tmp_path: Path, gpu: dict[str, Any]) -> dict[str, list[Any]]:
    spec = {
        "gpus": [gpu],
        "pods": [
            {
                "namespace": "ns",
                "name": "p",
                "containers": [
                    {"name": "c", "devices": [{"resource": "nvidia.com/mig-x", "ids": [GI2]}]}
                ],
            }
        ],
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(spec))
    built = simulated_node(path, Clock(1_790_000_000.0))
    try:
        built.exporter.collect_once()
        return samples(built.exporter.exposition.body("openmetrics").decode())
    finally:
        built.exporter.close()
        built.stop()


@pytest.mark.parametrize("denied", [[], ["placements"]])
@pytest.mark.parametrize(
    ("gpu", "geometry", "share", "memory"),
    [(A30, ("4", "4"), 0.25, 0.25), (H100, ("7", "8"), 3 / 7, 0.5)],
)
def test_the_geometry_is_the_gpus_own(
    tmp_path: Path,
    gpu: dict[str, Any],
    geometry: tuple[str, str],
    share: float,
    memory: float,
    denied: list[str],
) -> None:
    got = _scrape(tmp_path, {**gpu, "denied": denied})
    info = got["gpu_mig_instance_info"]
    assert {(s.labels["gpu_compute_slices"], s.labels["gpu_memory_slices"]) for s in info} == {
        geometry
    }
    assert [s.value for s in got["gpu_allocation_share"]] == [pytest.approx(share)]
    assert [s.value for s in got["gpu_allocation_memory_share"]] == [pytest.approx(memory)]


def test_a_geometry_nvml_does_not_tell_publishes_no_share(tmp_path: Path) -> None:
    got = _scrape(tmp_path, {**A30, "unsupported": ["mig_geometry"]})
    info = got["gpu_mig_instance_info"]
    assert len(info) == 2 and all(not s.labels.get("gpu_compute_slices") for s in info)
    assert "gpu_allocation_share" not in got  # never a share of a guessed 7
    errors = {s.labels["kind"]: s.value for s in got["gpu_exporter_errors_total"]}
    assert errors["mig_geometry"] >= 1
