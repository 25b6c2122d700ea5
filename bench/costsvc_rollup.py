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
import socket
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

START = datetime(2026, 11, 10, 0, tzinfo=UTC)


def write_history(
    path: Path,
    gpus: int,
    pods: int,
    hours: int,
    interval: int,
    energy: bool = False,
    fleet: str = "constant",
) -> int:
    """``energy``: energy series in the hours 1, 4, 7, ... (from the start). ``fleet``:
    ``realistic`` writes bench/fleet.py's realistic fleet (without job/instance/up, as
    promtool loads it) besides the energy series."""
    if fleet == "realistic":
        return _realistic_history(path, gpus, pods, hours, interval, energy)
    whole = min(gpus, max(0, gpus - (pods - gpus) // 10)) if pods > gpus else gpus
    shared_gpus = gpus - whole
    shared_pods = pods - whole
    per_gpu = max(1, -(-shared_pods // shared_gpus)) if shared_gpus else 0
    t0 = int(START.timestamp())
    stamps = range(t0, t0 + hours * 3600, interval)
    lines = 0
    with path.open("w") as f:

        def family(name: str, series: list[tuple[str, float]]) -> None:
            nonlocal lines
            f.write(f"# TYPE {name} gauge\n")
            for labels, value in series:
                for t in stamps:
                    f.write(f"{name}{{{labels}}} {value} {t}\n")
                lines += len(stamps)

        def gpu(i: int) -> str:
            return f'UUID="GPU-{i:05d}",modelName="{H100}",Hostname="node-{i // 8}",gpu="{i % 8}"'

        family("gpu_device_up", [(gpu(i), 1) for i in range(gpus)])
        family("DCGM_FI_DEV_GPU_UTIL", [(gpu(i), 40 + i % 50) for i in range(gpus)])
        shares, sm, labels = [], [], []
        for p in range(pods):
            if p < whole:
                g, share = p, 1.0
            else:
                g, share = whole + (p - whole) // per_gpu, 1.0 / per_gpu
            holder = f'{gpu(g)},namespace="team-{p % 40}",pod="pod-{p}",container="main"'
            shares.append((f'{holder},resource="nvidia.com/gpu"', share))
            if p >= whole:
                sm.append((holder, share * 0.6))
            labels.append(
                (f'namespace="team-{p % 40}",pod="pod-{p}",label_team="team-{p % 40}"', 1)
            )
        family("gpu_allocation_share", shares)
        family("gpu_container_sm_utilization_ratio", sm)
        family("kube_pod_labels", labels)
        if energy:
            # in each such hour, one sample before (the look-back) and one after (the last pair)
            e_stamps = [
                t
                for h in range(1, hours, 3)
                for t in range(t0 + h * 3600 - interval, t0 + (h + 1) * 3600 + interval, interval)
            ]
            since = t0
            f.write("# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n")
            for i in range(gpus):
                for t in e_stamps:
                    f.write(f"DCGM_FI_DEV_POWER_USAGE{{{gpu(i)}}} {200 + i % 300} {t}\n")
            f.write("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION gauge\n")
            for i in range(gpus):
                mw = (200 + i % 300) * 1000
                for t in e_stamps:
                    value = 10**12 + mw * (t - since)
                    f.write(f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{gpu(i)}}} {value} {t}\n")
            lines += 2 * gpus * len(e_stamps)
        f.write("# EOF\n")
    return lines


def _realistic_history(
    path: Path, gpus: int, pods: int, hours: int, interval: int, energy: bool
) -> int:
    from bench.fleet import ENERGY, Grid, realistic

    t0 = int(START.timestamp())
    grid = Grid(t0 * 1000, (t0 + hours * 3600 - interval) * 1000, interval * 1000)
    specs, _ = realistic(gpus, pods, grid)
    lines = 0
    with path.open("w") as f:
        seen: set[str] = set()
        for spec in sorted(specs, key=lambda s: (s.name, s.labels, s.first)):
            if spec.name in ("up", ENERGY):
                continue
            if spec.name not in seen:
                seen.add(spec.name)
                f.write(f"# TYPE {spec.name} gauge\n")
            labels = ",".join(
                f'{n}="{v}"' for n, v in spec.labels if n not in ("__name__", "job", "instance")
            )
            for k in range(spec.first, spec.last + 1):
                t = grid.time(k)
                f.write(f"{spec.name}{{{labels}}} {spec.value(t)} {t // 1000}\n")
            lines += spec.last - spec.first + 1
        f.write("# EOF\n")
    if energy:  # the constant fleet's energy hours, appended before its # EOF
        extra = path.with_suffix(".energy")
        write_history(extra, gpus, 0, hours, interval, True)
        text = extra.read_text()
        extra.unlink()
        start = text.index("# TYPE DCGM_FI_DEV_POWER_USAGE")
        body = path.read_text()[: -len("# EOF\n")]
        path.write_text(body + text[start:])
        lines += 2 * gpus * len(range(1, hours, 3)) * (3600 // interval + 2)
    return lines


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rebuild(url: str, first: datetime, n: int, model: object) -> None:
    """The 30-day rebuild: ``n`` hours of stored facts (the ingested hour's rows copied to the
    hours after it, in SQL), repriced by a back-dated cost-model version covering all of them —
    what ``gpu-costsvc ingest`` does after a price change, from stored facts, no Prometheus."""
    from sqlalchemy import create_engine, text

    from costsvc.costmodel import parse
    from costsvc.ingest.reprice import reprice, stale_hours

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

    from bench.rollup_scale import FLEETS, load_now

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
    from costsvc.ingest.steady import SteadyReader

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
        with SteadyReader(warm) as reads:
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
