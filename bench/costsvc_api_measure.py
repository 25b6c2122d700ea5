"""The measurements of bench/costsvc_api.py (its docstring says what each is and its target):
a month by team and the 12-month trend against their SQL over the chargeback (and, on a miss,
the plan and candidate indexes), OpenCost's /allocation, the CSV export against PostgreSQL's
COPY, and many concurrent clients; the figures' percentiles and verdicts."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from pathlib import Path
from typing import Any

from bench.costsvc_api_data import END, MONTH, START, TEAMS
from bench.machine import status_kib

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

# What GET /v1/reports/chargeback.csv writes (costsvc/reports/monthly.py), in SQL: same columns,
# same order; NULLIF so that an empty label is an empty cell (COPY quotes an empty string as "").
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
    # energy (mJ -> kWh, 9 places) and CO2e (mg -> kg) as costsvc/rules/energy.py writes them
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
