"""``make demo`` end to end, with a short time budget: it must come up within 2 minutes, print
an admin token and a per-team cost table that the running API confirms, serve the exporters'
/metrics and the API's /docs, and stop cleanly on Ctrl-C (SIGINT)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import httpx

from tests.conftest import require_binary

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^  (\S+)\s+(-?\d+\.\d{6})\s+(-?\d+\.\d{6})\s+(-?\d+\.\d{6})\s+")


def test_make_demo_comes_up_answers_and_stops_cleanly() -> None:
    require_binary("prometheus")
    require_binary("promtool")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "demo", "--step", "300"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 120  # the budget for a fresh machine
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if "Ctrl-C stops everything" in line:
                break
        out = "\n".join(lines)
        assert "Ctrl-C stops everything" in out, out
        token = re.search(r"admin token: (gfo_\S+)", out)
        api = re.search(r"cost API:\s+(http://\S+)/docs", out)
        exporters = re.findall(r"(http://127\.0\.0\.1:\d+/metrics)", out)
        assert token and api and len(exporters) == 5, out
        table = {m[1]: Decimal(m[2]) for m in map(ROW.match, lines) if m}
        assert {"__idle__", "__unallocated__"} <= set(table), out  # an unlabelled pod
        assert len(set(table) - {"__idle__", "__unallocated__"}) >= 3, out  # several teams
        # the DRA node's teams (one claim shared by chat and docs-ai) and the HAMi node's
        assert {"recsys", "chat", "docs-ai", "research", "vision", "search"} <= set(table), out

        auth = {"Authorization": f"Bearer {token[1]}"}
        answer = httpx.get(
            f"{api[1]}/v1/costs",
            headers=auth,
            timeout=30,
            params={"window": "yesterday", "group_by": "team"},
        ).json()
        assert {r["group"]["team"]: Decimal(r["total_cost"]) for r in answer["rows"]} == table
        per_hour = httpx.get(
            f"{api[1]}/v1/costs",
            headers=auth,
            timeout=30,
            params={"window": "yesterday", "step": "hour"},
        ).json()
        assert len(per_hour["rows"]) == 24  # a full simulated day, every hour
        assert httpx.get(f"{api[1]}/docs", timeout=10).status_code == 200
        for url in exporters:
            assert "DCGM_FI_DEV_GPU_UTIL" in httpx.get(url, timeout=10).text
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rest, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, rest
    assert "gpu-finops demo: stopped" in rest
