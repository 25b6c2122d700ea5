"""gpu-costsvc API benchmark: up to a year of chargeback in a real PostgreSQL, served by a real
uvicorn on loopback.

    python bench/costsvc_api.py [--hours 8760] [--pods 5000] [--duration 60]
    python bench/costsvc_api.py --hours 720      # a month (2026-11) only
    python bench/costsvc_api.py --quick          # 48 hours x 500 pods, 10 s of load: a smoke run

The data (SQL, INSERT ... SELECT from generate_series, in hour order as ingest writes it, a
month per statement): ``--hours`` hourly rows ending with 2026-11 (8,760: 2025-12-01 to
2026-12-01) for each of ``--pods`` pod slots — ``--fleet realistic`` (the default, issue 29,
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
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MONTH = "2026-11"
START = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
END = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
YEAR = 8760  # hours from 2025-12-01 to 2026-12-01
NOW = dt.datetime(2026, 11, 30, 23, 59, 59, tzinfo=dt.UTC)  # the API's clock
TEAMS = 40
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"

# The API as its own process: argv = root, database URL, port, clock (ISO 8601).
SERVER = """
import sys
from datetime import datetime
sys.path.insert(0, sys.argv[1])
import uvicorn
from costsvc.api.app import create_app
from costsvc.api.server import config
from costsvc.settings import Settings
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

LINES = """
CREATE TEMP TABLE bench_lines AS
WITH pods AS (SELECT p, p / 8 AS n FROM generate_series(0, %(pods)s - 1) AS p)
SELECT p AS k, 'prod-' || (n %% 2) AS cluster, 'team-' || lpad((p %% 40)::text, 2, '0') AS team,
       'proj-' || lpad((p %% 40)::text, 2, '0') || '-' || (p / 40) %% 5 AS project,
       (ARRAY['prod', 'staging', 'dev'])[1 + (p / 200) %% 3] AS stage,
       'ns-' || lpad((p %% 40)::text, 2, '0') || '-' || (p / 40) %% 5 AS namespace,
       'pod-' || p AS pod, 'node-' || n AS node,
       CASE WHEN n %% 4 = 3 THEN %(a100)s ELSE %(h100)s END AS gpu_model,
       CASE WHEN p %% 10 = 9 THEN '1g.10gb' ELSE '' END AS mig_profile,
       CASE WHEN p %% 10 = 9 THEN 142857 ELSE 1000000 END::bigint AS gh, false AS idle_line
FROM pods
UNION ALL
SELECT 1000000 + n, 'prod-' || (n %% 2), '__idle__', '__idle__', '__idle__', '', '',
       'node-' || n, CASE WHEN n %% 4 = 3 THEN %(a100)s ELSE %(h100)s END, '', 1000000, true
FROM generate_series(0, (%(pods)s - 1) / 8) AS n WHERE n %% 5 = 0
"""

LOAD = """
INSERT INTO chargeback (hour, cluster, team, project, stage, namespace, pod, node, gpu_model,
                        mig_profile, billing_month, correction, currency, allocated, used, waste,
                        idle, gpu_hours)
SELECT hr, cluster,
       CASE WHEN idle_line OR NOT %(churn)s THEN team
            ELSE 'team-' || lpad(((k + (h / 24 + k %% 100) / 100) %% 40)::text, 2, '0') END,
       project, stage, namespace,
       CASE WHEN idle_line OR NOT %(churn)s THEN pod
            ELSE pod || '-' || (h + k %% (10 + k %% 21)) / (10 + k %% 21) END,
       node, gpu_model, mig_profile,
       to_char(hr AT TIME ZONE 'UTC', 'YYYY-MM'), false, 'USD',
       CASE WHEN idle_line THEN 0 ELSE cost END,
       CASE WHEN idle_line THEN 0 ELSE cost * util / 100 END,
       CASE WHEN idle_line THEN 0 ELSE cost - cost * util / 100 END,
       CASE WHEN idle_line THEN cost ELSE 0 END, gh
FROM generate_series(%(h0)s, %(h1)s - 1) AS h
CROSS JOIN bench_lines
CROSS JOIN LATERAL (SELECT %(t0)s::timestamptz + make_interval(hours => h) AS hr,
                           (CASE WHEN gpu_model = %(a100)s THEN 1600000 ELSE 2500000 END)
                           * gh / 1000000 AS cost,
                           30 + (k * 7 + h) %% 70 AS util) AS x
ORDER BY h, k
"""

