"""``inference_hours``: an hour's served tokens and their cost, written in the hour's
transaction (costsvc/db/hours.py), and read back for a reprice.

The rows hold the facts (tokens and requests as counted for the model, the prefill and
decode time) next to the money, so a reprice recomputes the money from them with the
hour's new chargeback and the weight in force (costsvc/ingest/reprice.py), no Prometheus
needed. Owners are kept as they were charged, as the chargeback keeps them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal

from sqlalchemy import Connection, Engine, delete, select

from costsvc.attribution import Owner
from costsvc.db.bulk import insert_tuples
from costsvc.db.models import InferenceHour
from costsvc.inference import US, PodKey, Priced, Served
from costsvc.utc import as_utc

PPM = 1_000_000
COLUMNS = (
    "hour",
    "cluster",
    "namespace",
    "pod",
    "model",
    "engine",
    "role",
    "team",
    "project",
    "stage",
    "currency",
    "input_tokens",
    "output_tokens",
    "requests",
    "prefill_us",
    "decode_us",
    "rule",
    "weight_ppm",
    "allocated",
    "used",
    "waste",
    "idle",
    "gpu_hours",
    "input_cost",
    "output_cost",
    "input_used",
    "output_used",
)


def _us(seconds: Decimal | None) -> int | None:
    return None if seconds is None else int(seconds * US)


def write_served(
    conn: Connection, hour: datetime, clusters: set[str], rows: Iterable[Priced], currency: str
) -> None:
    """Make the hour's ``inference_hours`` rows (for these clusters) equal ``rows``."""
    t = InferenceHour
    conn.execute(delete(t).where(t.hour == hour, t.cluster.in_(clusters)))
    tuples = []
    for p in rows:
        s = p.served
        tuples.append(
            (
                hour,
                s.cluster,
                s.namespace,
                s.pod,
                s.model,
                s.engine,
                s.role,
                p.owner.team,
                p.owner.project,
                p.owner.stage,
                currency,
                s.input_tokens,
                s.output_tokens,
                s.requests,
                _us(s.prefill_seconds),
                _us(s.decode_seconds),
                p.rule,
                int(p.weight * PPM),
                p.allocated,
                p.used,
                p.waste,
                p.idle,
                p.gpu_hours,
                p.input_cost,
                p.output_cost,
                p.input_used,
                p.output_used,
            )
        )
    insert_tuples(conn, t, COLUMNS, tuples)


def load_served(conn: Connection, hour: datetime) -> tuple[list[Served], dict[PodKey, Owner]]:
    """An ingested hour's served facts, and the owner each serving pod was charged to."""
    t = InferenceHour
    served, owners = [], {}
    for r in conn.execute(select(*t.__table__.c).where(t.hour == hour).order_by(t.id)):
        s = Served(
            r.cluster,
            r.namespace,
            r.pod,
            r.model,
            r.engine,
            r.role,
            int(r.input_tokens),
            int(r.output_tokens),
            int(r.requests),
            None if r.prefill_us is None else Decimal(r.prefill_us) / US,
            None if r.decode_us is None else Decimal(r.decode_us) / US,
        )
        served.append(s)
        owners[s.pod_key] = Owner(r.team, r.project, r.stage)
    return served, owners


def charged_weights(engine: Engine) -> list[tuple[datetime, str, int]]:
    """Every (hour, served model, output:input weight in millionths) an hour was split with."""
    t = InferenceHour
    cols = (t.hour, t.model, t.weight_ppm)
    with engine.connect() as conn:
        return [(as_utc(r[0]), r[1], int(r[2])) for r in conn.execute(select(*cols).distinct())]
