"""``inference_hours``: an hour's served tokens and their cost, written in the hour's
transaction (costsvc/db/hour_facts.py), and read back for a reprice.

The rows hold the facts (tokens and requests as counted for the model, the prefill and
decode time) next to the money, so a reprice recomputes the money from them with the
hour's new chargeback and the weight in force (costsvc/ingest/reprice.py), no Prometheus
needed. Owners are kept as they were charged, as the chargeback keeps them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, select

from costsvc.db.bulk import insert_tuples
from costsvc.db.models import Chargeback, InferenceHour
from costsvc.inference.split import COUNTS, PRICED, US, PodKey, Priced, Served
from costsvc.kit.money import to_micro
from costsvc.kit.times import as_utc
from costsvc.rules.attribution import Owner
from costsvc.rules.chargeback import OWNER

COLUMNS = (
    "hour",
    "cluster",
    "namespace",
    "pod",
    "model",
    "engine",
    "role",
    *OWNER,
    "currency",
    *COUNTS,
    "prefill_us",
    "decode_us",
    "rule",
    "weight_ppm",
    *PRICED,
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
                to_micro(p.weight),
                *(getattr(p, name) for name in PRICED),
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


def serving_hours(
    engine: Engine, cluster: str, start: datetime, end: datetime
) -> list[dict[str, Any]]:
    """Each (hour, pod, model) served in [start, end) in ``cluster``: its team, tokens and
    money, and the GPU model of the pod's chargeback (the model it held most of), for
    rightsizing (costsvc/advice/run.py)."""
    t, c = InferenceHour, Chargeback
    where = (t.cluster == cluster, t.hour >= start, t.hour < end)
    cols = (t.hour, t.namespace, t.pod, t.model, t.team, t.allocated, t.used, t.waste)
    tokens = (t.input_tokens + t.output_tokens).label("tokens")
    held = (c.hour, c.namespace, c.pod, c.gpu_model)
    with engine.connect() as conn:
        served = conn.execute(select(*cols, tokens, t.gpu_hours).where(*where)).all()
        models: dict[tuple[Any, str, str], tuple[int, str]] = {}
        gpu = conn.execute(
            select(*held, func.sum(c.gpu_hours))
            .where(c.cluster == cluster, c.hour >= start, c.hour < end, c.gpu_model != "")
            .group_by(*held)
        )
        for hour, ns, pod, gpu_model, hours in gpu:
            key = (as_utc(hour), ns, pod)
            found = models.get(key)
            if found is None or (int(hours), gpu_model) > found:
                models[key] = (int(hours), gpu_model)
    out = []
    for r in served:
        found = models.get((as_utc(r.hour), r.namespace, r.pod))
        if found is None:
            continue  # no GPU held: nothing to rightsize
        out.append(
            {
                "hour": as_utc(r.hour),
                "namespace": r.namespace,
                "pod": r.pod,
                "model": r.model,
                "team": r.team,
                "tokens": int(r.tokens),
                "allocated": int(r.allocated),
                "used": int(r.used),
                "waste": int(r.waste),
                "gpu_hours": int(r.gpu_hours),
                "gpu_model": found[1],
            }
        )
    return out
