"""An hour's stored facts (``gpu_hours``, ``usage_facts``) and its money, written in one
transaction under the writers' lock; and read back, for a reprice from stored facts.

Durations are stored as integer micro-seconds: the facts read back are exactly the input the
hour was attributed from, so a reprice gives the same money as a re-ingest would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal

from sqlalchemy import Connection, Engine, delete, select

from costsvc.db.bulk import insert_tuples
from costsvc.db.lines import write_lines
from costsvc.db.models import Chargeback, GpuPresence, UsageFact
from costsvc.db.rollup import flush_pod_day, pending_pod_days
from costsvc.db.runs import advance_watermark, lock_clusters, mark_done
from costsvc.inference.repository import load_served, write_served
from costsvc.inference.split import Priced, Served
from costsvc.kit.times import as_utc
from costsvc.queues.repository import QueueRows, load_queues, write_queues
from costsvc.rules.attribution import Controller, GpuHour, Holding, HourFacts, Owner
from costsvc.rules.chargeback import IDLE, OWNER_FROM, QUEUE
from costsvc.rules.lines import HourResult
from costsvc.rules.mig import Geometry, geometry
from costsvc.rules.queues import QueueHour

US = 1_000_000
Owners = dict[tuple[str, str, str], Owner]  # (cluster, namespace, pod) -> owner charged
# a repriced hour's served tokens priced against its new money (costsvc/inference/split.py)
Infer = Callable[[HourResult, list[Served], Owners], list[Priced]]
# a repriced hour's Kueue rows with the money of the policy now in force
Requeue = Callable[[dict[str, list[QueueHour]]], QueueRows]
Controllers = dict[tuple[str, str, str], Controller]  # ... -> its controller, as charged


def store_hour(
    engine: Engine,
    cluster: str,
    facts: HourFacts,
    result: HourResult,
    currency: str,
    run_id: int,
    watermark: bool = True,
    served: Sequence[Priced] = (),
    defer: bool = False,
    queues: QueueRows | None = None,
) -> None:
    """An ingested hour: its facts and money (and its ``served`` tokens, priced, and its
    Kueue ``queues`` rows) replace what the hour had, the watermark moves up to it (unless
    not ``watermark``: a worker of a parallel ingest, whose parent moves it,
    costsvc/ingest/parallel.py) and its run is done
    — all or nothing. ``defer``: its day's per-pod rollup is left pending, for
    :func:`flush_pod_days` (costsvc/db/rollup.py)."""
    clusters = {cluster} | {g.cluster for g in facts.gpus} | {p.served.cluster for p in served}
    clusters |= set(queues or {})
    with engine.begin() as conn:
        lock_clusters(conn, clusters)
        replace_hour(conn, clusters, facts, result, currency, True, served, defer, queues)
        if watermark:
            advance_watermark(conn, cluster, facts.start)
        mark_done(conn, run_id)


def restore_hour(
    engine: Engine,
    cluster: str,
    hour: datetime,
    run_id: int,
    price: Callable[[HourFacts, Owners, Controllers], HourResult],
    currency: str,
    infer: Infer,
    requeue: Requeue | None = None,
) -> None:
    """A repriced hour: its stored facts, owners and controllers go through ``price`` and the
    money replaces the hour's, its served tokens priced again by ``infer`` (its Kueue rows by
    ``requeue``), in one transaction
    under the lock (the facts cannot change underneath)."""
    with engine.begin() as conn:
        found = select(GpuPresence.cluster).where(GpuPresence.hour == hour).distinct()
        clusters = {cluster} | set(conn.execute(found).scalars())
        served, served_owners = load_served(conn, hour)
        clusters |= {s.cluster for s in served}
        stored = load_queues(conn, hour)
        clusters |= set(stored)
        lock_clusters(conn, clusters)
        facts, owners, controllers = load_hour(conn, hour)
        result = price(facts, owners, controllers)
        priced = infer(result, served, served_owners)
        queues = requeue(stored) if requeue is not None else None
        replace_hour(conn, clusters, facts, result, currency, False, priced, queues=queues)
        mark_done(conn, run_id)


def replace_hour(
    conn: Connection,
    clusters: set[str],
    facts: HourFacts,
    result: HourResult,
    currency: str,
    usage: bool,
    served: Sequence[Priced] = (),
    defer: bool = False,
    queues: QueueRows | None = None,
) -> None:
    """Replace the hour's GPU rows, chargeback and served tokens (and its usage facts, when
    ``usage``; its Kueue rows, when ``queues`` is given); ``defer``: as :func:`store_hour`."""
    hour = facts.start
    tables = (UsageFact, GpuPresence) if usage else (GpuPresence,)
    for table in tables:
        conn.execute(delete(table).where(table.hour == hour, table.cluster.in_(clusters)))
    if facts.gpus:
        price, cost = result.gpu_price, result.gpu_cost
        kwh, carbon, co2e = result.gpu_kwh_price, result.gpu_carbon, result.gpu_co2e
        gpu_rows = [
            (
                hour,
                g.cluster,
                g.node,
                g.gpu_uuid,
                g.model,
                g.node_pool,
                int(g.present_seconds * US),
                price[g.key],
                cost[g.key],
                int(g.lost_seconds * US),
                g.energy_mj,
                g.gap_mj,
                int(g.energy_seconds * US),
                g.min_power_mw,
                kwh.get(g.key, 0),
                carbon.get(g.key, 0),
                co2e.get(g.key, 0),
                g.mig_geometry.compute_slices if g.mig_geometry else None,
                g.mig_geometry.memory_slices if g.mig_geometry else None,
                g.reads or None,
            )
            for g in facts.gpus
        ]
        insert_tuples(conn, GpuPresence, GPU_COLUMNS, gpu_rows)
    if usage and facts.holdings:
        node_of = facts.node_of
        fact_rows = [
            (
                hour,
                h.cluster,
                node_of[(h.cluster, h.gpu_uuid)],
                h.gpu_uuid,
                -1 if h.gi_id is None else h.gi_id,
                h.namespace,
                h.pod,
                h.container,
                int(h.share_seconds * US),
                UNMEASURED if h.busy_share_seconds is None else int(h.busy_share_seconds * US),
                int(h.sm_seconds * US),
                h.shared,
                h.compute_slices,
                h.memory_slices,
                h.mig_profile,
                None if h.memory_share_seconds is None else int(h.memory_share_seconds * US),
                h.claim,
            )
            for h in facts.holdings
        ]
        insert_tuples(conn, UsageFact, FACT_COLUMNS, fact_rows)
    write_lines(conn, hour, clusters, result.lines, currency, defer)
    write_served(conn, hour, clusters, served, currency)
    if queues is not None:
        write_queues(conn, hour, clusters, queues, currency)


# the columns of a gpu_hours row, and of a usage_facts row, as replace_hour builds them
GPU_COLUMNS = (
    "hour",
    "cluster",
    "node",
    "gpu_uuid",
    "model",
    "node_pool",
    "present_us",
    "price",
    "cost",
    "lost_us",
    "energy_mj",
    "gap_mj",
    "energy_us",
    "min_power_mw",
    "kwh_price",
    "carbon_ug_per_kwh",
    "co2e_mg",
    "mig_compute_slices",
    "mig_memory_slices",
    "reads",
)
FACT_COLUMNS = (
    "hour",
    "cluster",
    "node",
    "gpu_uuid",
    "gi_id",
    "namespace",
    "pod",
    "container",
    "share_us",
    "busy_share_us",
    "sm_us",
    "shared",
    "compute_slices",
    "memory_slices",
    "mig_profile",
    "memory_share_us",
    "claim",
)
# busy_share_us of a holding with no utilisation series (its efficiency is unknown)
UNMEASURED = -1


def load_hour(conn: Connection, hour: datetime) -> tuple[HourFacts, Owners, Controllers]:
    """An ingested hour's facts, and the owner and controller each pod was charged to."""
    facts = HourFacts(hour)
    _load_gpus(conn, facts)
    _load_holdings(conn, facts)
    owners, controllers = _load_charged(conn, hour, facts)
    return facts, owners, controllers