BUDGETS = """
INSERT INTO budgets (team, project, amount, currency, thresholds, created_at, updated_at)
SELECT 'team-' || lpad(i::text, 2, '0'), '', 250000000000, 'USD', '[0.8, 1.0]', now(), now()
FROM generate_series(0, :n - 1) AS i
"""

MONTH_BY_TEAM = """
SELECT team, currency, sum(allocated), sum(used), sum(waste), sum(idle), sum(gpu_hours)
FROM chargeback WHERE hour >= %s AND hour < %s
GROUP BY team, currency ORDER BY team, currency
"""
TREND = """
SELECT to_char(hour AT TIME ZONE 'UTC', 'YYYY-MM'), team, currency, sum(allocated), sum(used),
       sum(waste), sum(idle), sum(gpu_hours)
FROM chargeback WHERE hour >= %s AND hour < %s
GROUP BY 1, team, currency ORDER BY 1, team, currency
"""
# the rollups as the writer keeps them (costsvc/db/lines.py refresh_cost_hours,
# costsvc/db/rollup.py apply_delta), as migration 0010 backfills them: Σ chargeback per hour
# and owner, per UTC day and owner, per UTC day and pod (with the count of rows) — here a
# month of hours per statement
OWNER_COLS = "cluster, team, project, stage, currency"
COST_HOURS = """
INSERT INTO cost_hours (hour, {owner}, {amounts})
SELECT hour, {owner}, {sums} FROM chargeback WHERE hour >= %(a)s AND hour < %(b)s
GROUP BY hour, {owner}
"""
COST_POD_DAYS = """
INSERT INTO cost_pod_days (day, {pod}, lines, {amounts})
SELECT date_trunc('day', hour, 'UTC'), {pod}, count(*), {sums} FROM chargeback
WHERE hour >= %(a)s AND hour < %(b)s GROUP BY 1, {pod}
"""
COST_MONTHS = """
INSERT INTO cost_months (month, {owner}, lines, {amounts})
SELECT date_trunc('month', hour, 'UTC'), {owner}, count(*), {sums} FROM chargeback
WHERE hour >= %(a)s AND hour < %(b)s GROUP BY 1, {owner}
"""
COST_DAYS = """
INSERT INTO cost_days (day, {owner}, lines, {amounts})
SELECT date_trunc('day', hour, 'UTC'), {owner}, count(*), {sums} FROM chargeback
WHERE hour >= %(a)s AND hour < %(b)s GROUP BY 1, {owner}
"""

ROLLUP = """
CREATE TABLE bench_daily AS
SELECT date_trunc('day', hour, 'UTC') AS day, cluster, team, project, stage, currency,
       sum(allocated) AS allocated, sum(used) AS used, sum(waste) AS waste, sum(idle) AS idle,
       sum(gpu_hours) AS gpu_hours
FROM chargeback GROUP BY 1, 2, 3, 4, 5, 6
"""
FROM_ROLLUP = """
SELECT team, currency, sum(allocated), sum(used), sum(waste), sum(idle), sum(gpu_hours)
FROM bench_daily WHERE day >= %s AND day < %s
GROUP BY team, currency ORDER BY team, currency
"""

