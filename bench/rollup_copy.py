"""INSERT against COPY: ``usage_facts`` rows of one hour written into a real PostgreSQL by
SQLAlchemy's executemany INSERT and by costsvc/db/bulk.py's COPY, alternated.

    python bench/rollup_scale.py --write-only ROWS [--repeat N]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.rollup_common import START, memory


def write_only(facts: int, repeat: int) -> int:
    """``usage_facts`` rows of one hour into PostgreSQL: SQLAlchemy's executemany INSERT
    against costsvc/db/bulk.py's COPY, alternated, in one transaction each (rolled back)."""
    from sqlalchemy import insert

    from bench.pgcluster import start_postgres
    from costsvc.db import bulk
    from costsvc.db.engine import make_engine
    from costsvc.db.migrate import upgrade
    from costsvc.db.models import UsageFact

    rows = [
        {
            "hour": START,
            "cluster": "bench",
            "node": f"node-{i // 40}",
            "gpu_uuid": f"GPU-{i // 5:05d}",
            "gi_id": -1,
            "namespace": f"team-{i % 40}",
            "pod": f"pod-{i}",
            "container": "main",
            "share_us": 3_600_000_000 // 5,
            "busy_share_us": 1_000_000_000 + i,
            "sm_us": 500_000_000 + i,
            "shared": True,
            "compute_slices": None,
            "memory_slices": None,
            "mig_profile": "",
            "memory_share_us": None,
        }
        for i in range(facts)
    ]
    base = Path(tempfile.mkdtemp(prefix="pg-"))
    pg_url, _, stop = start_postgres(base)
    try:
        upgrade(pg_url)
        engine = make_engine(pg_url)
        times: dict[str, list[float]] = {"executemany INSERT": [], "COPY": []}
        for _ in range(repeat):
            for name, took in times.items():
                with engine.connect() as conn:
                    t = time.perf_counter()
                    if name == "COPY":
                        bulk.insert_rows(conn, UsageFact, rows)
                    else:
                        conn.execute(insert(UsageFact), rows)
                    took.append(time.perf_counter() - t)
                    conn.rollback()
        engine.dispose()
    finally:
        subprocess.run(stop, check=False, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    print(f"machine: {os.cpu_count()} cores, {memory()}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    for name, ts in times.items():
        print(
            f"{facts:,} usage_facts rows, {name:20s}: median {statistics.median(ts):.2f} s "
            f"over {repeat}"
        )
    return 0
