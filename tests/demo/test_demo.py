"""``make demo`` end to end, with a short time budget: it must come up within 2 minutes, print
an admin token and a per-team cost table that the running API confirms, have ingested every
complete hour of yesterday and of today, serve the exporters' /metrics and the API's /docs,
and stop cleanly on Ctrl-C (SIGINT). A busy port is reported and waited for, then named when
it stays busy — never silently swapped for another."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import httpx

from tests.conftest import require_binary

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^  (\S+)\s+(-?\d+\.\d{6})\s+(-?\d+\.\d{6})\s+(-?\d+\.\d{6})\s+")


def _ports() -> list[str]:
    """Free ports for every part (other test runs may hold the defaults), below the
    ephemeral range, so that no outgoing connection takes one while the demo simulates."""
    low, _ = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    rng = random.Random()
    while True:
        base = rng.randrange(10_000, low - 8)
        if all(_free(base + i) for i in range(6)):
            break
    api, prom, labels, exporter = base, base + 1, base + 2, base + 3
    return [
        *("--api-port", str(api), "--prometheus-port", str(prom)),
        *("--exporter-port", str(exporter), "--labels-port", str(labels)),
    ]


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _hold(port: int) -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def test_make_demo_comes_up_answers_and_stops_cleanly() -> None:
    require_binary("prometheus")
    require_binary("promtool")
    env = _env()
    ports = _ports()
    api_port = int(ports[1])
    held = _hold(api_port)  # busy at the start, freed once the demo says it waits for it
    started = datetime.now(UTC)
    proc = subprocess.Popen(
        [sys.executable, "-m", "demo", "--step", "300", *ports],
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
            if f"port {api_port} (the cost-service API) is busy: waiting" in line:
                held.close()
            if "Ctrl-C stops everything" in line:
                break
        out = "\n".join(lines)
        assert "Ctrl-C stops everything" in out, out
        assert f"port {api_port} (the cost-service API) is busy: waiting" in out, out
        assert f"port {api_port} (the cost-service API) is free" in out, out
        assert f"cost API:    http://127.0.0.1:{api_port}/docs" in out, out
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
        # the top three rightsizing savings, after the cost table, as the API has them
        top = out.index("GPU savings (rightsizing")
        assert top > out.index("total (USD)"), out
        printed = re.findall(r"(\d+\.\d{6}) USD", out[top:])
        recs = httpx.get(f"{api[1]}/v1/recommendations", headers=auth, timeout=30).json()
        assert len(printed) == 3, out
        assert printed == [r["saving_monthly"] for r in recs["rows"][:3]], out
        today = httpx.get(
            f"{api[1]}/v1/costs",
            headers=auth,
            timeout=30,
            params={"window": "today", "step": "hour"},
        ).json()
        # every complete hour of today, up to the demo's start (an hour may end meanwhile)
        assert len(today["rows"]) in (started.hour, started.hour + 1), today
        assert httpx.get(f"{api[1]}/docs", timeout=10).status_code == 200
        for url in exporters:
            assert "DCGM_FI_DEV_GPU_UTIL" in httpx.get(url, timeout=10).text
    finally:
        held.close()
        proc.send_signal(signal.SIGINT)
        try:
            rest, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, rest
    assert "gpu-finops demo: stopped" in rest


def test_a_port_that_stays_busy_is_named_and_the_demo_exits() -> None:
    require_binary("prometheus")
    require_binary("promtool")
    ports = _ports()
    prom_port = int(ports[3])
    held = _hold(prom_port)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "demo", *ports, "--port-wait", "1"],
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        held.close()
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        f"make demo: port {prom_port} (Prometheus) is still busy after 1 s: stop what listens "
        "on it, or choose another with --prometheus-port"
    ) in done.stdout
    assert "simulating" not in done.stdout  # found before the minutes of simulation
