"""The 30-day re-ingest, measured: ``python bench/costsvc_rollup.py --month-days 30``.

A month of 1,000 GPUs / 5,000 pods scraped every 60 s — bench/fleet.py's realistic fleet
(seed 29: utilisation and SM time changing at every sample, 5 % of pods ending an hour,
relabels, MIG re-created daily), then its constant one (the best case) — in the form
Prometheus stores scraped data: every series with its target's ``job``/``instance`` (one GPU
exporter per 8-GPU node, kube-state-metrics) and each target's ``up``. ~780 M samples are
written as TSDB blocks of ``--block-hours`` by bench/tsdb_block.py (``promtool tsdb
create-blocks-from`` parses ~200 k samples/s here, an hour and more for a month), 72 by
default: a month kept for a 30-day re-ingest lies, once Prometheus has compacted it, in blocks
of 10 % of the retention (one 30-day block would index all of the month's ~550,000 series of
the realistic fleet in every query). Prometheus runs with the retention of such a month
(:func:`retention`: 31 days), so its compactor leaves those blocks as they are; the bench
prints the compactions it logged while the ingest was measured (0: none competed for the
cores).

Then ``run.ingest`` of every hour of the month into a real PostgreSQL, in one run (as
``gpu-costsvc ingest --start … --end …``), at the default settings — each GPU's hour read from
our exporter's integrals where the fleet publishes them (``--exporter current``, the default),
else from the gauges (``--exporter gauges-only``: an exporter before its integrals;
costsvc/ingest/collect.py) — and ``--workers`` worker processes (costsvc/ingest/parallel.py;
default: the machine's cores): wall time measured, not extrapolated, and the CPU seconds per
hour of the three that share the cores — the service (its workers included), Prometheus and the
PostgreSQL server (bench/pgcluster.py ``server_cpu``: its backends, autovacuum, WAL writer),
their sum and its ratio to the reference loop's seconds (bench/machine.py), so that machines
compare.
Phases (read, attribute, write) are summed only with ``--workers 1``: they are timed by wrapping
functions of costsvc/ingest/run.py in this process, which a spawned worker does not see. With
``--exporter gauges-only``, for comparison (labelled as such) ``--raw-hours`` hours are ingested
again with the gauges read sample by sample into a second database, per-hour median reported,
and their chargeback rows compared with the summaries' (identical, or the bench fails), and
``--paired-hours`` compares the gauges' sums with the reads before them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from bench.machine import machine_line, reference_seconds
from bench.phases import fleet_model, timed_phases, walls
from bench.rollup_common import (
    CACHE,
    FLEETS,
    LOOK_BACK,
    REVISION,
    cpu_seconds,
    free_port,
    load_now,
)
from bench.tsdb_block import write_blocks

ROOT = Path(__file__).resolve().parents[1]
START = datetime(2026, 10, 1, 0, tzinfo=UTC)


def add_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--month-days",
        type=int,
        default=0,
        help="measure a re-ingest of this many days (0: the one-hour bench)",
    )
    ap.add_argument(
        "--month-hours",
        type=int,
        default=0,
        help="with --month-days: measure this many hours instead (a shorter span of a large fleet)",
    )
    ap.add_argument(
        "--raw-hours", type=int, default=24, help="with --month-days: hours also read raw"
    )
    ap.add_argument(
        "--cache",
        action="store_true",
        help=f"keep the month's blocks under {CACHE} and use them again (hard-linked copies)",
    )
    ap.add_argument(
        "--block-hours",
        type=int,
        default=72,
        help="with --month-days: hours per TSDB block (a month kept for 30 days or more lies in "
        "blocks of 10 %% of the retention once Prometheus compacts it: ~3 days)",
    )
    ap.add_argument(
        "--paired-hours",
        type=int,
        default=12,
        help="with --month-days: hours ingested again, in one process, by the reads without "
        "the sums (utilisation and SM time by the constant check, else raw) and by today's, "
        "in blocks of 6 alternating ABBA: CPU seconds of each, same load (0: skip)",
    )
    ap.add_argument(
        "--profile", action="store_true", help="with --month-days: cProfile the fast ingest"
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="with --month-days: worker processes of the fast ingest (COSTSVC_INGEST_WORKERS; "
        "default: this machine's cores); phases are timed only with 1",
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
        help="with --month-days: what the fleet's exporters publish — current: the gauges and "
        "our exporter's integrals (bench/fleet_integrals.py), as our exporter does; "
        "gauges-only: an exporter before its integrals. The data decides how each hour is "
        "read (costsvc/ingest/collect.py): the integrals where they are, else the gauges",
    )


def retention(hours: int) -> str:
    """The retention of the bench's Prometheus: a month kept (31 days; longer for a longer
    history, so that none of it is deleted). Prometheus' compactor merges blocks into ranges of
    2 h x 3^n up to 10 % of the retention (docs/storage.md, "Compaction"; 74 h at 31 days: 54 h
    ranges), so the 72-hour blocks stay as bench/tsdb_block.py wrote them. With a retention of
    years it merged them into 486-hour blocks while the bench ran: minutes of CPU beside the
    ingest that a Prometheus holding a month spent long before (:func:`compactions` reports
    any)."""
    return f"{max(31, -(-hours // 24) + 1)}d"


def compactions(log: Path) -> int:
    """The compactions Prometheus logged (``msg="compact blocks"``)."""
    return log.read_text(errors="replace").count('msg="compact blocks"') if log.exists() else 0


def start_prometheus(
    data: Path, port: int, log: Path, keep: str = retention(0)
) -> subprocess.Popen[bytes]:
    config = data.parent / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1h\n")
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--storage.tsdb.retention.time={keep}",
            "--log.level=info",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(6000):
        try:
            if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("prometheus did not become ready")


def main(args: argparse.Namespace) -> int:

    workers = 1 if args.profile else max(1, args.workers)
    reference = reference_seconds()
    print(
        f"{machine_line(reference)}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {load_now()}; "
        f"ingest workers: {workers}"
    )
    fleets = ("realistic", "constant") if args.fleet == "both" else (args.fleet,)
    for fleet in fleets:
        month(args, fleet, workers, reference)
    return 0


def month(args: argparse.Namespace, fleet: str, workers: int, reference: float) -> None:
    """The re-ingest of one fleet of bench/fleet.py, measured."""
    from sqlalchemy import create_engine, text

    import costsvc.ingest.run as run
    from bench.fleet import Grid, constant, describe, realistic
    from bench.fleet_integrals import integrals
    from bench.pgcluster import server_cpu, start_postgres
    from costsvc.db.migrate import upgrade
    from costsvc.ingest.prom import PrometheusReader

    label = f"[{FLEETS[fleet]}]"
    days = args.month_days
    n_hours = args.month_hours or days * 24  # --month-hours: a shorter span (e.g. 10,000 GPUs)
    work = Path(tempfile.mkdtemp(prefix="month-"))
    procs: list[subprocess.Popen[bytes]] = []
    stop_pg: list[str] = []
    pg_base = work
    t_start = int(START.timestamp())
    try:
        t = time.perf_counter()
        end = t_start + n_hours * 3600
        first = (t_start - LOOK_BACK) * 1000
        size = f"{args.gpus}g-{args.pods}p-{n_hours}h-{args.block_hours}b"
        with_integrals = "-integrals" if args.exporter == "current" else ""
        cached = CACHE / f"month-{size}-{REVISION}-{fleet}{with_integrals}"
        done = cached / "complete"
        if not args.cache or not done.exists():
            grid = Grid(first, end * 1000, 60_000)
            if fleet == "realistic":
                series, churn = realistic(args.gpus, args.pods, grid)
                how = (
                    f"realistic (seed 29: {churn.per_hour():.1%} of pods ended per hour, "
                    f"{churn.pods:,} pods in all, {churn.relabels} relabels, "
                    f"{churn.recreations} MIG re-creations)"
                )
            else:
                series, how = constant(args.gpus, args.pods, grid), "constant (best case)"
            if with_integrals:
                series.extend(list(integrals(series, grid)))
                how = f"{how}, with the exporter's integrals"
            (work / "data").mkdir()
            write_blocks(work / "data", series, first, end * 1000, 60_000, args.block_hours)
            how = f"{how}: {describe(series)}"
            del series
            if args.cache:
                shutil.rmtree(cached, ignore_errors=True)
                cached.mkdir(parents=True)
                subprocess.run(["cp", "-al", str(work / "data"), str(cached)], check=True)
                done.write_text(how)
        else:  # hard links: Prometheus never rewrites a block's files, it writes new blocks
            how = f"{done.read_text()}, blocks from {cached}"
            subprocess.run(["cp", "-al", str(cached / "data"), str(work)], check=True)
        t_backfill = time.perf_counter() - t
        print(f"{label} blocks ready in {t_backfill:.0f} s", flush=True)
        port = free_port()
        t = time.perf_counter()
        prom = start_prometheus(work / "data", port, work / "prom.log", retention(n_hours))
        procs.append(prom)
        url = f"http://127.0.0.1:{port}"
        blocks = sum(1 for p in (work / "data").iterdir() if (p / "meta.json").exists())
        t_compact = time.perf_counter() - t
        du = sum(f.stat().st_size for f in (work / "data").rglob("*") if f.is_file())
        print(
            f"{label} history: {args.gpus} GPUs, {args.pods} pods, {n_hours} hours at 60 s, "
            f"{how} (with up, job/instance); ready in {t_backfill:.0f} s "
            f"(bench/tsdb_block.py), Prometheus ready in {t_compact:.0f} s ({blocks} blocks, "
            f"{du / 2**20:,.0f} MiB)"
        )
        pg_base = Path(tempfile.mkdtemp(prefix="pg-"))
        pg_url, _, stop_pg = start_postgres(pg_base)
        model = fleet_model("2026-09-01T00:00:00Z")
        hours = [START + timedelta(hours=h) for h in range(n_hours)]
        admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text("CREATE DATABASE rawreads"))
        admin.dispose()
        raw_url = pg_url.replace("@/postgres?", "@/rawreads?")

        with timed_phases() as phases:
            upgrade(pg_url)
            engine = create_engine(pg_url)
            reader = PrometheusReader(url, timeout=600)
            print(f"{label} ingesting at {load_now()}", flush=True)
            t = time.perf_counter()
            cpu0 = _own_cpu()
            engine0 = cpu_seconds(prom.pid)
            database0 = server_cpu(pg_base)
            compacted = compactions(work / "prom.log")
            if args.profile:
                import cProfile
                import pstats

                prof = cProfile.Profile()
                report = prof.runcall(run.ingest, engine, reader, model, "bench", hours)
                prof.dump_stats(str(Path(tempfile.gettempdir()) / "rollup_month.prof"))
                pstats.Stats(prof).sort_stats("tottime").print_stats(30)
            else:
                began = time.perf_counter()
                seen = [0]

                def progress(hour: datetime, error: str | None) -> None:
                    seen[0] += 1  # (with workers, hours come in no particular order)
                    done = seen[0]
                    if done % 24 == 0:
                        print(
                            f"  ... {done // 24} days in {time.perf_counter() - began:.0f} s",
                            flush=True,
                        )

                report = run.ingest(
                    engine, reader, model, "bench", hours, progress, workers=workers
                )
            took = time.perf_counter() - t
            cpu = _own_cpu() - cpu0
            engine_cpu = cpu_seconds(prom.pid) - engine0
            database_cpu = server_cpu(pg_base) - database0
            assert report.done == hours, report.failed
            counts = report.reads
            reader.close()
            engine.dispose()
            verdict = "PASS" if took <= 240 and n_hours >= 720 else "MISS" if took > 240 else "-"
            if workers == 1:
                spent = {key: sum(walls(calls)) for key, calls in phases.items()}
                split = (
                    f": read+integrate {spent['collect']:.0f} s, attribute "
                    f"{spent['attribute']:.0f} s, write {spent['write']:.0f} s; series "
                    f"synthesised {counts.fast:,}, read raw {counts.raw:,}; GPU-hours read "
                    f"from the integrals {counts.integral_gpus:,}, from the gauges "
                    f"{counts.gauge_gpus:,}"
                )
            else:  # the phases and the read counts were in the workers
                split = f", {workers} worker processes; phases timed only with --workers 1"
            total = (cpu + engine_cpu + database_cpu) / len(hours)
            print(
                f"{label} PostgreSQL {n_hours}-hour re-ingest from Prometheus, exporter "
                f"{args.exporter}, default settings, measured: {took / 60:.2f} min for "
                f"{len(hours)} hours ({took / len(hours):.3f} s/hour{split}); CPU seconds per "
                f"hour: the service's {cpu / len(hours):.3f} (workers included), Prometheus' "
                f"{engine_cpu / len(hours):.3f}, PostgreSQL's {database_cpu / len(hours):.3f}; "
                f"all three {total:.3f} = {total / reference:.2f} x the reference loop "
                f"({reference:.2f} s); Prometheus compactions meanwhile: "
                f"{compactions(work / 'prom.log') - compacted}   [<= 4 min: {verdict}]"
            )
            if args.paired_hours and args.exporter == "gauges-only":
                paired(url, prom.pid, pg_url, hours[: args.paired_hours], model, label)
            n = min(args.raw_hours, len(hours)) if args.exporter == "gauges-only" else 0
            if n:  # (the gauges' summaries against their samples; integrals have neither)
                upgrade(raw_url)
                engine = create_engine(raw_url)
                reader = PrometheusReader(url, timeout=600, raw_only=True)
                times = []
                for hour in hours[:n]:
                    t = time.perf_counter()
                    report = run.ingest(engine, reader, model, "bench", [hour])
                    times.append(time.perf_counter() - t)
                    assert report.done == [hour], report.failed
                reader.close()
                engine.dispose()
                same = chargeback(pg_url, hours[n - 1]) == chargeback(raw_url, hours[n - 1])
                assert same, "fast and raw reads gave different chargeback rows"
                per = statistics.median(times)
                print(
                    f"{label} for comparison, raw reads: median {per:.2f} s/hour over {n} "
                    f"hours (x 720 = {per * 720 / 60:.1f} min, extrapolated); chargeback rows of "
                    f"those hours identical to the fast run's: {same}"
                )
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)
        if stop_pg:
            subprocess.run(stop_pg, check=False, capture_output=True)
            shutil.rmtree(pg_base, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def paired(
    url: str, engine_pid: int, pg_url: str, hours: list[datetime], model: object, label: str
) -> None:
    """``hours`` ingested in this process by the reads without the sums (``SUMMED`` empty:
    utilisation and SM time by the constant check, else raw) and by today's, into two fresh
    databases, blocks of 6 hours in the order old, new, new, old, ... (drift in the machine's
    load falls on both); the CPU seconds of this process and of Prometheus for each, and the
    chargeback rows compared."""
    from sqlalchemy import create_engine, text

    import costsvc.ingest.run as run
    from costsvc.db.migrate import upgrade
    from costsvc.ingest.gauges import steady
    from costsvc.ingest.prom import PrometheusReader

    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for name in ("paired_old", "paired_new"):
            conn.execute(text(f"CREATE DATABASE {name}"))
    admin.dispose()
    urls = {k: pg_url.replace("@/postgres?", f"@/paired_{k}?") for k in ("old", "new")}
    spent = {k: [0.0, 0.0] for k in urls}  # this process, Prometheus
    summed = steady.SUMMED
    blocks = [hours[i : i + 6] for i in range(0, len(hours), 6)]
    for i, block in enumerate(blocks):
        for kind in ("old", "new") if i % 2 == 0 else ("new", "old"):
            upgrade(urls[kind])
            engine = create_engine(urls[kind])
            reader = PrometheusReader(url, timeout=600)
            steady.SUMMED = frozenset() if kind == "old" else summed  # type: ignore[misc]
            try:
                c0, e0 = _own_cpu(), cpu_seconds(engine_pid)
                report = run.ingest(engine, reader, model, "bench", block)  # type: ignore[arg-type]
                spent[kind][0] += _own_cpu() - c0
                spent[kind][1] += cpu_seconds(engine_pid) - e0
                assert report.done == block, report.failed
            finally:
                steady.SUMMED = summed  # type: ignore[misc]
                reader.close()
                engine.dispose()
    same = chargeback(urls["old"], hours[-1]) == chargeback(urls["new"], hours[-1])
    assert same, "the reads without the sums and with them gave different chargeback rows"
    n = len(hours)
    old, new = spent["old"], spent["new"]
    print(
        f"{label} paired, one process, {n} hours in blocks of 6 (ABBA), CPU seconds per hour: "
        f"reads without the sums {old[0] / n:.3f} (+ Prometheus {old[1] / n:.3f}), today's "
        f"{new[0] / n:.3f} (+ Prometheus {new[1] / n:.3f}): service x{old[0] / new[0]:.2f}, "
        f"engine x{old[1] / max(new[1], 1e-9):.2f}, both x"
        f"{(old[0] + old[1]) / (new[0] + new[1]):.2f} less; chargeback rows identical: {same}"
    )


def _own_cpu() -> float:
    """CPU seconds of this process and of its children that have ended (the workers)."""
    import resource

    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def chargeback(url: str, until: datetime) -> list[tuple[object, ...]]:
    """Every chargeback row up to ``until`` (ids left out), sorted."""
    from sqlalchemy import create_engine, select

    from costsvc.db.models import Chargeback

    engine = create_engine(url)
    with engine.connect() as conn:
        cols = [c for c in Chargeback.__table__.columns if c.key != "id"]
        out = sorted(tuple(r) for r in conn.execute(select(*cols).where(Chargeback.hour <= until)))
    engine.dispose()
    return out  # type: ignore[return-value]
