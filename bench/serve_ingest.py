"""``gpu-costsvc serve`` over 24 ingested hours of a 1,000-GPU fleet: the CPU its hourly work
takes and the memory the API process holds after 1 hour and after 24.

    python bench/serve_ingest.py [--gpus 1000] [--pods 5000] [--hours 24] [--fleet both]
                                 [--exporter current|gauges-only]

The history: bench/fleet.py's realistic fleet (seed 29: utilisation and SM time changing at
every sample, 5 % of pods ending an hour, relabels, MIG re-created daily) and the constant one
(the best case), scraped every 60 s, written as one TSDB block (bench/tsdb_block.py) that a
real Prometheus opens; a throwaway PostgreSQL. The fleet publishes our exporter's integrals
beside its gauges (bench/fleet_integrals.py), as our exporter does, and serve, at its default
settings, reads the hours from them; ``--exporter gauges-only``: the gauges alone (an exporter
before its integrals), read by the gauges' rule. The hour before the first is ingested first
(``gpu-costsvc ingest``: the watermark a running service has).

Then the real ``serve`` (costsvc/cli.py ``main(["serve"])``: the API under uvicorn, the
scheduler thread, in one process, a child of this one; each hour's work — the ingest, then the
recommendations — in a process the scheduler spawns, costsvc/commands/hourly.py ``run_hour``)
with its clock moved instead of waited for: where the scheduler would sleep until 5 minutes past
the next hour it moves the service's clock there (``datetime.now`` of costsvc/cli.py, the
reading handed to the hourly child) and waits for this process to say go. Between two hours this
process asks the API what a finance dashboard would (the day's costs by team, by namespace, a
team summary, /metrics), so the answer cache fills as in production. For each hour: the CPU
seconds of the hour's work (the hourly child's user + system time, its start-up included, and
the serve process's own over the hour: ``time.process_time``, every thread; the API is idle
meanwhile), the serve process's RSS (VmRSS) after it and after the API's answers of that hour
(the figure compared: hour 1's includes the first answers, as every later hour's does), and the
largest peak RSS of the hourly children so far (``ru_maxrss`` of ``RUSAGE_CHILDREN``). At the
end, the serve process's CPU over 30 s of real idle time (the API and scheduler waiting).

Prints the machine and the load at the start, the sizes, per fleet: the hourly CPU (ingest and
recommendations, as a share of one core over an hour: 1 CPU-second an hour is 0.028 %), the
serve process's RSS after the 1st and the last hour (and the ratio), the idle CPU, the hourly
children's peak RSS.
Targets: hourly work <= 5 % of a core; RSS after 24 hours within 10 % of after 1.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

START = datetime(2026, 10, 1, 0, tzinfo=UTC)
DELAY = 300  # seconds after the hour serve ingests it (its default)


def _rss_kib(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _children() -> tuple[float, int]:
    """CPU seconds of the waited-for children, and the largest peak RSS among them (KiB)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime, r.ru_maxrss