# What GET /v1/reports/chargeback.csv writes (costsvc/reports.py), in SQL: same columns, same
# order; NULLIF so that an empty label is an empty cell (COPY quotes an empty string as "").
PLACEMENT = (
    "cluster",
    "team",
    "project",
    "stage",
    "namespace",
    "pod",
    "node",
    "gpu_model",
    "mig_profile",
)
ISO = """'YYYY-MM-DD"T"HH24:MI:SS"Z"'"""
COPY_SELECT = (
    "SELECT billing_month, to_char(hour AT TIME ZONE 'UTC', " + ISO + "), "
    "to_char((hour + interval '1 hour') AT TIME ZONE 'UTC', " + ISO + "), "
    "CASE WHEN correction THEN 'correction' ELSE 'regular' END, "
    + ", ".join(f"NULLIF({p}, '')" for p in PLACEMENT)
    + ", currency, "
    + ", ".join(
        f"(({m}) / 1e6)::numeric(24, 6)"
        for m in ("gpu_hours", "allocated", "used", "waste", "idle", "allocated + idle")
    )
    # energy (mJ -> kWh, 9 places) and CO2e (mg -> kg) as costsvc/energy.py writes them
    + ", "
    + ", ".join(
        f"round(({m})::numeric / 3600000000, 9)"
        for m in ("energy_mj + idle_energy_mj", "idle_energy_mj")
    )
    + ", ((co2e_mg + idle_co2e_mg) / 1e6)::numeric(24, 6)"
    + " FROM chargeback WHERE billing_month = {month} ORDER BY hour, "
    + ", ".join(PLACEMENT)
    + ", correction"
)

# Candidate indexes for the month-by-team aggregate, tried only when it misses its target.
CANDIDATES = (
    "(hour) INCLUDE (team, currency, allocated, used, waste, idle, gpu_hours)",
    "(team, currency, hour) INCLUDE (allocated, used, waste, idle, gpu_hours)",
)


def machine() -> dict[str, Any]:
    model = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
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


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (and its waited-for children), /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rollup_sql(template: str) -> str:
    from costsvc.chargeback import AMOUNTS

    return template.format(
        owner=OWNER_COLS,
        pod="cluster, team, project, stage, namespace, pod, currency",
        amounts=", ".join(AMOUNTS),
        sums=", ".join(f"sum({a})" for a in AMOUNTS),
    )


def months_of(t0: dt.datetime, t1: dt.datetime) -> list[tuple[dt.datetime, dt.datetime]]:
    """[t0, t1) cut at UTC month starts."""
    out, a = [], t0
    while a < t1:
        b = dt.datetime(a.year + (a.month == 12), a.month % 12 + 1, 1, tzinfo=dt.UTC)
        out.append((a, min(b, t1)))
        a = b
    return out


def load(conn: Any, hours: int, pods: int, churn: bool = True) -> dict[str, Any]:
    """``churn``: the realistic fleet (module docstring); else the constant one (best case)."""
    t0 = END - dt.timedelta(hours=hours)
    params = {"pods": pods, "t0": t0, "h100": H100, "a100": A100, "churn": churn}
    # a bulk load's checkpoint spacing (the defaults checkpoint every 1 GB of WAL)
    conn.execute("ALTER SYSTEM SET max_wal_size = '16GB'")
    conn.execute("SELECT pg_reload_conf()")
    t = time.perf_counter()
    conn.execute(LINES, params)
    hours_sql, days_sql = rollup_sql(COST_HOURS), rollup_sql(COST_DAYS)
    pod_days_sql, months_sql = rollup_sql(COST_POD_DAYS), rollup_sql(COST_MONTHS)
    t_rollup = 0.0
    for a, b in months_of(t0, END):
        h0, h1 = (int((x - t0).total_seconds()) // 3600 for x in (a, b))
        conn.execute(LOAD, {**params, "h0": h0, "h1": h1})
        r = time.perf_counter()
        conn.execute(hours_sql, {"a": a, "b": b})
        conn.execute(days_sql, {"a": a, "b": b})
        conn.execute(pod_days_sql, {"a": a, "b": b})
        conn.execute(months_sql, {"a": a, "b": b})  # a's month: loads cut at month starts
        t_rollup += time.perf_counter() - r
        print(f"   loaded {a:%Y-%m} ({time.perf_counter() - t:.0f} s)", flush=True)
    t_insert = time.perf_counter() - t
    conn.execute("DROP TABLE bench_lines")
    t = time.perf_counter()
    for table in ("chargeback", "cost_hours", "cost_days", "cost_pod_days", "cost_months"):
        conn.execute(f"VACUUM (ANALYZE) {table}")
    t_vacuum = time.perf_counter() - t
    rows, idle = conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE team = '__idle__') FROM chargeback"
    ).fetchone()
    heap, total = conn.execute(
        "SELECT pg_relation_size('chargeback'), pg_total_relation_size('chargeback')"
    ).fetchone()
    n_hours, n_days, n_pod_days = (
        conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        for t in ("cost_hours", "cost_days", "cost_pod_days")
    )
    return {
        "rows": rows,
        "idle_rows": idle,
        "cost_hours_rows": n_hours,
        "cost_days_rows": n_days,
        "cost_pod_days_rows": n_pod_days,
        "insert_s": t_insert,
        "rollups_s": t_rollup,
        "vacuum_analyze_s": t_vacuum,
        "heap_mib": heap / 2**20,
        "total_mib": total / 2**20,
    }


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


