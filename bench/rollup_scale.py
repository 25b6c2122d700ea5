"""One hour of a large fleet (default 10,000 GPUs / 50,000 pods) from Prometheus, and the same
hour from VictoriaMetrics, into PostgreSQL: time per phase and peak memory.

    python bench/rollup_scale.py [--gpus 10000] [--pods 50000] [--interval 60] [--repeat 3]
                                 [--no-vm] [--profile] [--exporter current|gauges-only]

(also ``python bench/costsvc_rollup.py --scale ...``, which runs this). The history
(``--form scraped``, the default) is bench/rollup_month.py's fleet in the form Prometheus stores
scraped data — every series with its target's ``job``/``instance``, each target's ``up``,
whole and time-sliced GPUs, utilisation, SM time, pod labels, each GPU's energy counter — from
three hours before the measured hour to its end, written as one block by bench/tsdb_block.py:
the gauges' summaries (costsvc/ingest/gauges/steady.py) apply to it as to a real Prometheus.
The fleet
publishes our exporter's integrals beside its gauges (bench/fleet_integrals.py), as our exporter
does, and the hour is read from them at the default settings; ``--exporter gauges-only``: the
gauges alone (an exporter before its integrals), read by the gauges' rule. ``--form bare``:
``bench/costsvc_rollup.py``'s history without job/instance/up (every sample read raw), two
hours (look-back + the hour), built by ``promtool tsdb create-blocks-from openmetrics``
(minutes at 10,000 GPUs). Blocks are cached under
``/tmp/gpu-finops-bench/tsdb-<gpus>g-<pods>p-<interval>s[-scraped-<REVISION>-<fleet>]``
(delete it to rebuild; ``--no-cache`` writes to a temporary directory). VictoriaMetrics (a real
``victoria-metrics`` single node) gets the same blocks with ``vmctl prometheus`` (its
Prometheus-snapshot importer) and is flushed (``/internal/force_flush``) before it is read.

Each measured ingest runs in a fresh child process (``--child``): the hour replaced in the same
PostgreSQL database through the production path (costsvc/ingest/run.py ``ingest``, with the
cyclic garbage collector paused as ``gpu-costsvc ingest`` pauses it: ``collections_paused``;
before, the child ingested with it running, which at 10,000 GPUs cost as much CPU as the ingest
itself), and the child's peak RSS is its own, not the parent's nor an earlier run's: its
``VmHWM`` (/proc/self/status: the high-water mark of its own address space, new at ``exec``).
Not ``ru_maxrss``: Linux carries the exec'ing process's peak into it, so a parent that had just
built the 10,000-GPU blocks (1.2 GiB) showed as the child's peak. Prints the machine, the
sizes, the medians of each phase (read, attribute, write) and of the peak RSS, for each source.
Targets: <= 10 s per hour from Prometheus, peak RSS <= 600 MiB.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import machine_line, status_kib  # noqa: E402 (after the path)
from bench.phases import fleet_model, timed_phases  # noqa: E402
from bench.rollup_common import (  # noqa: E402
    FLEETS,
    START,
    chargeback_rows,
    cpu_seconds,
    free_port,
    load_now,
    memory,
    row_differences,
)
from bench.scale_history import start_prometheus, start_victoria, tsdb  # noqa: E402

TARGET_S = 10.0
TARGET_MIB = 600


def _peak_kib() -> int:
    """This process's peak RSS so far, KiB (``VmHWM``: its own address space's, since exec)."""
    return status_kib("self", "VmHWM")


def child(
    url: str, pg_url: str, hour: datetime, profile: bool, source: str = "auto"
) -> dict[str, Any]:
    """One ingest of ``hour`` in this process: its phases and this process's peak RSS."""
    before = _peak_kib()
    import costsvc.ingest.run as run
    from costsvc.db.engine import make_engine
    from costsvc.ingest.prom import PrometheusReader

    model = fleet_model("2026-11-01T00:00:00Z")
    engine = make_engine(pg_url)
    reader = PrometheusReader(url, timeout=600)
    imported = _peak_kib()
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    t0, c0 = time.perf_counter(), time.process_time()
    # the collector paused, as `gpu-costsvc ingest` runs an ingest (costsvc/cli.py)
    with timed_phases() as calls, run.collections_paused():
        report = run.ingest(engine, reader, model, "bench", [hour], source=source)
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    phases = {}
    for key, found in calls.items():
        phases[key] = sum(wall for wall, _ in found)
        phases[f"{key}_cpu"] = sum(used for _, used in found)
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    assert report.done == [hour], report.failed
    counts = report.reads
    reader.close()
    from sqlalchemy import text

    with engine.connect() as conn:
        lines = conn.execute(
            text("SELECT count(*) FROM chargeback WHERE hour = :h"), {"h": hour}
        ).scalar_one()
        facts = conn.execute(
            text("SELECT count(*) FROM usage_facts WHERE hour = :h"), {"h": hour}
        ).scalar_one()
    engine.dispose()
    return {
        "total": took,
        "cpu": cpu,
        **phases,
        "rss_start_kb": before,
        "rss_imported_kb": imported,
        "rss_peak_kb": _peak_kib(),
        "lines": lines,
        "facts": facts,
        "fast": counts.fast,
        "raw": counts.raw,
        "loaded": counts.loaded,
        "integral_hours": counts.integral_hours,
        "integral_gpus": counts.integral_gpus,
        "gauge_gpus": counts.gauge_gpus,
    }


