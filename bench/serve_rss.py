"""The API process's memory while ``gpu-costsvc serve`` ingests 24 hours: the hourly work in
a thread of the API process (as before costsvc/commands/hourly.py, the collector left on there)
against the hourly work in a child process of its own (today's ``serve``).

    python bench/serve_rss.py [--clients 4] [--step 60]

The history: the demo's five simulated nodes (demo/history.py: each exporter built exactly as
``gpu-exporter --simulate`` builds it, scraped every ``--step`` s) over the 24 complete hours
before now, in a real Prometheus (promtool blocks). Then, twice — the hourly work in a thread
of the API process (before) and in its own child (after) — ``gpu-costsvc serve`` on a fresh
SQLite database
ingests its first run (the last day, 24 hours), while ``--clients`` keep-alive clients ask
``/v1/costs``, ``/v1/budgets`` and ``/metrics`` in a loop; the API process's VmRSS is read from
/proc every 0.2 s until the watermark reaches the last complete hour. Prints, per run: hours
ingested, ingest wall time, requests served, RSS before the ingest, peak and at the end, and
``gc.garbage``-free objects are not counted: RSS is what the operator pays. Nothing asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from demo.history import history_blocks  # noqa: E402
from tests.prom import Prometheus, free_port  # noqa: E402

# serve, its hourly work in the scheduler thread of the API process, as before the child
BEFORE = (
    "import costsvc.cli as c, costsvc.commands.ingest as i\n"
    "def s(settings, delay, stop):\n"
    "    while not stop.is_set():\n"
    "        i.ingest_command(settings, None, None, lambda *a: None)\n"
    "        i.advise(settings)\n"
    "        stop.wait(3600)\n"
    "c._scheduler = s\n"
    "raise SystemExit(c.main(['serve', '--delay', '0']))"
)
AFTER = "import costsvc.cli as c; raise SystemExit(c.main(['serve', '--delay', '0']))"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def one_run(label: str, code: str, prom: Prometheus, work: Path, clients: int) -> dict[str, Any]:
    from sqlalchemy import create_engine

    from costsvc.auth.tokens import create_token
    from costsvc.db.migrate import upgrade
    from costsvc.db.runs import watermark

    url = f"sqlite:///{work / f'{label}.db'}"
    upgrade(url)
    engine = create_engine(url)
    token = create_token(engine, "bench", "admin", None, "bench")
    port = free_port()
    env = {
        **os.environ,
        "COSTSVC_DATABASE_URL": url,
        "COSTSVC_PROMETHEUS_URL": prom.url,
        "COSTSVC_COST_MODEL": str(ROOT / "examples" / "cost-model.yaml"),
        "COSTSVC_LISTEN_ADDRESS": f"127.0.0.1:{port}",
        "COSTSVC_CLUSTER": "demo",
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    target = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    while True:  # until it listens
        try:
            http.get("/healthz")
            break
        except httpx.TransportError:
            time.sleep(0.1)
    start, base = time.monotonic(), rss_kib(proc.pid)
    stop = threading.Event()
    served = [0]
    headers = {"Authorization": f"Bearer {token}"}

    def client() -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            paths = ["/v1/costs?window=24h&group_by=team", "/v1/budgets", "/metrics"]
            i = 0
            while not stop.is_set():
                c.get(paths[i % 3], headers=headers)
                served[0] += 1
                i += 1

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    peak = base
    while True:
        peak = max(peak, rss_kib(proc.pid))
        mark = watermark(engine, "demo")
        if mark is not None and mark >= target:
            break
        time.sleep(0.2)
    wall = time.monotonic() - start
    end = rss_kib(proc.pid)
    stop.set()
    for t in threads:
        t.join(10)
    proc.terminate()
    proc.wait(30)
    engine.dispose()
    return {
        "run": label,
        "ingest_s": round(wall, 1),
        "requests": served[0],
        "rss_before_mib": round(base / 1024, 1),
        "rss_peak_mib": round(peak / 1024, 1),
        "rss_end_mib": round(end / 1024, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--step", type=int, default=60, help="scrape interval of the history, s")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="serve-rss-"))
    now = datetime.now(UTC)
    day = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=25)
    try:
        folders, samples = history_blocks(work / "history", day, now, args.step)
        (work / "data").mkdir()
        for folder in folders:
            for block in folder.iterdir():
                block.rename(work / "data" / block.name)
        prom = Prometheus(
            shutil.which("prometheus") or "prometheus",
            work,
            [],
            extra_args=["--storage.tsdb.retention.time=100y"],
        )
        try:
            prom.wait_ready()
            prom.until(
                lambda: prom.query(f"gpu_device_up @ {int(day.timestamp()) + 3600}"), 60, "loaded"
            )
            runs = [
                one_run(
                    "before (the hourly work a thread of the API process)",
                    BEFORE,
                    prom,
                    work,
                    args.clients,
                ),
                one_run(
                    "after (the hourly work in a child process)", AFTER, prom, work, args.clients
                ),
            ]
        finally:
            prom.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
        f"history: 5 simulated nodes, {samples} samples, every {args.step} s"
    )
    for r in runs:
        print(json.dumps(r))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "serve_rss.json").write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
