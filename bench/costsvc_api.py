"""gpu-costsvc API benchmark: up to a year of chargeback in a real PostgreSQL, served by a real
uvicorn on loopback.

    python bench/costsvc_api.py [--hours 8760] [--pods 5000] [--duration 60]
    python bench/costsvc_api.py --hours 720      # a month (2026-11) only
    python bench/costsvc_api.py --quick          # 48 hours x 500 pods, 10 s of load: a smoke run

The data (SQL, INSERT ... SELECT from generate_series, in hour order as ingest writes it, a
month per statement): ``--hours`` hourly rows ending with 2026-11 (8,760: 2025-12-01 to
2026-12-01) for each of ``--pods`` pod slots — ``--fleet realistic`` (the default,
deterministic): slot k's pod is renamed every 10 + k % 21 hours (a new pod: 5 % of pods end
an hour, so a day holds ~6,000 distinct pods per 5,000 slots) and its team label moves to the
next team once in 100 days (1 % of pods relabelled a day); ``--fleet constant``: the same pod
and team all year (the best case) — over 40 teams (5 projects each,
3 stages, 2 clusters, 8 pods a node, a quarter of the nodes A100 and the rest H100, every
10th pod on a MIG slice), plus an ``__idle__`` line an hour for every 5th node; the
rollups the writer keeps beside them (``cost_hours`` per hour and owner, ``cost_days`` per UTC
day and owner, ``cost_pod_days`` per UTC day and pod, ``cost_months`` per UTC month and
owner: costsvc/db/lines.py,
costsvc/db/rollup.py) by the same sums in SQL; then
VACUUM ANALYZE (as autovacuum would, and so that it does not start in the middle of a
measurement). The API runs as its own process (``create_app`` + uvicorn, as ``gpu-costsvc
serve`` runs it, clock fixed at 2026-11-30T23:59:59Z), so its RSS can be read from /proc and
the clients do not share its interpreter.

Prints the machine, the sizes and, for each part, the figures and a PASS/MISS per target:
  1. load: rows and time;
  2. month by team: p50/p95 of ``GET /v1/costs?start&end&group_by=team`` (finance token,
     sequential, keep-alive) vs the same aggregate as raw SQL over the chargeback through
     psycopg [p95 <= 150 ms]; on a miss (a month of data only), the plan (EXPLAIN ANALYZE)
     and the same figures with candidate covering indexes, each built in the bench database
     and dropped again (the schema measured elsewhere is the migrations' own); then the
     12-month trend ``GET /v1/costs?start&end&step=month&group_by=team`` over the hours
     loaded, cold [p95 <= 300 ms], and its SQL over the chargeback once, as the peer;
  3. CSV export: rows/s of ``GET /v1/reports/chargeback.csv?month=2026-11`` vs PostgreSQL
     ``COPY (SELECT the same columns, same order) TO STDOUT WITH CSV`` [>= 0.5x COPY], the
     first 10,000 lines of both compared, and the API process's peak RSS during the export;
  4. ``--clients`` (50) concurrent keep-alive clients for ``--duration`` s over a mix of
     /v1/costs (group_by team / project, window=month), /v1/teams/{team}/summary and
     /v1/budgets, with finance and team tokens [0 errors, p99 <= 250 ms].
Nothing asserts. A JSON copy goes to bench/results/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.costsvc_api_data import (  # noqa: E402 (after the path)
    BUDGETS,
    END,
    MONTH,
    TEAMS,
    YEAR,
    load,
)
from bench.costsvc_api_measure import (  # noqa: E402
    ALLOCATION_QUERIES,
    WINDOW,
    allocation,
    cpu_seconds,
    csv_export,
    explain,
    load_test,
    month_by_team,
    print_month,
    trend,
    try_indexes,
    verdict,
)
from bench.machine import cpu_model, status_kib  # noqa: E402

NOW = dt.datetime(2026, 11, 30, 23, 59, 59, tzinfo=dt.UTC)  # the API's clock

# The API as its own process: argv = root, database URL, port, clock (ISO 8601).
SERVER = """
import sys
from datetime import datetime
sys.path.insert(0, sys.argv[1])
import uvicorn
from costsvc.api.app import create_app
from costsvc.api.server import config
from costsvc.kit.settings import Settings
now = datetime.fromisoformat(sys.argv[4])
workers = int(sys.argv[5])
if workers > 1:  # as `gpu-costsvc serve --workers N` runs it (bench/api_app.py: the clock)
    import os
    os.environ.update(BENCH_NOW=sys.argv[4], BENCH_DATABASE_URL=sys.argv[2])
    from costsvc.api.server import options
    uvicorn.run("bench.api_app:app", factory=True, workers=workers, host="127.0.0.1",
                port=int(sys.argv[3]), log_level="warning",
                **options(Settings(database_url=sys.argv[2]), by_name=True))
