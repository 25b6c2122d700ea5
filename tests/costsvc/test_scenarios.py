"""Hour 07:00 of history.py through a real Prometheus into SQLite and PostgreSQL: MIG shared by
three teams, an unlabelled pod, a GPU missing from the inventory series, a driver upgrade
mid-hour, and two clusters in one Prometheus (money computed by hand in history.py)."""

from __future__ import annotations

from sqlalchemy import create_engine, func, select

from costsvc.db.models import Chargeback, GpuPresence, UsageFact
from costsvc.rules.chargeback import IDLE, UNALLOCATED
from tests.costsvc.history import HOUR3, MODEL, ingest_with
from tests.costsvc.history_checks import as_utc, assert_every_hour_adds_up, by_team
from tests.prom import Prometheus


def money(url: str, cluster: str) -> dict[str, int]:
    return {team: a + i for team, (a, _, _, i) in by_team(url, cluster).items()}


def test_hour_seven_by_hand(prometheus: Prometheus, db_url: str) -> None:
    ingest_with(prometheus.url, db_url, MODEL, [HOUR3])
    assert money(db_url, "c1") == {
        "a": 1_071_429,
        "b": 714_286,
        "c": 357_142,
        IDLE: 357_143,  # 7 x 1g.10gb
        UNALLOCATED: 2_500_000,  # scratch/orphan: no labels on the pod or its namespace
        "nolist": 1_250_000,  # held 30 minutes, no gpu_device_up: billed, not dropped
        "drv": 2_500_000,  # one GPU across the driver upgrade, not two
        "c1-team": 2_500_000,  # shared/w of cluster c1 ...
    }
    assert money(db_url, "c2") == {"c2-team": 2_500_000}  # ... and its namesake in c2
    assert assert_every_hour_adds_up(db_url) == 2  # (07:00, c1) and (07:00, c2)

    engine = create_engine(db_url)
    with engine.connect() as conn:
        g = GpuPresence
        gpus = {
            r.gpu_uuid: (r.cluster, r.present_us, r.cost)
            for r in conn.execute(select(g.gpu_uuid, g.cluster, g.present_us, g.cost))
        }
        facts = conn.execute(
            select(UsageFact.gpu_uuid, func.count(), func.sum(UsageFact.share_us)).group_by(
                UsageFact.gpu_uuid
            )
        ).all()
        hours = set(conn.execute(select(Chargeback.hour).distinct()).scalars())
    engine.dispose()
    assert {as_utc(h) for h in hours} == {HOUR3}
    assert gpus["GPU-N"] == ("c1", 1_800_000_000, 1_250_000)
    assert gpus["GPU-D"] == ("c1", 3_600_000_000, 2_500_000)
    assert gpus["GPU-X"][0] == "c2"
    per_gpu = {uuid: (n, int(share)) for uuid, n, share in facts}
    assert per_gpu["GPU-D"] == (1, 3_600_000_000)  # one holding across both driver series
    assert per_gpu["GPU-7"][0] == 6
