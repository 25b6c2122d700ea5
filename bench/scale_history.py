"""The history bench/rollup_scale.py ingests its hour from, as Prometheus TSDB blocks (cached
under ``CACHE``): scraped (bench/fleet.py's fleet, written by bench/tsdb_block.py) or bare
(bench/rollup_common.py's OpenMetrics through ``promtool``); and the servers that hold them:
a real Prometheus, and VictoriaMetrics importing the same blocks with ``vmctl``."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from bench.rollup_common import CACHE, LOOK_BACK, REVISION, START, write_history

ROOT = Path(__file__).resolve().parents[1]


def tsdb(
    gpus: int,
    pods: int,
    interval: int,
    cache: bool,
    form: str,
    fleet: str = "realistic",
    source: str = "gpu-exporter",
    exporter: str = "current",
) -> tuple[Path, str]:
    """Prometheus blocks of the history (cached); and what it took. ``exporter`` current
    adds our exporter's integrals (bench/fleet_integrals.py) to the scraped form."""

    kind = f"-scraped-{REVISION}-{fleet}" if form == "scraped" else ""
    kind += "-dcgm" if source == "dcgm-exporter" else ""
    kind += "-integrals" if exporter == "current" and form == "scraped" else ""
    where = CACHE / f"tsdb-{gpus}g-{pods}p-{interval}s{kind}"
    if not cache:
        where = Path(tempfile.mkdtemp(prefix="scale-tsdb-"))
    done = where / "complete"
    if done.exists():
        return where / "data", f"cached ({done.read_text().strip()})"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    if form == "scraped":
        return where / "data", (
            f"built now: {_scraped(where, gpus, pods, interval, fleet, source, exporter)}"
        )
    t = time.perf_counter()
    samples = write_history(where / "h.om", gpus, pods, 2, interval, energy=True)
    t_write = time.perf_counter() - t
    t = time.perf_counter()
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(where / "h.om"), "data"],
        cwd=where,
        check=True,
        capture_output=True,
    )
    t_blocks = time.perf_counter() - t
    (where / "h.om").unlink()
    what = f"{samples:,} samples; written in {t_write:.0f} s, promtool blocks in {t_blocks:.0f} s"
    done.write_text(what + "\n")
    return where / "data", f"built now: {what}"


def _scraped(
    where: Path,
    gpus: int,
    pods: int,
    interval: int,
    fleet: str,
    source: str = "gpu-exporter",
    exporter: str = "current",
) -> str:
    """The history in the form Prometheus stores scraped data (bench/fleet.py: every series
    with its target's ``job``/``instance``, each target's ``up``, each GPU's energy counter),
    from three hours before the measured hour to its end, written as one block by
    bench/tsdb_block.py: what the fast reads (costsvc/ingest/gauges/steady.py) apply to."""
    from bench.fleet import Grid, constant, describe, realistic
    from bench.fleet_dcgm import dcgm
    from bench.fleet_integrals import integrals
    from bench.tsdb_block import write_block

    hour = START + timedelta(hours=1)
    first = (int(hour.timestamp()) - LOOK_BACK) * 1000
    end = (int(hour.timestamp()) + 3600) * 1000
    t = time.perf_counter()
    grid = Grid(first, end, interval * 1000)
    if source == "dcgm-exporter":
        series = dcgm(gpus, grid, fleet == "realistic")
        how = f"{fleet}, as dcgm-exporter + kube-state-metrics show it (whole GPUs)"
    elif fleet == "realistic":
        series, churn = realistic(gpus, pods, grid)
        how = f"realistic (seed 29: {churn.per_hour():.1%} of pods ended per hour, "
        how += f"{churn.relabels} relabels, {churn.recreations} MIG re-creations)"
    else:
        series, how = constant(gpus, pods, grid), "constant (best case)"
    if exporter == "current" and source != "dcgm-exporter":
        series.extend(list(integrals(series, grid)))
        how += ", with the exporter's integrals"
    (where / "data").mkdir()
    write_block(where / "data", series, first, end, interval * 1000)
    what = (
        f"{how}: {describe(series)} (scraped form: job/instance, up) over "
        f"{(end - first) // 1000} s at {interval} s, one block written in "
        f"{time.perf_counter() - t:.0f} s"
    )
    (where / "complete").write_text(what + "\n")
    return what


def _wait(url: str, proc: subprocess.Popen[bytes], what: str) -> None:
    import httpx

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)  # polling interval while the server starts
    raise RuntimeError(f"{what} not ready in 300 s")


def start_prometheus(data: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={ROOT / 'deploy' / 'prometheus.yml'}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=100y",
            "--log.level=error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait(f"http://127.0.0.1:{port}/-/ready", proc, "prometheus")
    return proc


def start_victoria(blocks: Path, work: Path, port: int) -> tuple[subprocess.Popen[bytes], float]:
    """VictoriaMetrics holding the same blocks (vmctl's Prometheus-snapshot import); and the
    import's seconds."""
    proc = subprocess.Popen(
        [
            "victoria-metrics",
            f"-httpListenAddr=127.0.0.1:{port}",
            f"-storageDataPath={work / 'vm'}",
            "-retentionPeriod=100y",
            "-search.latencyOffset=0s",
            "-search.maxUniqueTimeseries=10000000",
            "-search.maxSamplesPerQuery=10000000000",
            "-search.maxQueryDuration=300s",
            "-loggerLevel=ERROR",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    _wait(f"{url}/health", proc, "victoria-metrics")
    t = time.perf_counter()
    vmctl = [
        "vmctl",
        "prometheus",
        f"--prom-snapshot={blocks}",
        f"--vm-addr={url}",
        "-s",
        "--vm-disable-progress-bar",
    ]
    # vmctl insists on a terminal (its progress and prompt): script(1) gives it one
    subprocess.run(
        ["script", "-qec", shlex.join(vmctl), "/dev/null"],
        check=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    import httpx

    httpx.get(f"{url}/internal/force_flush", timeout=300)
    return proc, time.perf_counter() - t
