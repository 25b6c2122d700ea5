"""What keeping the daily rollups costs the writer: one hour of ``--pods`` pods written through
``costsvc/db/lines.py write_lines`` into a real PostgreSQL holding the rest of its day.

    python bench/rollup_write.py [--pods 5000] [--repeat 5]

The day's other 23 hours are loaded as bench/costsvc_api.py loads them (SQL, with
``cost_hours``, ``cost_days`` and ``cost_pod_days``); then the last hour is written
``--repeat`` times through ``write_lines`` — the first time new (nothing to subtract), then
as a re-ingest (its rows replaced) — each in its own transaction, rolled back for the
next, timing the whole write and, inside it, the rollup steps (``take_hour``/``put_hour``; on
PostgreSQL ``put_hour`` also writes the hour's ``cost_hours``).
The peer: re-summing the day's chargeback into the two daily rollups (what a recompute per
write would cost). Prints the machine, the sizes, medians. Nothing asserts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESUM = """
SELECT count(*) FROM (
  SELECT cluster, team, project, stage, namespace, pod, currency, count(*), sum(allocated),
         sum(used), sum(waste), sum(idle), sum(gpu_hours), sum(energy_mj)
  FROM chargeback WHERE hour >= %(a)s AND hour < %(b)s
  GROUP BY cluster, team, project, stage, namespace, pod, currency) AS per_pod
"""


def main() -> int:
    import psycopg
    from sqlalchemy import create_engine, select

    import costsvc.db.rollup as rollup
    from bench import costsvc_api as api
    from bench import costsvc_api_data as data
    from bench.pgcluster import start_postgres
    from costsvc.db.lines import write_lines
    from costsvc.db.migrate import upgrade
    from costsvc.db.models import Chargeback
    from costsvc.rules.chargeback import AMOUNTS, LINE_KEY
    from costsvc.rules.lines import Line

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    m = api.machine()
    base = Path(tempfile.mkdtemp(prefix="pg-"))
    url, sock, stop = start_postgres(base)
    try:
        upgrade(url)
        pg = psycopg.connect(host=str(sock), user="postgres", dbname="postgres", autocommit=True)
        version = pg.execute("SHOW server_version").fetchone()[0]
        print(
            f"machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Python "
            f"{m['python']}, PostgreSQL {version}, {m['date']}"
        )
        t0 = data.END - dt.timedelta(hours=24)
        hour = data.END - dt.timedelta(hours=1)
        # the realistic day: pods renamed and relabelled as costsvc_api_data's fleet churns
        params = {"pods": args.pods, "t0": t0, "h100": data.H100, "a100": data.A100, "churn": True}
        pg.execute(data.LINES, params)
        pg.execute(data.LOAD, {**params, "h0": 0, "h1": 24})
        for sql in (data.COST_HOURS, data.COST_DAYS, data.COST_POD_DAYS):
            pg.execute(data.rollup_sql(sql), {"a": t0, "b": data.END})
        pg.execute("VACUUM ANALYZE")
        engine = create_engine(url)
        with engine.connect() as conn:  # the hour's lines, as attribution would hand them over
            c = Chargeback
            rows = conn.execute(
                select(*(getattr(c, k) for k in LINE_KEY), *(getattr(c, a) for a in AMOUNTS)).where(
                    c.hour == hour
                )
            ).all()
        lines = [Line(*r[: len(LINE_KEY)], *r[len(LINE_KEY) :]) for r in rows]  # type: ignore[arg-type]
        clusters = {ln.cluster for ln in lines}
        # the hour as not yet ingested: its rows out, the day's rollups without it
        pg.execute("DELETE FROM chargeback WHERE hour = %s", (hour,))
        pg.execute("DELETE FROM cost_hours WHERE hour = %s", (hour,))
        pg.execute("DELETE FROM cost_days")
        pg.execute("DELETE FROM cost_pod_days")
        for sql in (data.COST_DAYS, data.COST_POD_DAYS):
            pg.execute(data.rollup_sql(sql), {"a": t0, "b": data.END})
        pg.execute("VACUUM ANALYZE")

        steps: dict[str, list[float]] = {"take_hour": [], "put_hour": []}
        take, put = rollup.take_hour, rollup.put_hour

        def timed(name: str, f: Any) -> Any:
            def run(*a: Any, **k: Any) -> Any:
                t = time.perf_counter()
                try:
                    return f(*a, **k)
                finally:
                    steps[name].append((time.perf_counter() - t) * 1000)

            return run

        import costsvc.db.lines as writer

        writer.take_hour, writer.put_hour = timed("take_hour", take), timed("put_hour", put)
        out = {}
        for label, first in (("new hour", True), ("re-ingest of the hour", False)):
            for s in steps.values():
                s.clear()
            whole = []
            if not first:  # the hour is there, as after its first ingest
                with engine.begin() as conn:
                    write_lines(conn, hour, clusters, lines, "USD")
            for _ in range(args.repeat):
                conn = engine.connect()
                tx = conn.begin()
                t = time.perf_counter()
                write_lines(conn, hour, clusters, lines, "USD")
                whole.append((time.perf_counter() - t) * 1000)
                tx.rollback()
                conn.close()
            out[label] = (whole, {k: list(v) for k, v in steps.items()})
        resum = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            pg.execute(RESUM, {"a": t0, "b": data.END}).fetchone()
            resum.append((time.perf_counter() - t) * 1000)
        engine.dispose()
        n = len(lines)
        print(f"one hour: {n:,} chargeback lines ({args.pods:,} pods), its day 24 x that")
        for label, (whole, st) in out.items():
            parts = ", ".join(f"{k} {statistics.median(v):.0f} ms" for k, v in st.items() if v)
            print(
                f"  write_lines, {label}: median {statistics.median(whole):.0f} ms "
                f"(of it {parts}; {args.repeat} runs)"
            )
        print(
            f"  peer: re-summing the day's chargeback per pod (a recompute per write): median "
            f"{statistics.median(resum):.0f} ms"
        )
    finally:
        subprocess.run(stop, check=False, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
