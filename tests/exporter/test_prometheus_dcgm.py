"""A real Prometheus scraping the real exporter process: the DCGM counters are `counter` in its
metadata, violation time arrives in ns, NVLink bandwidth in MB/s, and the host label is
`hostname` when asked for."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from exporter.catalogue import NVLINK_DCGM_NAMES, SCALAR_SERIES
from tests.conftest import require_binary
from tests.procs import ROOT, Process, start_exporter
from tests.prom import Prometheus

SPEC = ROOT / "tests" / "exporter" / "data" / "dcgm-units.yaml"
H100 = ROOT / "examples" / "fleet-h100x8.yaml"

# The DCGM families dcgm-exporter types `counter` (its etc/default-counters.csv and
# dcp-metrics-included.csv): what a Prometheus scraping us must record as counters too.
DCGM_COUNTERS = {s.name for s in SCALAR_SERIES if s.kind == "counter"} | {
    f"{base}_TOTAL" for base in NVLINK_DCGM_NAMES.values()
}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    binary = require_binary("prometheus")
    exporters: list[Process] = []
    targets = []
    for args in (
        ("--simulate", str(SPEC), "--hostname-label", "hostname"),
        ("--simulate", str(H100)),
    ):
        proc, port = start_exporter(*args, "--collect-interval", "1s")
        exporters.append(proc)
        targets.append(f"127.0.0.1:{port}")
    prom = Prometheus(binary, tmp_path_factory.mktemp("prom"), targets)
    try:
        prom.wait_ready()
        prom.until(
            lambda: len(prom.query("rate(DCGM_FI_DEV_POWER_VIOLATION[10s])")) == 10,
            60,
            "three scrapes of both exporters",
        )
        yield prom
    finally:
        prom.stop()
        for proc in exporters:
            proc.stop()


def test_prometheus_records_the_dcgm_counters_as_counters(prometheus: Prometheus) -> None:
    """Prometheus asks for OpenMetrics first; served text 0.0.4, it keeps `counter`."""
    metadata = prometheus.get("/api/v1/metadata")["data"]
    assert set(metadata) >= DCGM_COUNTERS, DCGM_COUNTERS - set(metadata)
    types = {name: {m["type"] for m in metadata[name]} for name in DCGM_COUNTERS}
    assert types == {name: {"counter"} for name in DCGM_COUNTERS}
    assert {m["type"] for m in metadata["DCGM_FI_DEV_GPU_TEMP"]} == {"gauge"}
    assert {m["type"] for m in metadata["gpu_exporter_errors_total"]} == {"counter"}


def test_violation_time_is_in_nanoseconds(prometheus: Prometheus) -> None:
    # GPU 0 of the units node has been power capped all along: 1 s of violation per second
    rate = prometheus.query('irate(DCGM_FI_DEV_POWER_VIOLATION{hostname="units-node"}[10s])')
    by_gpu = {r["metric"]["gpu"]: float(r["value"][1]) for r in rate}
    # the unit is what is tested (µs would give 1e6): the value is read at collection time and
    # stamped at scrape time, so on a loaded machine one interval's rate can be several % off
    assert by_gpu["0"] == pytest.approx(1e9, rel=0.2)
    assert by_gpu["1"] == 0
    # the power-throttling alert's own arithmetic: the capped fraction of the time
    capped = prometheus.query(
        'irate(DCGM_FI_DEV_POWER_VIOLATION{hostname="units-node",gpu="0"}[10s]) / 1e9 > 0.5'
    )
    assert len(capped) == 1


def test_nvlink_bandwidth_in_megabytes_per_second(prometheus: Prometheus) -> None:
    found = prometheus.query('DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{hostname="units-node"}')
    assert {r["metric"]["gpu"] for r in found} == {"0", "1"}
    for r in found:  # 2000 KiB/s in + 3000 KiB/s out = 5000 KiB/s, / 1000 as DCGM writes it
        assert float(r["value"][1]) == pytest.approx(5.0, abs=0.01)
    h100 = prometheus.query('DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{Hostname="gpu-node-h100-01"}')
    assert len(h100) == 8  # the DeepOps NVLink panel's series exist for an HGX node


def test_the_host_label_is_hostname_when_asked_for(prometheus: Prometheus) -> None:
    assert prometheus.label_values("hostname") == ["units-node"]
    assert prometheus.label_values("Hostname") == ["gpu-node-h100-01"]  # the default
    units = prometheus.query('DCGM_FI_DEV_GPU_TEMP{hostname="units-node"}')
    assert len(units) == 2 and all("Hostname" not in r["metric"] for r in units)


def test_xid_series_reach_prometheus_with_err_code_and_err_msg(prometheus: Prometheus) -> None:
    found = prometheus.query('DCGM_FI_DEV_XID_ERRORS{hostname="units-node"}')
    assert {(r["metric"]["err_code"], r["metric"]["err_msg"]) for r in found} == {("0", "No Error")}
