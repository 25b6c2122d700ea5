"""Tables. Money is integer micro-units of the billing currency (BigInteger), never floats;
durations are integer micro-seconds. The declarative base and the column sets several tables
share are in costsvc/db/columns.py. The schema is Alembic's to create (never create_all)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    ColumnElement,
    DateTime,
    ForeignKey,
    Index,
    String,
    UniqueConstraint,
    case,
    false,
    literal,
)
from sqlalchemy.ext.hybrid import hybrid_property
from sqlalchemy.orm import Mapped, mapped_column

from costsvc.db.columns import (
    AFTER,
    LEAD,
    QUEUE_HOUR_KEY,
    Advised,
    Base,  # also taken from here by migrations/env.py and the tests
    Charged,
    Daily,
    Hourly,
    Lost,
    Money,
    Owned,
    PodVersion,
    QueueBilled,
    QueueMoney,
    QueueTags,
    QuotaSeconds,
    Reported,
    Summed,
    Valid,
)
from costsvc.db.queue_links import LocalQueueLinks  # noqa: F401  (in Base.metadata)


class CostModelVersion(Base):
    """Every cost-model document that priced something, by content hash; each ingest run
    names the one it used, so every hour's money can be traced to its prices and policies.
    Where the cost model lives in the database (no ``COSTSVC_COST_MODEL`` file), the one in
    force is the document activated last (``activated_at``; the audit log has each change)."""

    __tablename__ = "cost_model_versions"
    id: Mapped[int] = mapped_column(primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    document: Mapped[dict[str, Any]] = mapped_column(JSON)
    loaded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    activated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    activated_by: Mapped[str | None] = mapped_column(String(253))


class PodLabels(PodVersion, Valid, Base):
    """A pod's labels over time: one row per distinct label set, valid [valid_from, valid_to)."""

    __tablename__ = "pod_labels"
    __table_args__ = (
        UniqueConstraint("cluster", "uid", "valid_from"),
        Index("ix_pod_labels_lookup", "cluster", "namespace", "name", "valid_from"),
    )
    labels: Mapped[dict[str, str]] = mapped_column(JSON)