else:  # as `gpu-costsvc serve` runs it: the header time-out, the request limits
    settings = Settings(database_url=sys.argv[2])
    app = create_app(settings, clock=lambda: now)
    uvicorn.Server(config(app, settings, "127.0.0.1", int(sys.argv[3]), log_level="warning")).run()
"""


def machine() -> dict[str, Any]:
    model = cpu_model()
    with open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 2**20, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_api(url: str, port: int, workers: int = 1) -> subprocess.Popen[bytes]:
    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(ROOT), url, str(port), NOW.isoformat(), str(workers)],
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the API exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.terminate()
    raise RuntimeError("the API did not start")


def main() -> int:
    from bench.pgcluster import start_postgres

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--hours", type=int, default=None, help="hours ending with 2026-11 (default 8760: a year)"
    )
    ap.add_argument("--pods", type=int, default=None, help="pods an hour (default 5000)")
    ap.add_argument("--duration", type=float, default=None, help="load test, s (default 60)")
    ap.add_argument("--clients", type=int, default=50, help="concurrent clients of the load test")
    ap.add_argument("--requests", type=int, default=50, help="month-by-team requests timed")
    ap.add_argument("--quick", action="store_true", help="48 hours x 500 pods, 10 s of load")
    ap.add_argument(
        "--keep-data",
        type=Path,
        default=None,
        help="keep the PostgreSQL cluster in this directory, and reuse it when a run left one "
        "there (the data is loaded once: a year takes tens of minutes here)",
    )
    ap.add_argument("--skip-load-test", action="store_true", help="no part 4")
    ap.add_argument("--skip-allocation", action="store_true", help="no part 5")
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="API worker processes (gpu-costsvc serve --workers; RSS figures are "
        "then the supervisor's)",
    )
    ap.add_argument(
        "--fleet",
        choices=("realistic", "constant"),
        default="realistic",
        help="realistic: pods renamed as they churn (5 %% an hour) and 1 %% a day relabelled "
        "to another team; constant: the same pods and teams all year (the best case)",
    )
    args = ap.parse_args()
    hours = args.hours or (48 if args.quick else YEAR)
    pods = args.pods or (500 if args.quick else 5000)
    duration = args.duration or (10.0 if args.quick else 60.0)
    hours = min(hours, YEAR)

    import httpx
    import psycopg
    from sqlalchemy import create_engine, text

    from costsvc.auth.tokens import create_token
    from costsvc.db.migrate import upgrade

    report: dict[str, Any] = {"machine": machine(), "hours": hours, "pods": pods}
    keep = args.keep_data
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        os.chmod(keep, 0o755)
    loaded = keep is not None and (keep / "loaded.json").exists()
    pg_base = keep or Path(tempfile.mkdtemp(prefix="pg-"))  # its own: postgres must reach it
    stop_pg: list[str] = []
    api = None
    try:
        url, sock, stop_pg = start_postgres(pg_base)
        upgrade(url)
        pg = psycopg.connect(host=str(sock), user="postgres", dbname="postgres", autocommit=True)
        version = pg.execute("SHOW server_version").fetchone()[0]
        settings = {
            k: pg.execute(f"SHOW {k}").fetchone()[0]
            for k in ("shared_buffers", "work_mem", "max_parallel_workers_per_gather")
        }
        m = report["machine"]
        print(
            f"machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Python "
            f"{m['python']}, PostgreSQL {version} (defaults: "
            + ", ".join(f"{k} {v}" for k, v in settings.items())
            + f"), {m['date']}"
        )
        report["postgres"] = {"version": version, **settings}

        if loaded:
            f = json.loads((pg_base / "loaded.json").read_text())
            hours, pods = f["hours"], f["pods"]
            print(f"   (the data a previous run loaded and kept in {pg_base})")
        else:
            f = {
                **load(pg, hours, pods, args.fleet == "realistic"),
                "hours": hours,
                "pods": pods,
                "fleet": args.fleet,
            }
            if keep is not None:
                (pg_base / "loaded.json").write_text(json.dumps(f))
        report.update(load=f, hours=hours, pods=pods)
        t0 = END - dt.timedelta(hours=hours)
        fleet = "realistic" if f.get("fleet", "realistic") == "realistic" else "best case"
        print(
            f"1. data [{fleet}, load at start {os.getloadavg()[0]:.2f}]: {f['rows']:,} "
            f"chargeback rows ({hours:,} hours from {t0:%Y-%m-%d %H:00} "
            f"to {END:%Y-%m-%d} x {pods:,} pods over {TEAMS} teams + {f['idle_rows']:,} "
            f"__idle__ lines); INSERT ... SELECT {f['insert_s']:.1f} s "
            f"({f['rows'] / f['insert_s']:,.0f} rows/s, of it the rollups {f['rollups_s']:.1f} "
            f"s: {f['cost_hours_rows']:,} cost_hours, {f['cost_days_rows']:,} cost_days, "
            f"{f['cost_pod_days_rows']:,} cost_pod_days rows), "
            f"VACUUM ANALYZE {f['vacuum_analyze_s']:.1f} s; table {f['heap_mib']:,.0f} MiB, "
            f"with indexes {f['total_mib']:,.0f} MiB"
        )

        engine = create_engine(url)
        run = f"{time.time_ns():x}"  # token names are unique; a kept database has older ones
        tokens = {"finance": create_token(engine, f"bf-{run}", "finance", None, "bench")}
        for i in range(TEAMS):
            team = f"team-{i:02d}"
            tokens[team] = create_token(engine, f"b{i}-{run}", "team", team, "bench")
        if not loaded:
            with engine.begin() as conn:
                conn.execute(text(BUDGETS), {"n": TEAMS})
        engine.dispose()

        port = free_port()
        api = start_api(url, port, args.workers)
        base = f"http://127.0.0.1:{port}"
        print(
            f"   API: uvicorn in its own process (pid {api.pid}) on {base}, "
            f"{args.workers} worker(s), RSS {status_kib(api.pid, 'VmRSS') / 1024:.0f} MiB "
            "at start"
        )
        http = httpx.Client(base_url=base, timeout=120)

        print(
            "2. month by team: GET /v1/costs?start=2026-11-01T00:00:00Z&end=2026-12-01T00:00"
            ":00Z&group_by=team (finance token, sequential, keep-alive):"
        )
        warm = month_by_team(http, tokens["finance"], pg, args.requests)
        report["month_by_team_cached"] = warm
        print_month(warm, "cached answer (no data change between requests):")
        f = month_by_team(http, tokens["finance"], pg, args.requests, cold=True)
        report["month_by_team"] = f
        if not print_month(f, "cold (the data version changes before every request):") and (
            hours <= 720  # candidate indexes over a year of rows: an hour each to build
        ):
            plan = explain(pg)
            report["month_by_team_plan"] = plan
            print("  MISS: the plan of the raw SQL (EXPLAIN (ANALYZE, BUFFERS)):")
            for line in plan:
                print(f"      {line}")
            report["month_by_team_indexes"] = try_indexes(
                http, tokens["finance"], pg, max(10, args.requests // 2)
            )

        f = trend(http, tokens["finance"], pg, args.requests, t0)
        report["trend"] = f
        print(
            f"   {hours // 730 or 1}-month trend: GET /v1/costs?start={t0:%Y-%m-%dT%H}:00:00Z&end="
            f"2026-12-01T00:00:00Z&step=month&group_by=team, cold: p50 {f['api_p50_ms']:.1f} ms, "
            f"p95 {f['api_p95_ms']:.1f} ms ({f['api_rows']} rows, {f['requests']} requests)   "
            f"[p95 <= 300 ms: {verdict(f['api_p95_ms'] <= 300)}]; the same SQL over the "
            f"chargeback (the peer, once): {f['sql_chargeback_ms']:,.0f} ms ({f['sql_rows']} rows)"
        )

        print(
            f"3. CSV export: GET /v1/reports/chargeback.csv?month={MONTH} (all rows, streamed) "
            f"vs COPY (SELECT the same columns, same order) TO STDOUT WITH CSV:"
        )
        f = csv_export(http, tokens["finance"], pg, api.pid)
        report["csv"] = f
        ratio = f["api_rows_per_s"] / f["copy_rows_per_s"]
        print(
            f"  API   {f['api_rows']:,} rows, {f['api_bytes'] / 2**20:,.0f} MiB in "
            f"{f['api_s']:.1f} s = {f['api_rows_per_s']:,.0f} rows/s (first byte after "
            f"{f['api_ttfb_s'] * 1000:.0f} ms)"
        )
        print(
            f"  COPY  {f['copy_rows']:,} rows, {f['copy_bytes'] / 2**20:,.0f} MiB in "
            f"{f['copy_s']:.1f} s = {f['copy_rows_per_s']:,.0f} rows/s; first "
            f"{f['compared_lines']:,} lines identical to the API's: "
            f"{'yes' if f['first_lines_identical'] else 'NO'}"
        )
        print(f"  API/COPY {ratio:.2f}x   [>= 0.5x COPY: {verdict(ratio >= 0.5)}]")
        how = "VmHWM, reset before the export" if f["hwm_reset"] else "VmRSS sampled every 0.1 s"
        print(
            f"  API peak RSS during the export {f['peak_rss_mib']:.0f} MiB ({how}; "
            f"{f['rss_before_mib']:.0f} MiB before it)"
        )

        if not args.skip_load_test:
            print(
                f"4. load: {args.clients} concurrent keep-alive clients for {duration:g} s (every "
                f"5th with the finance token, the rest each with its team's): /v1/costs "
                f"window=month group_by team / project, /v1/teams/{{team}}/summary, "
                f"/v1/budgets"
            )
            cpu0 = cpu_seconds(api.pid)
            f = load_test(base, tokens, args.clients, duration)
            f["api_cpu_ms_per_request"] = (cpu_seconds(api.pid) - cpu0) * 1000 / f["requests"]
            report["load_test"] = f
            for label, e in f["per_endpoint"].items():
                print(
                    f"  {label:24s} {e['requests']:6,} requests  p50 {e['p50_ms']:7.1f} ms  "
                    f"p99 {e['p99_ms']:7.1f} ms  errors {e['errors']}"
                )
            print(
                f"  all: {f['requests']:,} requests in {f['duration_s']:.1f} s ({f['rps']:.1f}/s), "
                f"errors {f['errors']}, p50 {f['p50_ms']:.1f} ms, p99 {f['p99_ms']:.1f} ms, max "
                f"{f['max_ms']:.0f} ms   [0 errors: {verdict(f['errors'] == 0)}; p99 <= 250 ms: "
                f"{verdict(f['p99_ms'] <= 250)}]"
            )
            for line in f["failures"]:
                print(f"  e.g. {line}")
            print(
                f"  API peak RSS over the run {status_kib(api.pid, 'VmHWM') / 1024:.0f} MiB; API "
                f"CPU {f['api_cpu_ms_per_request']:.2f} ms a request (user + system, its "
                "process: the figure the machine's load does not move much)"
            )

        if not args.skip_allocation:
            print(
                f"5. OpenCost's /allocation?window={WINDOW} (finance token, cold: the data version "
                "changes before every request) vs the namespace aggregate as raw SQL:"
            )
            f = allocation(http, tokens["finance"], pg, max(5, args.requests // 4))
            report["allocation"] = f
            sql = f["sql_by_namespace"]
            for label in ALLOCATION_QUERIES:
                e = f[label]
                print(
                    f"  {label:24s} p50 {e['p50_ms']:8.1f} ms  p95 {e['p95_ms']:8.1f} ms  "
                    f"{e['sets']} set(s), {e['allocations']:,} allocations  "
                    f"{e['p95_ms'] / sql['p95_ms']:.2f}x raw SQL p95"
                )
            print(
                f"  raw SQL by namespace    p50 {sql['p50_ms']:8.1f} ms  "
                f"p95 {sql['p95_ms']:8.1f} ms"
                f"   [namespace, accumulate p95 <= 2x raw SQL: "
                f"{verdict(f['namespace, accumulate']['p95_ms'] <= 2 * sql['p95_ms'])}]"
            )
        http.close()
        pg.close()
    finally:
        if api is not None:
            api.terminate()
            api.wait(10)
        if stop_pg:
            subprocess.run(stop_pg, check=False, capture_output=True)
        if keep is None:
            shutil.rmtree(pg_base, ignore_errors=True)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    stamp = re.sub(r"[^0-9]", "", report["machine"]["date"])[:12]
    (out / f"costsvc_api-{stamp}.json").write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
