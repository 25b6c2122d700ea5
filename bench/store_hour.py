"""What writing one ingested hour costs: ``costsvc/db/hour_facts.py store_hour`` alone (facts,
chargeback, ``cost_hours``, the daily and monthly rollups, watermark, run) into a throwaway
PostgreSQL, for an hour of ``--gpus`` GPUs / ``--pods`` pods attributed by the production
``attribute_hour``.

    python bench/store_hour.py [--gpus 1000] [--pods 5000] [--hours 8] [--profile]

The fleet is bench/costsvc_rollup.py's (GPUs held whole by one pod each, the rest time-sliced
by the other pods), with measured energy and carbon so every column is written. ``--hours``
consecutive hours of one UTC day are written new (the first ingest of each: the day's rollup
rows already exist after the first), then each is written again (a re-ingest: its rows
replaced, the same money), then again priced at another price (a re-ingest after a price
fix: every amount changes). Each write is its own transaction, committed, as in an ingest.
Prints medians of the wall time, the Python CPU (``time.process_time``: this process only)
and the rest (wall - CPU: the time spent waiting, mostly on the server, which runs on
another core). Nothing asserts. ``--profile``: the writes under cProfile, dumped to
/tmp/store_hour.prof.
"""

from __future__ import annotations

import argparse
import cProfile
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

H100 = "NVIDIA H100 80GB HBM3"
START = datetime(2026, 11, 10, 0, tzinfo=UTC)
CLUSTER = "bench"


def fleet(gpus: int, pods: int, hour: datetime) -> object:
    """The hour's facts: bench/costsvc_rollup.py's fleet, with energy on every GPU."""
    from costsvc.rules.attribution import GpuHour, Holding, HourFacts

    facts = HourFacts(hour)
    whole = min(gpus, max(0, gpus - (pods - gpus) // 10)) if pods > gpus else gpus
    shared_gpus = gpus - whole
    per_gpu = max(1, -(-(pods - whole) // shared_gpus)) if shared_gpus else 0
    full = Decimal(3600)
    for i in range(gpus):
        node = f"node-{i // 8}"
        mw = (200 + i % 300) * 1000
        g = GpuHour(
            CLUSTER, node, f"GPU-{i:05d}", H100, None, full, mw * 3600, 0, full, mw - 50_000
        )
        facts.gpus.append(g)
        facts.node_of[g.key] = node
    for p in range(pods):
        if p < whole:
            g_i, share, shared = p, Decimal(1), False
        else:
            g_i, share, shared = whole + (p - whole) // per_gpu, Decimal(1) / per_gpu, True
        seconds = (share * full).quantize(Decimal("0.000001"))
        facts.holdings.append(
            Holding(
                f"GPU-{g_i:05d}",
                f"team-{p % 40}",
                f"pod-{p}",
                "main",
                seconds,
                (seconds * Decimal("0.6")).quantize(Decimal("0.000001")),
                (seconds * Decimal("0.6")).quantize(Decimal("0.000001")) if shared else Decimal(0),
                shared,
                cluster=CLUSTER,
            )
        )
    return facts


def main() -> int:
    from sqlalchemy import create_engine, func, select

    from bench.pgcluster import start_postgres
    from costsvc.db import runs
    from costsvc.db.hour_facts import store_hour
    from costsvc.db.migrate import upgrade
    from costsvc.db.models import Chargeback, UsageFact
    from costsvc.rules.attribution import Owner, attribute_hour
    from costsvc.rules.cost_model import parse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--hours", type=int, default=8)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()

    def priced(hourly: str) -> Any:
        return parse(
            {
                "policies": {"shared_gpu_policy": "usage"},
                "versions": [
                    {
                        "effective_from": "2026-11-01T00:00:00Z",
                        "prices": [{"model": H100, "hourly": hourly, "idle_watts": "70"}],
                    }
                ],
                "carbon": [
                    {
                        "effective_from": "2026-11-01T00:00:00Z",
                        "grams_per_kwh": "380",
                        "pue": "1.3",
                    }
                ],
            }
        )

    model, other = priced("2.50"), priced("2.75")

    def owner(cluster: str, namespace: str, pod: str) -> Owner:
        return Owner(namespace, f"p-{pod[-1]}", "prod")

    hours = [START + timedelta(hours=h) for h in range(args.hours)]
    work = []
    for h in hours:
        facts = fleet(args.gpus, args.pods, h)
        results = [
            attribute_hour(h, facts.gpus, facts.holdings, owner, m)  # type: ignore[attr-defined]
            for m in (model, other)
        ]
        work.append((h, facts, results))
    base = Path(tempfile.mkdtemp(prefix="pg-"))
    url, _, stop = start_postgres(base)
    prof = cProfile.Profile() if args.profile else None
    try:
        upgrade(url)
        engine = create_engine(url)
        with engine.connect() as conn:
            version = conn.exec_driver_sql("SHOW server_version").scalar()
        model_id = runs.record_cost_model(engine, model)
        out: dict[str, tuple[list[float], list[float]]] = {}
        labels = ("new hour", "re-write, same money", "re-write, other price")
        for i, label in enumerate(labels):
            walls, cpus = [], []
            for h, facts, results in work:
                result = results[i == 2]
                run_id = runs.start_run(engine, CLUSTER, h, "ingest", model_id)
                if prof:
                    prof.enable()
                c0, w0 = time.process_time(), time.perf_counter()
                store_hour(engine, CLUSTER, facts, result, "USD", run_id)  # type: ignore[arg-type]
                walls.append((time.perf_counter() - w0) * 1000)
                cpus.append((time.process_time() - c0) * 1000)
                if prof:
                    prof.disable()
            out[label] = (walls, cpus)
        with engine.connect() as conn:
            n_lines = conn.execute(select(func.count()).select_from(Chargeback)).scalar()
            n_facts = conn.execute(select(func.count()).select_from(UsageFact)).scalar()
        engine.dispose()
    finally:
        subprocess.run(stop, check=False, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(
        f"PostgreSQL {version}, Python {sys.version.split()[0]}, load {' '.join(load)}, "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
    print(
        f"one hour: {args.gpus:,} GPUs, {len(work[0][1].holdings):,} holdings, "  # type: ignore[attr-defined]
        f"{(n_lines or 0) // len(hours):,} chargeback lines "
        f"({n_facts:,} usage facts in {len(hours)} hours)"
    )
    for label, (walls, cpus) in out.items():
        rest = [w - c for w, c in zip(walls, cpus, strict=True)]
        print(
            f"  store_hour, {label}: median {statistics.median(walls):.0f} ms "
            f"(Python CPU {statistics.median(cpus):.0f} ms, waiting {statistics.median(rest):.0f}"
            f" ms; {len(walls)} hours)"
        )
    if prof:
        prof.dump_stats("/tmp/store_hour.prof")
        print("  profile: /tmp/store_hour.prof")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
