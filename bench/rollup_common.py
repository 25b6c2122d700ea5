"""What the rollup benches share (bench/costsvc_rollup.py, bench/rollup_month.py,
bench/rollup_scale.py, bench/serve_ingest.py): the one-hour history's start and its OpenMetrics
writer, the look-back before a first hour, the fleets' labels, a free port, the machine's load,
a process's CPU seconds, and an hour's chargeback rows (where two engines' rows differ)."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime
from pathlib import Path

from bench.phases import H100

START = datetime(2026, 11, 10, 0, tzinfo=UTC)
LOOK_BACK = 3 * 3600  # history before the first hour (gpu_device_up's 2 h window)
FLEETS = {"realistic": "realistic", "constant": "best case"}
CACHE = Path("/tmp/gpu-finops-bench")  # the benches' TSDB blocks, kept between runs
REVISION = "r8"  # of the fleets' blocks, in the caches' names: raised when what they hold changes


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


def proc_stat(pid: int | str) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (``[1]`` the parent's pid,
    ``[11:15]`` utime, stime, cutime, cstime in clock ticks)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU seconds so far (/proc/<pid>/stat)."""
    fields = proc_stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_now() -> str:
    """The machine's load averages, for the report (others' work skews wall times)."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} / {five:.2f} / {fifteen:.2f} (1/5/15 min)"


def chargeback_rows(pg_url: str, hour: datetime) -> list[tuple[object, ...]]:
    """The hour's chargeback rows (ids left out), sorted."""
    from sqlalchemy import create_engine, select

    from costsvc.db.models import Chargeback

    engine = create_engine(pg_url)
    with engine.connect() as conn:
        cols = [c for c in Chargeback.__table__.columns if c.key != "id"]
        found = sorted(tuple(r) for r in conn.execute(select(*cols).where(Chargeback.hour == hour)))
    engine.dispose()
    return found


def row_differences(
    label: str, name: str, expected: list[tuple[object, ...]], found: list[tuple[object, ...]]
) -> None:
    """Where ``found`` (from ``name``) differs from Prometheus' rows: how many rows each side
    has alone, and the columns in which the first few differ."""
    from costsvc.db.models import Chargeback

    cols = [c.key for c in Chargeback.__table__.columns if c.key != "id"]
    mine, theirs = set(found) - set(expected), set(expected) - set(found)
    if not mine and not theirs:
        return
    print(f"[{label}] {name}: {len(mine)} rows not Prometheus', {len(theirs)} of Prometheus' not")
    for a, b in list(zip(sorted(theirs), sorted(mine), strict=False))[:5]:
        diff = {c: (x, y) for c, x, y in zip(cols, a, b, strict=True) if x != y}
        print(f"    {diff}")


def memory() -> str:
    try:
        kb = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal:")
        )
    except (OSError, StopIteration):
        return "memory unknown"
    return f"{kb / 2**20:.0f} GiB RAM"