def _load_gpus(conn: Connection, facts: HourFacts) -> None:
    """The hour's GPUs (``gpu_hours``), each with the MIG geometry it was attributed with."""
    hour = facts.start
    g, u = GpuPresence, UsageFact
    gpu_rows = conn.execute(
        select(
            g.cluster,
            g.node,
            g.gpu_uuid,
            g.model,
            g.node_pool,
            g.present_us,
            g.energy_mj,
            g.gap_mj,
            g.energy_us,
            g.min_power_mw,
            g.lost_us,
            g.mig_compute_slices,
            g.mig_memory_slices,
            g.reads,
        )
        .where(g.hour == hour)
        .order_by(g.cluster, g.gpu_uuid)
    )
    mig_gpus = set(
        conn.execute(
            select(u.cluster, u.gpu_uuid).where(u.hour == hour, u.gi_id >= 0).distinct()
        ).all()
    )
    for r in gpu_rows:
        present = Decimal(r.present_us) / US
        # the geometry the hour was attributed with; an hour stored before it was kept: the
        # rule's table by model (costsvc/rules/mig.py), as a re-ingest would find it
        kept = r.mig_compute_slices and r.mig_memory_slices
        mig = (
            Geometry(r.mig_compute_slices, r.mig_memory_slices)
            if kept
            else geometry(r.model)
            if (r.cluster, r.gpu_uuid) in mig_gpus
            else None
        )
        lost = Decimal(r.lost_us) / US
        energy = (int(r.energy_mj), int(r.gap_mj), Decimal(r.energy_us) / US, r.min_power_mw)
        facts.gpus.append(
            GpuHour(
                r.cluster,
                r.node,
                r.gpu_uuid,
                r.model,
                r.node_pool,
                present,
                *energy,
                lost_seconds=lost,
                mig_geometry=mig,
                reads=r.reads or "",
            )
        )
        facts.node_of[(r.cluster, r.gpu_uuid)] = r.node


