"""helm and kubectl for the deploy tests: from .tools/bin (scripts/install-k8s-tools.sh puts
the pinned ones there), else from PATH. Under CI=true a missing one fails the test."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import bcrypt
import yaml

from tests.conftest import require_binary

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools" / "bin"
CHART = ROOT / "deploy" / "helm" / "gpu-finops"
# a scrape password's bcrypt hash, as the chart's exporter.webConfig.basicAuth.users take it
BCRYPT = bcrypt.hashpw(b"scrape", bcrypt.gensalt(rounds=4)).decode()


def tool(name: str) -> str:
    local = TOOLS / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name) or require_binary(name)


def run(args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=120)


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the dashboards are large


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.load_all(text, Loader=_LOADER) if d]


def helm_template(
    values: dict[str, Any] | None = None,
    release: str = "gpu-finops",
    namespace: str = "gpu-finops",
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``helm template`` of the chart with these values (as one values file on stdin)."""
    args = [tool("helm"), "template", release, str(CHART), "--namespace", namespace]
    if values:
        args += ["--values", "-"]
    return subprocess.run(
        args,
        input=yaml.safe_dump(values or {}),
        capture_output=True,
        text=True,
        check=check,
        timeout=120,
    )


def kustomize(path: Path) -> list[dict[str, Any]]:
    return documents(run([tool("kubectl"), "kustomize", str(path)]).stdout)