class NamespaceLabels(Valid, Base):
    __tablename__ = "namespace_labels"
    __table_args__ = (UniqueConstraint("cluster", "name", "valid_from"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    cluster: Mapped[str] = mapped_column(String(253))
    name: Mapped[str] = mapped_column(String(253))
    labels: Mapped[dict[str, str]] = mapped_column(JSON)


class IngestRun(Base):
    __tablename__ = "ingest_runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    cluster: Mapped[str] = mapped_column(String(253))
    hour: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    status: Mapped[str] = mapped_column(String(16))  # running | done | failed
    error: Mapped[str | None] = mapped_column(String(2000))
    kind: Mapped[str] = mapped_column(String(16), server_default="ingest")  # ingest | reprice
    cost_model_id: Mapped[int | None] = mapped_column(ForeignKey("cost_model_versions.id"))


class DataVersion(Base):
    """The data version (costsvc/db/version.py): one row, its counter bumped by every write
    that can change a read answer, in that write's own transaction."""

    __tablename__ = "data_version"
    id: Mapped[int] = mapped_column(primary_key=True)  # always 1
    version: Mapped[int] = mapped_column(BigInteger)


class Watermark(Base):
    """The last complete hour ingested, per cluster: ingestion resumes after it."""

    __tablename__ = "watermarks"
    cluster: Mapped[str] = mapped_column(String(253), primary_key=True)
    hour: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class GpuPresence(Hourly, Base):
    """A physical GPU during one hour."""

    __tablename__ = "gpu_hours"
    __table_args__ = (UniqueConstraint("hour", "cluster", "gpu_uuid"),)
    node: Mapped[str] = mapped_column(String(253))
    gpu_uuid: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(128))
    node_pool: Mapped[str | None] = mapped_column(String(253))
    present_us: Mapped[int] = mapped_column(BigInteger)
    price: Mapped[int] = mapped_column(BigInteger)  # micro-units per GPU-hour, as priced
    cost: Mapped[int] = mapped_column(BigInteger)  # micro-units: price x time present
    lost_us: Mapped[int] = mapped_column(BigInteger, server_default="0")  # gpu_device_up 0
    # measured energy (costsvc/rules/energy.py): mJ drawn in the hour, of it during scrape gaps, the
    # micro-seconds the reading covers, the lowest power drawn (mW); and, as charged, the price
    # per measured kWh (0: nameplate power) and the CO2e per kWh (µg, PUE included)
    energy_mj: Mapped[int] = mapped_column(BigInteger, server_default="0")
    gap_mj: Mapped[int] = mapped_column(BigInteger, server_default="0")
    energy_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    min_power_mw: Mapped[int | None] = mapped_column(BigInteger)
    kwh_price: Mapped[int] = mapped_column(BigInteger, server_default="0")
    carbon_ug_per_kwh: Mapped[int] = mapped_column(BigInteger, server_default="0")
    co2e_mg: Mapped[int] = mapped_column(BigInteger, server_default="0")  # the GPU's CO2e
    # a MIG GPU's geometry, as the hour was attributed with it (costsvc/rules/mig.py): its
    # compute and memory slices; NULL for a GPU without MIG instances that hour
    mig_compute_slices: Mapped[int | None] = mapped_column()
    mig_memory_slices: Mapped[int | None] = mapped_column()
    # the rule its hour was read by, integrals or gauges (costsvc/ingest/collect.py); NULL: unkept
    reads: Mapped[str | None] = mapped_column(String(16))


class UsageFact(Hourly, Base):
    """A container's hold on one device unit (GPU, or MIG instance gi_id >= 0) in one hour."""

    __tablename__ = "usage_facts"
    __table_args__ = (
        UniqueConstraint("hour", "cluster", "gpu_uuid", "gi_id", "namespace", "pod", "container"),
    )
    node: Mapped[str] = mapped_column(String(253))
    gpu_uuid: Mapped[str] = mapped_column(String(64))
    gi_id: Mapped[int] = mapped_column()  # -1: the whole GPU
    namespace: Mapped[str] = mapped_column(String(253))
    pod: Mapped[str] = mapped_column(String(253))
    container: Mapped[str] = mapped_column(String(253))
    share_us: Mapped[int] = mapped_column(BigInteger)  # ∫ share dt, micro-GPU-seconds
    busy_share_us: Mapped[int] = mapped_column(BigInteger)
    sm_us: Mapped[int] = mapped_column(BigInteger)
    shared: Mapped[bool] = mapped_column()
    compute_slices: Mapped[int | None] = mapped_column()
    memory_slices: Mapped[int | None] = mapped_column()
    mig_profile: Mapped[str] = mapped_column(String(32), server_default="")
    # ∫ gpu_allocation_memory_share dt, micro-GPU-seconds; NULL: not published
    memory_share_us: Mapped[int | None] = mapped_column(BigInteger)
    # the DRA claim the holding is through, ``<namespace>/<name>`` ("" none, or not kept)
    claim: Mapped[str] = mapped_column(String(507), server_default="")


class Chargeback(Hourly, Owned, Charged, Lost, QueueTags, Base):
    """Money per hour and owner (and node, GPU model, MIG profile), in micro-units of
    ``currency``. ``billing_month`` is the month the row is reported in: the hour's own month,
    or — for a correction of an hour in a month closed since (``correction``) — the next open
    month. A closed month's rows never change."""

    __tablename__ = "chargeback"
    __table_args__ = (
        UniqueConstraint(
            "hour",
            "cluster",
            "team",
            "project",
            "stage",
            "namespace",
            "pod",
            "node",
            "gpu_model",
            "mig_profile",
            "container",
            "billing_month",
        ),
        Index("ix_chargeback_team_hour", "team", "hour"),
        Index("ix_chargeback_billing_month", "billing_month", "team"),
        # (reads by hour: the unique key leads with it; a second index only cost the writes)
    )
    namespace: Mapped[str] = mapped_column(String(253))
    pod: Mapped[str] = mapped_column(String(253))
    node: Mapped[str] = mapped_column(String(253), server_default="")
    gpu_model: Mapped[str] = mapped_column(String(128), server_default="")
    mig_profile: Mapped[str] = mapped_column(String(32), server_default="")
    # the holding's container ("" before they were kept), and its pod's controller as the
    # Kubernetes API names it at that hour (kind "Deployment", "CronJob", ...; "" none)
    container: Mapped[str] = mapped_column(String(253), server_default="")
    controller_kind: Mapped[str] = mapped_column(String(253), server_default="")
    controller: Mapped[str] = mapped_column(String(253), server_default="")
    billing_month: Mapped[str] = mapped_column(String(7))  # YYYY-MM
    correction: Mapped[bool] = mapped_column(server_default=false())
    # then the currency, the money (Charged) and what lost GPUs cost, energy, CO2e (Lost);
    # last, the price per GPU-hour of the row's GPUs (micro-units), as charged: FOCUS' unit
    # price; NULL on a correction, a row whose GPUs were charged different prices, and rows
    # written before it was kept (docs/focus.md)
    unit_price: Mapped[int | None] = mapped_column(BigInteger, sort_order=AFTER)

    @hybrid_property
    def workload(self) -> str:
        """``<Kind>/<name>`` of the pod's controller ("" none): ``group_by=workload``."""
        return f"{self.controller_kind}/{self.controller}" if self.controller else ""

    @workload.inplace.expression
    @classmethod
    def _workload(cls) -> ColumnElement[str]:
        joined = cls.controller_kind + literal("/") + cls.controller
        return case((cls.controller == "", literal("")), else_=joined).label("workload")


class CostHour(Hourly, Owned, Charged, Lost, Base):
    """The chargeback of each hour summed per owner (team, project, stage) and cluster, all
    rows of the hour (corrections included). Kept by the writer in the same transaction as
    the hour's chargeback rows; serves cost queries that need no finer dimension (month by
    team over millions of pod-hours reads a few thousand rows)."""

    __tablename__ = "cost_hours"
    __table_args__ = (
        UniqueConstraint("hour", "cluster", "team", "project", "stage", "currency"),
        Index("ix_cost_hours_team_hour", "team", "hour"),
    )


class CostDay(Daily, Owned, Summed, Base):
    """``cost_hours`` summed per UTC day (the first instant of the day), cluster, owner and
    currency: kept by the writer in the hour's transaction (costsvc/db/rollup.py). Reads over
    a range take its whole days from here and the partial-day edges from ``cost_hours``; a
    year by team reads a few hundred thousand rows instead of millions."""

    __tablename__ = "cost_days"
    __table_args__ = (
        UniqueConstraint("day", "cluster", "team", "project", "stage", "currency"),
        Index("ix_cost_days_team_day", "team", "day"),
        {"postgresql_with": {"fillfactor": 50}},  # room for HOT updates: the writer adds to rows
    )


class CostMonth(Owned, Summed, Base):
    """``cost_days`` summed per UTC month (its first instant): kept like it; serves whole
    months of a range (a 12-month trend reads ~12 x owners rows)."""

    __tablename__ = "cost_months"
    __table_args__ = (
        UniqueConstraint("month", "cluster", "team", "project", "stage", "currency"),
        Index("ix_cost_months_team_month", "team", "month"),
        {"postgresql_with": {"fillfactor": 50}},  # room for HOT updates: the writer adds to rows
    )
    # the head of its key: before Owned's columns
    id: Mapped[int] = mapped_column(primary_key=True, sort_order=LEAD)
    month: Mapped[datetime] = mapped_column(DateTime(timezone=True), sort_order=LEAD)
    cluster: Mapped[str] = mapped_column(String(253), sort_order=LEAD)


class CostPodDay(Daily, Owned, Summed, Base):
    """The chargeback summed per UTC day, cluster, owner, namespace, pod and currency (node,
    GPU model and MIG profile summed away): kept like ``cost_days``; serves the per-pod reads
    (a team's top pods by waste, /metrics per pod) for whole days."""

    __tablename__ = "cost_pod_days"
    __table_args__ = (
        UniqueConstraint(
            "day", "cluster", "team", "project", "stage", "namespace", "pod", "currency"
        ),
        Index("ix_cost_pod_days_team_day", "team", "day"),
        {"postgresql_with": {"fillfactor": 50}},  # room for HOT updates: the writer adds to rows
    )
    namespace: Mapped[str] = mapped_column(String(253))
    pod: Mapped[str] = mapped_column(String(253))


class PodDayPending(Base):
    """A UTC day and cluster whose ``cost_pod_days`` rows are not its chargeback summed yet: a
    multi-hour ingest left them to be written once, from the chargeback, when it ends
    (costsvc/db/rollup.py ``flush_pod_days``); until then the per-pod reads take the day from
    the chargeback. ``day_end``: the day's end (the reads' range on the chargeback)."""

    __tablename__ = "cost_pod_days_pending"
    day: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(253), primary_key=True)
    day_end: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class MonthClose(Base):
    """A frozen month, and the SHA-256 of its reports as exported when it was closed."""

    __tablename__ = "month_closes"
    month: Mapped[str] = mapped_column(String(7), primary_key=True)  # YYYY-MM
    closed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    closed_by: Mapped[str] = mapped_column(String(253))
    csv_sha256: Mapped[str] = mapped_column(String(64))
    focus_sha256: Mapped[str] = mapped_column(String(64))