def _measure(
    url: str,
    pg_url: str,
    hour: datetime,
    repeat: int,
    engine: int | None = None,
    source: str = "auto",
) -> list[dict[str, Any]]:
    """``repeat`` ingests of ``hour``, each in a fresh child; with the query engine's CPU
    seconds during each (``engine``: its process id)."""
    out = []
    for _ in range(repeat):
        before = cpu_seconds(engine) if engine else 0.0
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                url,
                pg_url,
                hour.isoformat(),
                "--source",
                source,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        found = json.loads(done.stdout.strip().splitlines()[-1])
        found["engine_cpu"] = cpu_seconds(engine) - before if engine else 0.0
        out.append(found)
    return out


def _line(name: str, runs: list[dict[str, Any]]) -> str:
    def med(key: str) -> float:
        return statistics.median(float(r[key]) for r in runs)

    fits = med("total") <= TARGET_S and med("rss_peak_kb") / 1024 <= TARGET_MIB
    verdict = "PASS" if fits else "MISS"
    return (
        f"{name:16s} one hour: median {med('total'):.2f} s over {len(runs)} runs (read "
        f"{med('collect'):.2f} s, attribute {med('attribute'):.2f} s, write {med('write'):.2f} s)"
        f"; this process's CPU {med('cpu'):.2f} s (read {med('collect_cpu'):.2f} s, "
        f"attribute {med('attribute_cpu'):.2f} s, write {med('write_cpu'):.2f} s), the query "
        f"engine's {med('engine_cpu'):.2f} s"
        f"; peak RSS median {med('rss_peak_kb') / 1024:.0f} MiB (after imports "
        f"{med('rss_imported_kb') / 1024:.0f} MiB)   [<= {TARGET_S:g} s, <= {TARGET_MIB} MiB: "
        f"{verdict}]"
    )


def scale(
    gpus: int,
    pods: int,
    interval: int,
    repeat: int,
    vm: bool,
    cache: bool,
    profile: bool,
    form: str = "scraped",
    fleets: tuple[str, ...] = ("realistic", "constant"),
    source: str = "gpu-exporter",
    exporter: str = "current",
) -> int:
    """The 10,000-GPU hour from Prometheus (and VictoriaMetrics) into PostgreSQL, on each
    fleet of bench/fleet.py: the realistic one, and the constant one (the best case)."""
    from bench.pgcluster import start_postgres
    from costsvc.db.migrate import upgrade

    print(
        f"{machine_line()}, {memory()}, {platform.machine()}, "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {load_now()}"
    )
    pg_base = Path(tempfile.mkdtemp(prefix="pg-"))
    stop_pg: list[str] = []
    try:
        pg_url, _, stop_pg = start_postgres(pg_base)
        upgrade(pg_url)
        for fleet in fleets:
            _scale_one(
                gpus,
                pods,
                interval,
                repeat,
                vm,
                cache,
                profile,
                form,
                fleet,
                pg_url,
                source,
                exporter,
            )
    finally:
        if stop_pg:
            subprocess.run(stop_pg, check=False, capture_output=True)
        shutil.rmtree(pg_base, ignore_errors=True)
    return 0