def month_by_team(
    http: Any, finance: str, pg: Any, n: int, warmup: int = 3, cold: bool = False
) -> dict[str, float]:
    """The API and the raw SQL, interleaved (the machine's noise falls on both alike); the SQL
    unprepared, so planned for its actual bounds every time, as the API's query is. ``cold``:
    an audit row is added before each API request, which changes the data version, so the
    API's answer cache cannot answer and the aggregate runs every time."""
    params = {"start": "2026-11-01T00:00:00Z", "end": "2026-12-01T00:00:00Z", "group_by": "team"}
    headers = {"Authorization": f"Bearer {finance}"}
    api_ms: list[float] = []
    sql_ms: list[float] = []
    api_groups = sql_groups = 0
    for i in range(warmup + n):
        if cold:
            pg.execute(
                "INSERT INTO audit_log (at, actor, action, target, detail) "
                "VALUES (now(), 'bench', 'bench.invalidate', '', '{}')"
            )
        t = time.perf_counter()
        r = http.get("/v1/costs", params=params, headers=headers)
        r.raise_for_status()
        api_groups = len(r.json()["rows"])
        t_api = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        sql_groups = len(pg.execute(MONTH_BY_TEAM, (START, END), prepare=False).fetchall())
        t_sql = (time.perf_counter() - t) * 1000
        if i >= warmup:
            api_ms.append(t_api)
            sql_ms.append(t_sql)
    return {
        "api_p50_ms": pct(api_ms, 50),
        "api_p95_ms": pct(api_ms, 95),
        "sql_p50_ms": pct(sql_ms, 50),
        "sql_p95_ms": pct(sql_ms, 95),
        "api_groups": api_groups,
        "sql_groups": sql_groups,
        "requests": n,
    }


def trend(http: Any, finance: str, pg: Any, n: int, t0: dt.datetime) -> dict[str, Any]:
    """``GET /v1/costs?step=month&group_by=team`` over [t0, END), cold (an audit row before
    each request changes the data version); its SQL over the chargeback once, as the peer."""
    iso = "%Y-%m-%dT%H:%M:%SZ"
    params = {"start": f"{t0:{iso}}", "end": f"{END:{iso}}", "step": "month", "group_by": "team"}
    headers = {"Authorization": f"Bearer {finance}"}
    ms: list[float] = []
    rows = 0
    for i in range(3 + n):
        pg.execute(
            "INSERT INTO audit_log (at, actor, action, target, detail) "
            "VALUES (now(), 'bench', 'bench.invalidate', '', '{}')"
        )
        t = time.perf_counter()
        r = http.get("/v1/costs", params=params, headers=headers)
        r.raise_for_status()
        rows = len(r.json()["rows"])
        if i >= 3:
            ms.append((time.perf_counter() - t) * 1000)
    t = time.perf_counter()
    sql_rows = len(pg.execute(TREND, (t0, END), prepare=False).fetchall())
    sql_ms = (time.perf_counter() - t) * 1000
    return {
        "api_p50_ms": pct(ms, 50),
        "api_p95_ms": pct(ms, 95),
        "api_rows": rows,
        "sql_chargeback_ms": sql_ms,
        "sql_rows": sql_rows,
        "requests": n,
    }