class Budget(Base):
    """A monthly budget for a team, or for one project of a team (project "" = the team)."""

    __tablename__ = "budgets"
    __table_args__ = (UniqueConstraint("team", "project"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    team: Mapped[str] = mapped_column(String(253))
    project: Mapped[str] = mapped_column(String(253), server_default="")
    amount: Mapped[int] = mapped_column(BigInteger)  # micro-units per month
    currency: Mapped[str] = mapped_column(String(3))
    thresholds: Mapped[list[float]] = mapped_column(JSON)  # alert at these used ratios
    energy_mj: Mapped[int | None] = mapped_column(BigInteger)  # optional energy per month
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ApiToken(Base):
    """A bearer token, stored as its SHA-256 (tokens are 256-bit random: no salt needed).
    ``role``: admin (everything), finance (every team's data, reports, month close), or team
    (its own team's data only)."""

    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(253), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    team: Mapped[str | None] = mapped_column(String(253))
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AuditEntry(Base):
    """Who changed a budget, a token, the cost model or closed a month, and when."""

    __tablename__ = "audit_log"
    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    actor: Mapped[str] = mapped_column(String(253))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(253))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)


class PodOwner(PodVersion, Valid, Base):
    """A pod's controller (``ownerReferences``) over time, valid [valid_from, valid_to); kept
    like its labels, so a pod deleted last week still belongs to its workload."""

    __tablename__ = "pod_owners"
    __table_args__ = (
        UniqueConstraint("cluster", "uid", "valid_from"),
        Index("ix_pod_owners_lookup", "cluster", "namespace", "name"),
    )
    owner_kind: Mapped[str] = mapped_column(String(253))  # "" = no owner
    owner_name: Mapped[str] = mapped_column(String(253))


