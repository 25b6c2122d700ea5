"""``gpu-exporter --simulate`` brings its own kubelet, /proc and pods: a flag pointing at a real
node's is a start-up error naming it (exit 2), never ignored in silence."""

from __future__ import annotations

import pytest

from exporter.flags import UsageError, parse_settings
from tests.exporter.test_cli import H100, run_cli

POINTING = [
    ("--pod-resources-socket", "/run/kubelet.sock", "GPU_EXPORTER_POD_RESOURCES_SOCKET"),
    ("--path.procfs", "/host/proc", "GPU_EXPORTER_PATH_PROCFS"),
    ("--kubernetes.node-name", "node-1", "GPU_EXPORTER_KUBERNETES_NODE_NAME"),
    ("--kubernetes.kubeconfig", "/etc/kube.conf", "GPU_EXPORTER_KUBERNETES_KUBECONFIG"),
    ("--kubernetes.api-url", "http://127.0.0.1:8001", "GPU_EXPORTER_KUBERNETES_API_URL"),
]


def test_simulate_with_pointing_flags_exits_2_naming_them() -> None:
    done = run_cli("--simulate", H100, "--pod-resources-socket", "/x.sock", "--path.procfs", "/h")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-exporter: error: --simulate")
    assert "--pod-resources-socket" in lines[0] and "--path.procfs" in lines[0]


@pytest.mark.parametrize(("flag", "value", "twin"), POINTING)
def test_each_pointing_flag_and_its_twin_is_refused(flag: str, value: str, twin: str) -> None:
    with pytest.raises(UsageError, match=flag.replace(".", r"\.")):
        parse_settings(["--simulate", H100, flag, value], {})
    with pytest.raises(UsageError, match=flag.replace(".", r"\.")):
        parse_settings(["--simulate", H100], {twin: value})
    assert parse_settings([flag, value], {}).simulate is None  # without --simulate: fine


def test_simulate_alone_and_its_honoured_flags_start() -> None:
    s = parse_settings(["--simulate", H100, "--kubernetes.pod-labels", "team"], {})
    assert s.simulate is not None and s.pod_labels == ("team",)