BY_NAMESPACE = """
SELECT namespace, currency, sum(allocated), sum(used), sum(waste), sum(idle), sum(gpu_hours)
FROM chargeback WHERE hour >= %s AND hour < %s AND team <> '__idle__'
GROUP BY namespace, currency ORDER BY namespace, currency
"""
WINDOW = "2026-11-01T00:00:00Z,2026-12-01T00:00:00Z"
ALLOCATION_QUERIES = {
    "namespace, accumulate": {"aggregate": "namespace", "accumulate": "true"},
    "label:team, idle shared": {
        "aggregate": "label:team",
        "accumulate": "true",
        "includeIdle": "true",
        "shareIdle": "true",
    },
    "namespace, step=1d": {"aggregate": "namespace", "step": "1d"},
}


def allocation(http: Any, finance: str, pg: Any, n: int, warmup: int = 2) -> dict[str, Any]:
    """OpenCost's /allocation over the month, cold (an audit row before each request changes
    the data version), per query; and the namespace aggregate as raw SQL, interleaved."""
    headers = {"Authorization": f"Bearer {finance}"}
    out: dict[str, Any] = {}
    sql_ms: list[float] = []
    for label, params in ALLOCATION_QUERIES.items():
        ms: list[float] = []
        sets = names = 0
        for i in range(warmup + n):
            pg.execute(
                "INSERT INTO audit_log (at, actor, action, target, detail) "
                "VALUES (now(), 'bench', 'bench.invalidate', '', '{}')"
            )
            t = time.perf_counter()
            r = http.get("/allocation", params={"window": WINDOW, **params}, headers=headers)
            r.raise_for_status()
            data = r.json()["data"]
            t_api = (time.perf_counter() - t) * 1000
            sets, names = len(data), sum(len(d) for d in data)
            t = time.perf_counter()
            pg.execute(BY_NAMESPACE, (START, END), prepare=False).fetchall()
            t_sql = (time.perf_counter() - t) * 1000
            if i >= warmup:
                ms.append(t_api)
                sql_ms.append(t_sql)
        out[label] = {
            "p50_ms": pct(ms, 50),
            "p95_ms": pct(ms, 95),
            "sets": sets,
            "allocations": names,
        }
    out["sql_by_namespace"] = {"p50_ms": pct(sql_ms, 50), "p95_ms": pct(sql_ms, 95)}
    return out


def print_month(f: dict[str, float], label: str = "") -> bool:
    ok = f["api_p95_ms"] <= 150 and f["api_p95_ms"] <= 2 * f["sql_p95_ms"]
    if label:
        print(f"  {label}")
    print(
        f"    API  p50 {f['api_p50_ms']:7.1f} ms  p95 {f['api_p95_ms']:7.1f} ms "
        f"({f['api_groups']} groups, {f['requests']} requests)"
    )
    print(
        f"    SQL  p50 {f['sql_p50_ms']:7.1f} ms  p95 {f['sql_p95_ms']:7.1f} ms "
        f"({f['sql_groups']} groups, psycopg, same aggregate)"
    )
    print(
        f"    API/SQL p95 {f['api_p95_ms'] / f['sql_p95_ms']:.2f}x   "
        f"[p95 <= 150 ms: {verdict(f['api_p95_ms'] <= 150)}; <= 2x raw SQL: "
        f"{verdict(f['api_p95_ms'] <= 2 * f['sql_p95_ms'])}]"
    )
    return ok


def explain(pg: Any) -> list[str]:
    rows = pg.execute(
        "EXPLAIN (ANALYZE, BUFFERS) " + MONTH_BY_TEAM, (START, END), prepare=False
    ).fetchall()
    return [r[0] for r in rows]