class ControllerOwner(Reported, Base):
    """The controller of a ReplicaSet or Job (a Deployment, a CronJob; "" = none), as the API
    last reported it; kept after the object is deleted (its pods' history needs it)."""

    __tablename__ = "controller_owners"
    __table_args__ = (UniqueConstraint("cluster", "namespace", "kind", "name"),)
    kind: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(253))
    owner_kind: Mapped[str] = mapped_column(String(253))
    owner_name: Mapped[str] = mapped_column(String(253))


class ResourceQuotaLimit(Reported, Base):
    """A ResourceQuota's hard limit and use of one GPU resource, as the API reports it now
    (quantities as the API writes them, e.g. ``4``)."""

    __tablename__ = "resource_quotas"
    __table_args__ = (UniqueConstraint("cluster", "namespace", "name", "resource"),)
    name: Mapped[str] = mapped_column(String(253))
    resource: Mapped[str] = mapped_column(String(253))
    hard: Mapped[str] = mapped_column(String(64))
    used: Mapped[str | None] = mapped_column(String(64))


class Recommendation(Advised, Base):
    """The latest rightsizing advice per workload and GPU model (costsvc/advice/rightsizing.py),
    replaced as a whole by each run. Ratios in parts per million, money in micro-units per
    month, hours in micro-hours."""

    __tablename__ = "recommendations"
    __table_args__ = (Index("ix_recommendations_team", "team"),)
    workload_kind: Mapped[str] = mapped_column(String(64))
    workload: Mapped[str] = mapped_column(String(253))
    gpu_model: Mapped[str] = mapped_column(String(128))
    pods: Mapped[int] = mapped_column()
    action: Mapped[str] = mapped_column(String(16))
    target: Mapped[str] = mapped_column(String(128))
    reason: Mapped[str] = mapped_column(String(500))
    device_hours: Mapped[int] = mapped_column(BigInteger)  # micro-hours: the confidence
    gpu_hours: Mapped[int] = mapped_column(BigInteger)
    memory_p95_bytes: Mapped[int | None] = mapped_column(BigInteger)
    memory_peak_bytes: Mapped[int | None] = mapped_column(BigInteger)
    activity_p95_ppm: Mapped[int | None] = mapped_column(BigInteger)
    activity_source: Mapped[str] = mapped_column(String(32))
    idle_ppm: Mapped[int | None] = mapped_column(BigInteger)
    current_share_ppm: Mapped[int] = mapped_column(BigInteger)
    target_share_ppm: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    current_monthly: Mapped[int] = mapped_column(BigInteger)
    recommended_monthly: Mapped[int] = mapped_column(BigInteger)
    saving_monthly: Mapped[int] = mapped_column(BigInteger)


