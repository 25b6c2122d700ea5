"""The data of bench/costsvc_api.py (its docstring says what it is): the month and year it
covers, the fleet's sizes, the SQL that writes a year of chargeback and the rollups beside it
(``load``), as the writer would have. bench/rollup_write.py loads a day of it too."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

MONTH = "2026-11"
START = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
END = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
YEAR = 8760  # hours from 2025-12-01 to 2026-12-01
TEAMS = 40
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"

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

# the rollups as the writer keeps them (costsvc/db/rollup.py, their one writer), as migration
# 0010 backfills them: Σ chargeback per hour and owner, per UTC day and owner, per UTC day and
# pod (with the count of rows) — here a month of hours per statement
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


def rollup_sql(template: str) -> str:
    from costsvc.rules.chargeback import AMOUNTS

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