def try_indexes(http: Any, finance: str, pg: Any, n: int) -> list[dict[str, Any]]:
    out = []
    for i, spec in enumerate(CANDIDATES):
        name = f"bench_candidate_{i}"
        t = time.perf_counter()
        pg.execute(f"CREATE INDEX {name} ON chargeback {spec}")
        pg.execute("VACUUM (ANALYZE) chargeback")  # the visibility map: index-only scans
        built = time.perf_counter() - t
        size = pg.execute("SELECT pg_relation_size(%s::regclass)", (name,)).fetchone()[0]
        try:
            f = month_by_team(http, finance, pg, n)
            plan = explain(pg)
        finally:
            pg.execute(f"DROP INDEX {name}")
        print(
            f"  with CREATE INDEX ON chargeback {spec}  ({size / 2**20:.0f} MiB, built + "
            f"vacuumed in {built:.1f} s):"
        )
        print_month(f)
        for line in plan:
            if "Scan" in line or "Execution Time" in line:
                print(f"      plan: {line.strip()}")
        out.append({"index": spec, "mib": size / 2**20, "build_s": built, **f, "plan": plan})
    # Not an index: the same aggregate from a daily rollup (what an index cannot do: not read
    # every hourly row of the month).
    t = time.perf_counter()
    pg.execute(ROLLUP)
    pg.execute("ANALYZE bench_daily")
    built = time.perf_counter() - t
    rows = pg.execute("SELECT count(*) FROM bench_daily").fetchone()[0]
    ms = []
    for i in range(3 + n):
        t = time.perf_counter()
        pg.execute(FROM_ROLLUP, (START, END), prepare=False).fetchall()
        if i >= 3:
            ms.append((time.perf_counter() - t) * 1000)
    pg.execute("DROP TABLE bench_daily")
    print(
        f"  not an index: the same aggregate in SQL from a daily rollup (day, cluster, team, "
        f"project, stage, currency: {rows:,} rows, built in {built:.1f} s): p50 "
        f"{pct(ms, 50):.1f} ms, p95 {pct(ms, 95):.1f} ms"
    )
    out.append(
        {
            "rollup_rows": rows,
            "build_s": built,
            "sql_p50_ms": pct(ms, 50),
            "sql_p95_ms": pct(ms, 95),
        }
    )
    return out