class QuotaUsage(Advised, Base):
    """GPU quota against GPUs held and used, per namespace and resource, over the last window
    (costsvc/advice/quotas.py), replaced as a whole by each run. Units (GPUs, MIG instances, shared
    replicas) in milli-units; money in micro-units per month."""

    __tablename__ = "quota_usage"
    __table_args__ = (Index("ix_quota_usage_team", "team"),)
    resource: Mapped[str] = mapped_column(String(253))
    source: Mapped[str] = mapped_column(String(32))  # kubernetes | kube-state-metrics | none
    hard_milli: Mapped[int | None] = mapped_column(BigInteger)
    used_milli: Mapped[int | None] = mapped_column(BigInteger)
    held_milli: Mapped[int] = mapped_column(BigInteger)  # mean units held over the window
    active_milli: Mapped[int] = mapped_column(BigInteger)  # ... of them, in use
    currency: Mapped[str] = mapped_column(String(3))
    unit_price: Mapped[int | None] = mapped_column(BigInteger)  # micro-units per unit-hour
    unused_monthly: Mapped[int | None] = mapped_column(BigInteger)  # quota nobody held
    idle_monthly: Mapped[int | None] = mapped_column(BigInteger)  # held but idle


class WebSession(Base):
    """A signed-in browser of the cost service's pages (costsvc/auth/sessions.py): an API token
    exchanged for a random cookie, kept as its SHA-256, until it expires, is signed out, or
    its token is revoked. ``csrf``: the session's form token (the pages' POST forms)."""

    __tablename__ = "web_sessions"
    id: Mapped[int] = mapped_column(primary_key=True)
    session_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id", ondelete="CASCADE"))
    csrf: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


class InferenceHour(Hourly, Money, Base):
    """What one pod served of one model in one hour, and its cost (costsvc/inference/split.py):
    the tokens and requests counted for the model by the pod's role, the measured prefill
    and decode time (micro-seconds; NULL: no such histogram), the split rule and the
    output:input weight in force (millionths), and the pod's chargeback of the hour
    (allocated, used, waste, the idle spread onto it, GPU-hours) with its split into input
    and output on the allocation basis (allocated + idle) and the usage basis (used).
    Replaced with the hour by each ingest and reprice; a pod with no token series has no
    row (its cost is in the chargeback, not here)."""

    __tablename__ = "inference_hours"
    __table_args__ = (
        UniqueConstraint("hour", "cluster", "namespace", "pod", "model", "engine"),
        Index("ix_inference_hours_team_hour", "team", "hour"),
        Index("ix_inference_hours_hour", "hour"),
    )
    namespace: Mapped[str] = mapped_column(String(253))
    pod: Mapped[str] = mapped_column(String(253))
    model: Mapped[str] = mapped_column(String(253))  # the served model name (model_name)
    engine: Mapped[str] = mapped_column(String(16))  # vllm | sglang
    role: Mapped[str] = mapped_column(String(64))  # llm-d.ai/role, SGLang engine_type, or ""
    team: Mapped[str] = mapped_column(String(253))
    project: Mapped[str] = mapped_column(String(253))
    stage: Mapped[str] = mapped_column(String(253))
    currency: Mapped[str] = mapped_column(String(3))
    input_tokens: Mapped[int] = mapped_column(BigInteger)
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    requests: Mapped[int] = mapped_column(BigInteger)
    prefill_us: Mapped[int | None] = mapped_column(BigInteger)
    decode_us: Mapped[int | None] = mapped_column(BigInteger)
    rule: Mapped[str] = mapped_column(String(8))  # role | time | weight
    weight_ppm: Mapped[int] = mapped_column(BigInteger)
    # then the pod's chargeback of the hour (Money), and its split
    input_cost: Mapped[int] = mapped_column(BigInteger, sort_order=AFTER)
    output_cost: Mapped[int] = mapped_column(BigInteger, sort_order=AFTER)
    input_used: Mapped[int] = mapped_column(BigInteger, sort_order=AFTER)
    output_used: Mapped[int] = mapped_column(BigInteger, sort_order=AFTER)


class QueueHourRow(Hourly, QuotaSeconds, QueueMoney, QueueBilled, Base):
    """A Kueue ClusterQueue's flavor and resource in an hour, and its money (docs/queues.md)."""

    __tablename__ = "queue_hours"
    __table_args__ = (
        UniqueConstraint(*QUEUE_HOUR_KEY),
        Index("ix_queue_hours_team_hour", "team", "hour"),
        Index("ix_queue_hours_hour", "hour"),
    )
