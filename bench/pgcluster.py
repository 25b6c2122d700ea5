"""A throwaway PostgreSQL cluster for the benchmarks, from the installed server binaries (as
the postgres user when run as root: PostgreSQL refuses to run as root)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path


def start_postgres(base: Path) -> tuple[str, Path, list[str]]:
    bindir = Path(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))[-1]).parent
    as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    data, sock = base / "pg", base / "sock"
    reuse = data.is_dir()  # a cluster a run kept (bench/costsvc_api.py --keep-data)
    sock.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(sock, "postgres")
    subprocess.run(
        [
            *as_pg,
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
    ) if not reuse else None
    subprocess.run(
        [
            *as_pg,
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-w",
            "-s",
            "-l",
            str(base / "pg.log"),
            "-o",
            f"-c listen_addresses='' -k {sock}",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    stop = [*as_pg, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-s", "stop"]
    return f"postgresql+psycopg://postgres@/postgres?host={sock}", sock, stop


def server_cpu(base: Path) -> float:
    """CPU seconds of the cluster at ``base`` (started by :func:`start_postgres`): its
    postmaster's, its children's that have ended (reaped: autovacuum workers, connections
    closed) and its live children's — the backends, checkpointer, WAL writer — from /proc."""
    from bench.rollup_common import proc_stat

    postmaster = (base / "pg" / "postmaster.pid").read_text().split()[0]
    total = sum(int(v) for v in proc_stat(postmaster)[11:15])  # its own and reaped children's
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = proc_stat(proc.name)
        except OSError:  # (ended meanwhile)
            continue
        if fields[1] == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")