def child(work: Path, hours: int) -> int:
    """``serve`` with a clock this bench moves (module docstring)."""
    import costsvc.cli as cli
    from costsvc.commands import hourly

    now = [START + timedelta(hours=1, seconds=DELAY)]

    class Clock(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
            return now[0] if tz is not None else now[0].replace(tzinfo=None)

    cli.datetime = Clock  # type: ignore[misc]
    progress = work / "progress.jsonl"

    def scheduler(settings: Any, delay: float, stop: Any) -> None:
        for i in range(hours):
            c0, (k0, _), t0 = time.process_time(), _children(), time.perf_counter()
            code = hourly.run_hour(settings, cli.datetime.now(UTC), stop)
            c1, (k1, peak), t1 = time.process_time(), _children(), time.perf_counter()
            row = {
                "hour": i,
                "code": code,
                "work_cpu": (c1 - c0) + (k1 - k0),
                "child_cpu": k1 - k0,
                "wall": t1 - t0,
                "child_peak_kib": peak,
                "rss_kib": _rss_kib(),
            }
            with progress.open("a") as f:
                f.write(json.dumps(row) + "\n")
            go = work / f"go-{i}"
            while not go.exists() and not stop.is_set():
                time.sleep(0.05)  # polling: the parent asks the API, then says go
            if stop.is_set():
                return
            now[0] = now[0] + timedelta(hours=1)  # where serve would sleep to

    cli._scheduler = scheduler  # type: ignore[assignment]
    return cli.main(["serve", "--delay", str(DELAY)])


def _wait_line(path: Path, n: int, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    while True:
        if path.exists():
            lines = path.read_text().splitlines()
            if len(lines) > n:
                found: dict[str, Any] = json.loads(lines[n])
                return found
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited with {proc.returncode}")
        time.sleep(0.1)  # polling: the child appends a line per hour


def one_fleet(args: argparse.Namespace, fleet: str) -> dict[str, Any]:
    import httpx
    from sqlalchemy import create_engine

    from bench.fleet import Grid, constant, describe, realistic
    from bench.fleet_integrals import integrals
    from bench.pgcluster import start_postgres
    from bench.phases import fleet_document
    from bench.rollup_common import FLEETS, LOOK_BACK, cpu_seconds, free_port
    from bench.rollup_month import start_prometheus
    from bench.tsdb_block import write_block
    from costsvc.auth.tokens import create_token
    from costsvc.db.migrate import upgrade

    label = f"[{FLEETS[fleet]}]"
    work = Path(tempfile.mkdtemp(prefix="serve-"))
    pg_base = Path(tempfile.mkdtemp(prefix="pg-"))
    procs: list[subprocess.Popen[bytes]] = []
    stop_pg: list[str] = []
    try:
        first = (int(START.timestamp()) - LOOK_BACK) * 1000
        end = (int(START.timestamp()) + (args.hours + 2) * 3600) * 1000
        grid = Grid(first, end, 60_000)
        t = time.perf_counter()
        if fleet == "realistic":
            series, churn = realistic(args.gpus, args.pods, grid)
            how = f"realistic (seed 29: {churn.per_hour():.1%} of pods ended per hour)"
        else:
            series, how = constant(args.gpus, args.pods, grid), "constant (best case)"
        if args.exporter == "current":
            series.extend(list(integrals(series, grid)))
            how += ", with the exporter's integrals"
        (work / "data").mkdir()
        write_block(work / "data", series, first, end, 60_000)
        print(
            f"{label} history: {args.gpus} GPUs, {args.pods} pods, {how}: {describe(series)}; "
            f"block written in {time.perf_counter() - t:.0f} s",
            flush=True,
        )
        del series
        port = free_port()
        prom = start_prometheus(work / "data", port, work / "prom.log")
        procs.append(prom)
        pg_url, _, stop_pg = start_postgres(pg_base)
        upgrade(pg_url)
        model = work / "cost-model.json"
        model.write_text(json.dumps(fleet_document("2026-09-01T00:00:00Z")))
        api_port = free_port()
        env = {
            **os.environ,
            "COSTSVC_DATABASE_URL": pg_url,
            "COSTSVC_PROMETHEUS_URL": f"http://127.0.0.1:{port}",
            "COSTSVC_COST_MODEL": str(model),
            "COSTSVC_CLUSTER": "bench",
            "COSTSVC_LISTEN_ADDRESS": f"127.0.0.1:{api_port}",
        }
        before = START - timedelta(hours=1)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "costsvc.cli",
                "ingest",
                "--start",
                before.isoformat(),
                "--end",
                START.isoformat(),
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        engine = create_engine(pg_url)
        finance = create_token(engine, "bench-finance", "finance", None, "bench")
        engine.dispose()
        serve = subprocess.Popen(
            [sys.executable, __file__, "--child", str(work), str(args.hours)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(work / "serve.log").open("ab"),
        )
        procs.append(serve)
        base = f"http://127.0.0.1:{api_port}"
        rows = []
        with httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {finance}"}, timeout=60
        ) as http:
            for i in range(args.hours):
                row = _wait_line(work / "progress.jsonl", i, serve)
                rows.append(row)
                day_end = START + timedelta(hours=i + 1)
                window = {"start": START.isoformat(), "end": day_end.isoformat()}
                for params in ({"group_by": "team"}, {"group_by": "namespace"}):
                    http.get("/v1/costs", params={**window, **params}).raise_for_status()
                http.get("/v1/teams/team-01/summary", params=window).raise_for_status()
                http.get("/metrics").raise_for_status()
                row["rss_served_kib"] = _rss_kib(serve.pid)  # after the hour and its asks
                (work / f"go-{i}").touch()
                assert row["code"] == 0, f"hour {i + 1}: the hourly child exited {row['code']}"
                print(
                    f"  hour {i + 1}: ingest + recommendations {row['work_cpu']:.2f} CPU-s "
                    f"(the child's {row['child_cpu']:.2f}; {row['wall']:.1f} s), API process "
                    f"RSS {row['rss_kib'] / 1024:.0f} MiB after the hour, "
                    f"{row['rss_served_kib'] / 1024:.0f} MiB after the API's answers; the "
                    f"hourly children's peak RSS so far {row['child_peak_kib'] / 1024:.0f} MiB",
                    flush=True,
                )
        idle0 = cpu_seconds(serve.pid)
        time.sleep(30)  # the idle window measured (real time: nothing to await)
        idle = (cpu_seconds(serve.pid) - idle0) / 30
        return {"rows": rows, "idle": idle}
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(60)
        if stop_pg:
            subprocess.run(stop_pg, check=False, capture_output=True)
        shutil.rmtree(pg_base, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def report(label: str, found: dict[str, Any]) -> None:
    import statistics

    rows = found["rows"]
    work = [r["work_cpu"] for r in rows]
    hourly = statistics.mean(work)
    share = hourly / 3600
    first, last = rows[0]["rss_served_kib"], rows[-1]["rss_served_kib"]
    growth = last / first - 1
    print(
        f"{label} serve, {len(rows)} hourly runs: ingest + recommendations (the hourly child, "
        f"its start included) {hourly:.2f} CPU-s an hour (median {statistics.median(work):.2f}, "
        f"max {max(work):.2f}): {share:.3%} of a core "
        f"[<= 5 %: {'PASS' if share <= 0.05 else 'MISS'}]; RSS after hour 1 {first / 1024:.0f} "
        f"MiB, after hour {len(rows)} {last / 1024:.0f} MiB ({growth:+.1%}) "
        f"[within 10 %: {'PASS' if abs(growth) <= 0.10 else 'MISS'}]; idle between hours "
        f"{found['idle']:.3%} of a core; the hourly child's peak RSS "
        f"{rows[-1]['child_peak_kib'] / 1024:.0f} MiB (largest of the {len(rows)})"
    )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(Path(sys.argv[2]), int(sys.argv[3]))
    from bench.machine import machine_line
    from bench.rollup_common import FLEETS, load_now

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--hours", type=int, default=24, help="hourly runs measured")
    ap.add_argument("--fleet", choices=("both", "realistic", "constant"), default="both")
    ap.add_argument("--exporter", choices=("current", "gauges-only"), default="current")
    args = ap.parse_args()
    print(
        f"{machine_line()}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {load_now()}; "
        f"exporter {args.exporter}, default settings"
    )
    fleets = ("realistic", "constant") if args.fleet == "both" else (args.fleet,)
    found = {fleet: one_fleet(args, fleet) for fleet in fleets}
    for fleet, result in found.items():
        report(f"[{FLEETS[fleet]}]", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