def _load_holdings(conn: Connection, facts: HourFacts) -> None:
    """The hour's holdings (``usage_facts``)."""
    u = UsageFact
    fact_rows = conn.execute(
        select(
            u.cluster,
            u.gpu_uuid,
            u.namespace,
            u.pod,
            u.container,
            u.share_us,
            u.busy_share_us,
            u.sm_us,
            u.shared,
            u.compute_slices,
            u.memory_slices,
            u.gi_id,
            u.mig_profile,
            u.memory_share_us,
            u.claim,
        ).where(u.hour == facts.start)
    )
    for f in fact_rows:
        facts.holdings.append(
            Holding(
                f.gpu_uuid,
                f.namespace,
                f.pod,
                f.container,
                Decimal(f.share_us) / US,
                None if f.busy_share_us == UNMEASURED else Decimal(f.busy_share_us) / US,
                Decimal(f.sm_us) / US,
                f.shared,
                f.compute_slices,
                f.memory_slices,
                None if f.gi_id < 0 else f.gi_id,
                f.mig_profile,
                None if f.memory_share_us is None else Decimal(f.memory_share_us) / US,
                f.claim,
                cluster=f.cluster,
            )
        )


def _load_charged(conn: Connection, hour: datetime, facts: HourFacts) -> tuple[Owners, Controllers]:
    """The owner and the controller each pod of the hour was charged to (its lines but the
    ``__idle__`` ones); each line's queue and owner provenance into ``facts.tags``."""
    c = Chargeback
    charged = conn.execute(
        select(
            c.cluster,
            c.namespace,
            c.pod,
            c.team,
            c.project,
            c.stage,
            c.controller_kind,
            c.controller,
            c.gpu_model,
            c.mig_profile,
            *(getattr(c, n) for n in (*QUEUE, OWNER_FROM)),
        ).where(c.hour == hour, c.team != IDLE)
    ).all()
    for r in charged:
        tags = (r.queue, r.cluster_queue, r.cohort, r.flavor, r.owner_from)
        facts.tags[(r.cluster, r.namespace, r.pod, r.gpu_model, r.mig_profile)] = tags
    owners = {(r.cluster, r.namespace, r.pod): Owner(r.team, r.project, r.stage) for r in charged}
    controllers = {
        (r.cluster, r.namespace, r.pod): (r.controller_kind, r.controller) for r in charged
    }
    return owners, controllers


def flush_pod_days(engine: Engine, days: set[datetime] | None = None) -> int:
    """The pending days' per-pod rollup written from their chargeback (costsvc/db/rollup.py;
    ``days``: only those days'), one day and cluster per transaction under the writers' lock
    (hours being written wait for one day, not for all). How many were written."""
    with engine.connect() as conn:
        pending = [(d, c) for d, c in pending_pod_days(conn) if days is None or d in days]
    done = 0
    for day, cluster in pending:
        with engine.begin() as conn:
            lock_clusters(conn, {cluster})
            done += flush_pod_day(conn, day, cluster)
    return done


def charged_prices(engine: Engine) -> list[tuple[datetime, str, str | None, int]]:
    """Every (hour, GPU model, node pool, price per GPU-hour) an ingested hour was charged at."""
    g = GpuPresence
    query = select(g.hour, g.model, g.node_pool, g.price).group_by(
        g.hour, g.model, g.node_pool, g.price
    )
    with engine.connect() as conn:
        return [(as_utc(r[0]), r[1], r[2], int(r[3])) for r in conn.execute(query)]


def charged_energy_rates(
    engine: Engine,
) -> list[tuple[datetime, str, str, str | None, int, int]]:
    """Every (hour, cluster, GPU model, node pool, price per measured kWh, µg CO2e per kWh)
    an ingested hour was charged at."""
    g = GpuPresence
    cols = (g.hour, g.cluster, g.model, g.node_pool, g.kwh_price, g.carbon_ug_per_kwh)
    with engine.connect() as conn:
        return [
            (as_utc(r[0]), r[1], r[2], r[3], int(r[4]), int(r[5]))
            for r in conn.execute(select(*cols).group_by(*cols))
        ]
