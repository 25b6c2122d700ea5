"""gpu-exporter's command line: flags and their environment twins, one-line start-up errors,
clean shutdown, and staying up when there is no NVML at all."""

from __future__ import annotations

import ctypes.util
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from exporter.catalogue import COLLECTORS, OFF_BY_DEFAULT
from exporter.flags import UsageError, env_name, parse_duration, parse_settings
from tests.exporter.helpers import samples, value
from tests.procs import ROOT, exporter_args, start_exporter

H100 = str(ROOT / "examples" / "fleet-h100x8.yaml")
DEFAULT_ON = frozenset(COLLECTORS) - OFF_BY_DEFAULT


def test_defaults() -> None:
    s = parse_settings([], {})
    assert s.listen_address == ":9400"
    assert s.collect_interval == 5.0
    assert s.simulate is None
    assert s.collectors == DEFAULT_ON
    assert "nvlink_links" not in s.collectors


def test_every_flag_has_an_environment_twin() -> None:
    env = {
        "GPU_EXPORTER_WEB_LISTEN_ADDRESS": "127.0.0.1:9999",
        "GPU_EXPORTER_COLLECT_INTERVAL": "250ms",
        "GPU_EXPORTER_SIMULATE": "x.yaml",
        "GPU_EXPORTER_HOSTNAME": "node-7",
        "GPU_EXPORTER_LOG_LEVEL": "debug",
        "GPU_EXPORTER_COLLECTOR_NVLINK": "false",
        "GPU_EXPORTER_COLLECTOR_ECC": "0",
    }
    s = parse_settings([], env)
    assert (s.listen_address, s.collect_interval, str(s.simulate), s.hostname, s.log_level) == (
        "127.0.0.1:9999",
        0.25,
        "x.yaml",
        "node-7",
        "debug",
    )
    assert s.collectors == DEFAULT_ON - {"nvlink", "ecc"}
    # the command line wins over the environment
    s = parse_settings(["--collect-interval", "2s", "--collector.nvlink"], env)
    assert s.collect_interval == 2.0
    assert "nvlink" in s.collectors
    assert env_name("--collector.remapped_rows") == "GPU_EXPORTER_COLLECTOR_REMAPPED_ROWS"


def test_no_collector_flags() -> None:
    s = parse_settings(["--no-collector.xid", "--no-collector.clock_events"], {})
    assert s.collectors == DEFAULT_ON - {"xid", "clock_events"}
    assert "nvlink_links" in parse_settings(["--collector.nvlink_links"], {}).collectors


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (["--bogus"], {}, "--bogus"),
        (["--collect-interval", "soon"], {}, "--collect-interval"),
        (["--collect-interval", "0s"], {}, "--collect-interval"),
        (["--web.listen-address", "9400"], {}, "--web.listen-address"),
        (["--log-level", "loud"], {}, "--log-level"),
        ([], {"GPU_EXPORTER_COLLECTOR_NVLINK": "maybe"}, "GPU_EXPORTER_COLLECTOR_NVLINK"),
        (["--collector.nvlink", "--no-collector.nvlink"], {}, "not allowed with"),
    ],
)
def test_bad_settings_are_usage_errors(argv: list[str], env: dict[str, str], needle: str) -> None:
    with pytest.raises(UsageError, match=needle.replace(".", r"\.")):
        parse_settings(argv, env)


@pytest.mark.parametrize(("text", "seconds"), [("5s", 5), ("500ms", 0.5), ("1m", 60), ("2", 2)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        exporter_args(*args),
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--collect-interval", "-1s"], "--collect-interval"),
        (["--simulate", "/nonexistent/fleet.yaml"], "/nonexistent/fleet.yaml: cannot read"),
    ],
)
def test_bad_start_exits_2_with_one_line(args: list[str], needle: str) -> None:
    done = run_cli(*args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("gpu-exporter: error: ")
    assert needle in lines[0]


def test_bad_spec_file_exits_2_naming_the_place(tmp_path: Path) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text("gpus:\n  - model: H100\n    memory_total_mib: 80\n    power_w: {sine: 3}\n")
    done = run_cli("--simulate", str(spec))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert f"{spec}: gpus[0].power_w.sine" in done.stderr


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())


def test_sigterm_exits_cleanly_within_two_seconds() -> None:
    proc, port = start_exporter("--simulate", H100, "--collect-interval", "1s")
    try:
        assert "DCGM_FI_DEV_GPU_TEMP{" in scrape(port)
        proc.proc.send_signal(signal.SIGTERM)
        start = time.monotonic()
        rc = proc.proc.wait(timeout=2)
        assert rc == 0, proc.output()
        assert time.monotonic() - start < 2
        proc.wait_for("stopped")
    finally:
        proc.stop()


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has a real NVML"
)
def test_without_nvml_the_exporter_stays_up_and_says_so() -> None:
    """Where pynvml finds no libnvidia-ml (CI, laptops): the real init-failure path."""
    proc, port = start_exporter("--collect-interval", "100ms")
    try:
        proc.wait_for("NVML init failed")
        m = samples(_openmetrics(port))
        assert value(m, "gpu_exporter_nvml_up") == 0
        assert (value(m, "gpu_exporter_errors_total", source="nvml", kind="init") or 0) >= 1
        assert "DCGM_FI_DEV_GPU_TEMP" not in m
        assert value(m, "gpu_exporter_build_info") == 1
    finally:
        proc.stop()


def _openmetrics(port: int) -> str:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics",
        headers={"Accept": "application/openmetrics-text; version=1.0.0"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        return str(resp.read().decode())
