"""gpu-costsvc ingest benchmark: one hour of a large fleet, from a real Prometheus into a real
PostgreSQL (and SQLite), through the production ingest path.

    python bench/costsvc_rollup.py [--gpus 1000] [--pods 5000] [--hours 2] [--interval 60]
    python bench/costsvc_rollup.py --month-days 30   # the 30-day re-ingest, measured
                                                     # (bench/rollup_month.py)
    python bench/costsvc_rollup.py --scale [...]   # 10,000 GPUs / 50,000 pods, and from
                                                   # VictoriaMetrics: bench/rollup_scale.py

The synthetic history (written as OpenMetrics, loaded with ``promtool tsdb
create-blocks-from openmetrics``): GPUs held whole by one pod each, the rest time-sliced with
the remaining pods spread over them; utilisation per GPU, SM time per shared holder, and
``kube_pod_labels`` for every pod, scraped every ``--interval`` seconds. Prints the machine,
the sizes, the time of each phase per hour (Prometheus reads, integration + attribution, the
database write) and the extrapolation to a 30-day rebuild (720 hours, measured per-hour time x
720: labelled as an extrapolation). Targets: one hour <= 5 s into PostgreSQL; 30 days <= 10 min.

Energy (``--hours N``: N hours of each kind): hours 1, 4, 7, ... have each GPU's
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` counter and ``DCGM_FI_DEV_POWER_USAGE``; hours 0, 3,
6, ... none (not even in their look-back: hours 2, 5, ... separate them and are not ingested).
The model prices carbon intensity and idle power. The ingest times of the two kinds of hour
(interleaved: same Prometheus, same database, same load) are compared. Target: with energy
within 10 % of without.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.phases import H100, fleet_model, timed_phases, walls  # noqa: E402 (after the path)
from bench.rollup_common import (  # noqa: E402
    FLEETS,
    START,
    free_port,
    load_now,
    write_history,
)


def rebuild(url: str, first: datetime, n: int, model: object) -> None:
    """The 30-day rebuild: ``n`` hours of stored facts (the ingested hour's rows copied to the
    hours after it, in SQL), repriced by a back-dated cost-model version covering all of them —
    what ``gpu-costsvc ingest`` does after a price change, from stored facts, no Prometheus."""
    from sqlalchemy import create_engine, text

    from costsvc.ingest.reprice import reprice, stale_hours
    from costsvc.rules.cost_model import parse

    engine = create_engine(url)
    t = time.perf_counter()
    with engine.begin() as conn:
        for table in ("gpu_hours", "usage_facts", "chargeback"):
            conn.execute(text(f"DELETE FROM {table} WHERE hour > :h"), {"h": first})
            cols = [
                c
                for (c,) in conn.execute(
                    text(
                        "SELECT column_name FROM information_schema.columns WHERE table_name = :t "
                        "AND column_name NOT IN ('id', 'hour') ORDER BY ordinal_position"
                    ),
                    {"t": table},
                )
            ]
            names = ", ".join(cols)
            conn.execute(
                text(
                    f"INSERT INTO {table} (hour, {names}) SELECT hour + make_interval(hours => k), "
                    f"{names} FROM {table}, generate_series(1, :n) AS k WHERE hour = :h"
                ),
                {"n": n - 1, "h": first},
            )
        rows = conn.execute(text("SELECT count(*) FROM chargeback")).scalar_one()
        facts = conn.execute(text("SELECT count(*) FROM usage_facts")).scalar_one()
    t_copy = time.perf_counter() - t
    back_dated = parse(
        {
            "policies": {"shared_gpu_policy": "usage"},
            "versions": [
                {
                    "effective_from": "2026-11-01T00:00:00Z",
                    "prices": [{"model": H100, "hourly": "2.75"}],
                }
            ],
        }
    )
    t = time.perf_counter()
    stale = stale_hours(engine, back_dated)
    report = reprice(engine, back_dated, "bench", stale)
    took = time.perf_counter() - t
    engine.dispose()
    assert len(report.done) == n, report.failed
    print(
        f"{'':10s} 30-day rebuild from stored facts (a back-dated price over {n} hours: "
        f"{facts:,} usage facts -> {rows:,} chargeback rows; facts copied in {t_copy:.0f} s): "
        f"{took / 60:.1f} min, {took / n:.2f} s/hour   [<= 10 min: "
        f"{'PASS' if took * 720 / n <= 600 else 'MISS'}]"
    )


def main() -> int:
    if "--scale" in sys.argv:  # the 10,000-GPU hour and VictoriaMetrics: bench/rollup_scale.py
        from bench.rollup_scale import main as scale_main

        return scale_main([a for a in sys.argv[1:] if a != "--scale"])
    from bench import rollup_month as month

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--hours", type=int, default=2)
    ap.add_argument("--interval", type=int, default=60, help="scrape interval of the history, s")
    ap.add_argument(
        "--rebuild-hours",
        type=int,
        default=720,
        help="hours of stored facts to rebuild from (PostgreSQL; 0: skip)",
    )
    month.add_options(ap)
    args = ap.parse_args()
    if args.month_days:
        return month.main(args)  # the measured 30-day re-ingest (bench/rollup_month.py)

    print(
        f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {load_now()}"
    )
    for fleet in ("realistic", "constant") if args.fleet == "both" else (args.fleet,):
        one_hour(args, fleet, FLEETS[fleet])
    return 0


def one_hour(args: argparse.Namespace, fleet: str, label: str) -> None:
    """The one-hour bench on one fleet of bench/fleet.py (module docstring)."""
    from sqlalchemy import create_engine

    import costsvc.ingest.run as run
    from bench.pgcluster import start_postgres
    from costsvc.db.migrate import upgrade
    from costsvc.ingest.collect import collect_hour
    from costsvc.ingest.prom import PrometheusReader
    from costsvc.ingest.reader import RunReader

    work = Path(tempfile.mkdtemp(prefix="rollup-"))
    prom_proc = None
    stop_pg: list[str] = []
    pg_base = work
    try:
        t = time.perf_counter()
        total_hours = 3 * args.hours - 1  # without energy, with, a separating hour, ...
        samples = write_history(
            work / "h.om", args.gpus, args.pods, total_hours, args.interval, True, fleet
        )
        t_write = time.perf_counter() - t
        t = time.perf_counter()
        subprocess.run(
            [
                "promtool",
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                str(work / "h.om"),
                str(work / "data"),
            ],
            check=True,
            capture_output=True,
        )
        t_blocks = time.perf_counter() - t
        port = free_port()
        prom_proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={ROOT / 'deploy' / 'prometheus.yml'}",
                f"--storage.tsdb.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=100y",
                "--log.level=error",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import httpx

        for _ in range(600):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        pg_base = Path(tempfile.mkdtemp(prefix="pg-"))  # its own: postgres must reach it
        pg_url, _, stop_pg = start_postgres(pg_base)
        model = fleet_model("2026-11-01T00:00:00Z")
        hours = [START + timedelta(hours=h) for h in range(total_hours) if h % 3 != 2]
        print(
            f"[{label}] history: {args.gpus} GPUs, {args.pods} pods, {total_hours} h at "
            f"{args.interval} s "
            f"({args.hours} ingested with energy series, {args.hours} without, interleaved) "
            f"= {samples:,} samples; written in {t_write:.1f} s, promtool blocks in "
            f"{t_blocks:.1f} s"
        )
        # one untimed read of every hour first: no kind of hour pays for opening the blocks
        warm = PrometheusReader(f"http://127.0.0.1:{port}", timeout=300)
        with RunReader(warm) as reads:
            for hour in hours:
                collect_hour(reads, hour, "bench")
        warm.close()
        for name, url in (("PostgreSQL", pg_url), ("SQLite", f"sqlite:///{work / 'b.db'}")):
            upgrade(url)
            engine = create_engine(url)
            reader = PrometheusReader(f"http://127.0.0.1:{port}", timeout=300)
            times = []
            try:
                with timed_phases() as calls:
                    for hour in hours:
                        t0 = time.perf_counter()
                        report = run.ingest(engine, reader, model, "bench", [hour])
                        assert report.done == [hour], report.failed
                        times.append(time.perf_counter() - t0)
            finally:
                reader.close()
                engine.dispose()
            phases = {key: walls(found) for key, found in calls.items()}
            n = args.hours
            fleet_label = label
            for kind, part in (
                ("without energy", slice(0, None, 2)),
                ("with energy", slice(1, None, 2)),
            ):
                per_hour = statistics.median(times[part])
                verdict = "PASS" if per_hour <= 5 else "MISS"
                print(
                    f"[{fleet_label}] {name:10s} one hour {kind}: median {per_hour:.2f} s over "
                    f"{n} hours "
                    f"(read Prometheus {statistics.median(phases['collect'][part]):.2f} s, "
                    f"attribute {statistics.median(phases['attribute'][part]):.2f} s, write "
                    f"{statistics.median(phases['write'][part]):.2f} s)   [<= 5 s: {verdict}]"
                )
            ratio = statistics.median(times[1::2]) / statistics.median(times[::2])
            print(
                f"{'':10s} with energy / without: {ratio:.3f}   "
                f"[within 10 %: {'PASS' if ratio <= 1.10 else 'MISS'}]"
            )
            month = per_hour * 720
            print(
                f"{'':10s} 30-day re-ingest from Prometheus, extrapolated (720 x median hour): "
                f"{month / 60:.1f} min"
            )
            if name == "PostgreSQL" and args.rebuild_hours:
                rebuild(url, hours[0], args.rebuild_hours, model)
    finally:
        if prom_proc is not None:
            prom_proc.terminate()
            prom_proc.wait(10)
        if stop_pg:
            subprocess.run(stop_pg, check=False, capture_output=True)
            shutil.rmtree(pg_base, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