def csv_export(http: Any, finance: str, pg: Any, pid: int) -> dict[str, Any]:
    from psycopg import sql

    rss0 = status_kib(pid, "VmRSS")
    try:  # reset the peak to now: VmHWM is then this export's peak
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        reset = True
    except OSError:
        reset = False
    peak = [rss0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            peak[0] = max(peak[0], status_kib(pid, "VmRSS"))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    head = bytearray()  # the first lines, to compare with COPY's
    n_bytes = n_lines = 0
    t = time.perf_counter()
    ttfb = None
    auth = {"Authorization": f"Bearer {finance}"}
    with http.stream(
        "GET", "/v1/reports/chargeback.csv", params={"month": MONTH}, headers=auth, timeout=None
    ) as r:
        r.raise_for_status()
        for chunk in r.iter_raw():
            if ttfb is None:
                ttfb = time.perf_counter() - t
            n_bytes += len(chunk)
            n_lines += chunk.count(b"\n")
            if len(head) < 4 << 20:
                head += chunk
    api_s = time.perf_counter() - t
    done.set()
    sampler.join()
    hwm = status_kib(pid, "VmHWM")
    api_rows = n_lines - 1  # the header

    copy_head = bytearray()
    c_bytes = c_lines = 0
    stmt = sql.SQL("COPY ({}) TO STDOUT WITH (FORMAT csv)").format(
        sql.SQL(COPY_SELECT).format(month=sql.Literal(MONTH))
    )
    t = time.perf_counter()
    with pg.cursor() as cur, cur.copy(stmt) as copy:
        for data in copy:
            c_bytes += len(data)
            c_lines += data.tobytes().count(b"\n")
            if len(copy_head) < 4 << 20:
                copy_head += data
    copy_s = time.perf_counter() - t
    n = min(10_000, api_rows, c_lines)
    api_first = bytes(head).split(b"\n")[1 : n + 1]
    copy_first = bytes(copy_head).split(b"\n")[:n]
    return {
        "api_rows": api_rows,
        "api_bytes": n_bytes,
        "api_s": api_s,
        "api_ttfb_s": ttfb or 0.0,
        "api_rows_per_s": api_rows / api_s,
        "copy_rows": c_lines,
        "copy_bytes": c_bytes,
        "copy_s": copy_s,
        "copy_rows_per_s": c_lines / copy_s,
        "first_lines_identical": api_first == copy_first,
        "compared_lines": n,
        "rss_before_mib": rss0 / 1024,
        "peak_rss_mib": (hwm if reset else peak[0]) / 1024,
        "peak_rss_sampled_mib": peak[0] / 1024,
        "hwm_reset": reset,
    }


def load_test(base: str, tokens: dict[str, str], clients: int, duration: float) -> dict[str, Any]:
    """``clients`` keep-alive clients, closed loop, each with its own token and rotation."""
    import httpx

    def plan(i: int) -> tuple[str, list[tuple[str, str, dict[str, str]]]]:
        team = f"team-{i % TEAMS:02d}"
        month = {"window": "month"}
        if i % 5 == 0:  # a finance client: every team
            who = "finance"
            calls = [
                ("costs?group_by=team", "/v1/costs", {**month, "group_by": "team"}),
                ("costs?group_by=project", "/v1/costs", {**month, "group_by": "project"}),
                ("teams/{team}/summary", f"/v1/teams/{team}/summary", {}),
                ("budgets", "/v1/budgets", {}),
            ]
        else:  # a team client: its own team
            who = team
            calls = [
                ("costs?group_by=project", "/v1/costs", {**month, "group_by": "project"}),
                ("teams/{team}/summary", f"/v1/teams/{team}/summary", {}),
                ("costs?group_by=team", "/v1/costs", {**month, "group_by": "team"}),
                ("budgets", "/v1/budgets", {}),
            ]
        return who, calls

    results: list[list[tuple[str, float, bool]]] = [[] for _ in range(clients)]
    failures: list[str] = []
    go = threading.Barrier(clients + 1)
    stop_at = [0.0]

    def client(i: int) -> None:
        who, calls = plan(i)
        headers = {"Authorization": f"Bearer {tokens[who]}"}
        with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
            go.wait()
            k = i  # start the rotation at different places
            while time.perf_counter() < stop_at[0]:
                label, path, params = calls[k % len(calls)]
                k += 1
                t = time.perf_counter()
                try:
                    r = http.get(path, params=params)
                    ok = 200 <= r.status_code < 300
                    if not ok and len(failures) < 5:
                        failures.append(f"{path}: {r.status_code} {r.text[:120]}")
                except httpx.HTTPError as exc:
                    ok = False
                    if len(failures) < 5:
                        failures.append(f"{path}: {type(exc).__name__} {exc}")
                results[i].append((label, (time.perf_counter() - t) * 1000, ok))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for th in threads:
        th.start()
    stop_at[0] = time.perf_counter() + 1e9
    go.wait()
    t0 = time.perf_counter()
    stop_at[0] = t0 + duration
    for th in threads:
        th.join()
    took = time.perf_counter() - t0
    flat = [x for r in results for x in r]
    lat = [ms for _, ms, _ in flat]
    per: dict[str, dict[str, float]] = {}
    for label in sorted({x[0] for x in flat}):
        ms = [m for lab, m, _ in flat if lab == label]
        bad = sum(1 for lab, _, ok in flat if lab == label and not ok)
        per[label] = {
            "requests": len(ms),
            "p50_ms": pct(ms, 50),
            "p99_ms": pct(ms, 99),
            "errors": bad,
        }
    return {
        "clients": clients,
        "duration_s": took,
        "requests": len(flat),
        "errors": sum(1 for *_, ok in flat if not ok),
        "rps": len(flat) / took,
        "p50_ms": pct(lat, 50),
        "p99_ms": pct(lat, 99),
        "max_ms": max(lat, default=0.0),
        "per_endpoint": per,
        "failures": failures,
    }


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

    from costsvc.db.migrate import upgrade
    from costsvc.db.tokens import create_token

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