def _scale_one(
    gpus: int,
    pods: int,
    interval: int,
    repeat: int,
    vm: bool,
    cache: bool,
    profile: bool,
    form: str,
    fleet: str,
    pg_url: str,
    source: str = "gpu-exporter",
    exporter: str = "current",
) -> None:

    label = FLEETS[fleet]
    blocks, how = tsdb(gpus, pods, interval, cache, form, fleet, source, exporter)
    span = "3 h of look-back" if form == "scraped" else "1 h of look-back"
    print(
        f"[{label}] history ({form}): {gpus:,} GPUs, {pods:,} pods at {interval} s, {span} + "
        f"the hour; blocks {how}"
    )
    hour = START + timedelta(hours=1)
    work = Path(tempfile.mkdtemp(prefix="scale-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        port = free_port()
        procs.append(start_prometheus(blocks, port))
        sources = [("Prometheus", f"http://127.0.0.1:{port}", procs[-1].pid)]
        if vm:
            vm_port = free_port()
            proc, t_import = start_victoria(blocks, work, vm_port)
            procs.append(proc)
            print(f"VictoriaMetrics: the same blocks imported with vmctl in {t_import:.0f} s")
            sources.append(("VictoriaMetrics", f"http://127.0.0.1:{vm_port}", proc.pid))
        # one untimed ingest from each first: no source pays for opening its blocks
        for _, url, _ in sources:
            _measure(url, pg_url, hour, 1, source=source)
        results = {}
        print(f"[{label}] measuring at {load_now()}")
        rows = {}
        for name, url, pid in sources:
            results[name] = runs = _measure(url, pg_url, hour, repeat, pid, source)
            print(f"[{label}] exporter {exporter}: " + _line(f"{name} -> PG", runs))
            rows[name] = chargeback_rows(pg_url, hour)
        if len(rows) > 1:
            same = all(r == rows["Prometheus"] for r in rows.values())
            print(f"[{label}] chargeback rows of the hour identical from every source: {same}")
            for name, found in rows.items():
                row_differences(label, name, rows["Prometheus"], found)
        first = results["Prometheus"][0]
        print(
            f"[{label}] the hour: {first['facts']:,} usage facts, {first['lines']:,} chargeback "
            f"lines; series from summaries {first['fast']:,} (of them read raw after all "
            f"{first['loaded']:,}), read raw {first['raw']:,}, GPUs read from the integrals "
            f"{first['integral_gpus']:,}, from the gauges {first['gauge_gpus']:,}; memory is "
            f"bounded by one hour "
            f"of the largest family read at once (its samples as Python objects) plus the "
            f"hour's facts and lines, not by the history"
        )
        if profile:
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    sources[0][1],
                    pg_url,
                    hour.isoformat(),
                    "--profile",
                    "--source",
                    source,
                ],
                check=True,
            )
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(60)
        shutil.rmtree(work, ignore_errors=True)
        if not cache:
            shutil.rmtree(blocks.parent, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=10_000)
    ap.add_argument("--pods", type=int, default=50_000)
    ap.add_argument("--interval", type=int, default=60, help="scrape interval of the history, s")
    ap.add_argument("--repeat", type=int, default=3, help="measured ingests per source")
    ap.add_argument("--no-vm", action="store_true", help="Prometheus only")
    ap.add_argument("--no-cache", action="store_true", help="build the blocks in a temp dir")
    ap.add_argument(
        "--form",
        choices=("scraped", "bare"),
        default="scraped",
        help="scraped: series with job/instance and each target's up, as Prometheus stores "
        "scraped data (the fast reads apply); bare: costsvc_rollup.py's series without them "
        "(promtool-built; every sample read raw)",
    )
    ap.add_argument("--profile", action="store_true", help="one more ingest under cProfile")
    ap.add_argument(
        "--source",
        choices=("gpu-exporter", "dcgm-exporter"),
        default="gpu-exporter",
        help="the fleet as our exporter publishes it, or as NVIDIA's dcgm-exporter + "
        "kube-state-metrics do (bench/fleet.py dcgm: whole GPUs; COSTSVC_SOURCE)",
    )
    ap.add_argument(
        "--fleet",
        choices=("both", "realistic", "constant"),
        default="both",
        help="bench/fleet.py's realistic fleet, the constant one (the best case), or both",
    )
    ap.add_argument(
        "--exporter",
        choices=("current", "gauges-only"),
        default="current",
        help="what the fleet's exporters publish — current: the gauges and our exporter's "
        "integrals (bench/fleet_integrals.py); gauges-only: an exporter before its integrals. "
        "The data decides how the hour is read (costsvc/ingest/collect.py)",
    )
    ap.add_argument(
        "--write-only", type=int, metavar="ROWS", help="only: INSERT vs COPY of ROWS facts"
    )
    ap.add_argument("--child", nargs=3, metavar=("URL", "PG_URL", "HOUR"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        url, pg_url, hour = args.child
        found = child(url, pg_url, datetime.fromisoformat(hour), args.profile, args.source)
        print(json.dumps(found))
        return 0
    if args.write_only:
        from bench.rollup_copy import write_only

        return write_only(args.write_only, args.repeat)
    return scale(
        args.gpus,
        args.pods,
        args.interval,
        args.repeat,
        not args.no_vm,
        not args.no_cache,
        args.profile,
        args.form,
        ("realistic", "constant") if args.fleet == "both" else (args.fleet,),
        args.source,
        args.exporter,
    )


if __name__ == "__main__":
    raise SystemExit(main())
