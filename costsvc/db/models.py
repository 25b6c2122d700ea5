"""Tables. Money is integer micro-units of the billing currency (BigInteger), never floats;
durations are integer micro-seconds. Constraint names come from one naming convention so they
are the same on SQLite and PostgreSQL. The schema is Alembic's to create (never create_all)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    ForeignKey,
    Index,
    MetaData,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",  # short: PostgreSQL cuts names at 63
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class CostModelVersion(Base):
    """Every cost-model document that priced something, by content hash; each ingest run
    names the one it used, so every hour's money can be traced to its prices and policies."""

    __tablename__ = "cost_model_versions"
    id: Mapped[int] = mapped_column(primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    document: Mapped[dict[str, Any]] = mapped_column(JSON)
    loaded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class PodLabels(Base):
    """A pod's labels over time: one row per distinct label set, valid [valid_from, valid_to)."""

    __tablename__ = "pod_labels"
    __table_args__ = (
        UniqueConstraint("cluster", "uid", "valid_from"),
        Index("ix_pod_labels_lookup", "cluster", "namespace", "name", "valid_from"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    cluster: Mapped[str] = mapped_column(String(253))
    uid: Mapped[str] = mapped_column(String(64))
    namespace: Mapped[str] = mapped_column(String(253))
    name: Mapped[str] = mapped_column(String(253))
    labels: Mapped[dict[str, str]] = mapped_column(JSON)
    valid_from: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    valid_to: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class NamespaceLabels(Base):
    __tablename__ = "namespace_labels"
    __table_args__ = (UniqueConstraint("cluster", "name", "valid_from"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    cluster: Mapped[str] = mapped_column(String(253))
    name: Mapped[str] = mapped_column(String(253))
    labels: Mapped[dict[str, str]] = mapped_column(JSON)
    valid_from: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    valid_to: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


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


class Watermark(Base):
    """The last complete hour ingested, per cluster: ingestion resumes after it."""

    __tablename__ = "watermarks"
    cluster: Mapped[str] = mapped_column(String(253), primary_key=True)
    hour: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class GpuPresence(Base):
    """A physical GPU during one hour."""

    __tablename__ = "gpu_hours"
    __table_args__ = (UniqueConstraint("hour", "cluster", "gpu_uuid"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    hour: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    cluster: Mapped[str] = mapped_column(String(253))
    node: Mapped[str] = mapped_column(String(253))
    gpu_uuid: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(128))
    node_pool: Mapped[str | None] = mapped_column(String(253))
    present_us: Mapped[int] = mapped_column(BigInteger)
    price: Mapped[int] = mapped_column(BigInteger)  # micro-units per GPU-hour, as priced
    cost: Mapped[int] = mapped_column(BigInteger)  # micro-units: price x time present


class UsageFact(Base):
    """A container's hold on one device unit (GPU, or MIG instance gi_id >= 0) in one hour."""

    __tablename__ = "usage_facts"
    __table_args__ = (
        UniqueConstraint("hour", "cluster", "gpu_uuid", "gi_id", "namespace", "pod", "container"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    hour: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    cluster: Mapped[str] = mapped_column(String(253))
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


class Chargeback(Base):
    """Money per hour and owner, in micro-units of ``currency``."""

    __tablename__ = "chargeback"
    __table_args__ = (
        UniqueConstraint("hour", "cluster", "team", "project", "stage", "namespace", "pod"),
        Index("ix_chargeback_team_hour", "team", "hour"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    hour: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    cluster: Mapped[str] = mapped_column(String(253))
    team: Mapped[str] = mapped_column(String(253))
    project: Mapped[str] = mapped_column(String(253))
    stage: Mapped[str] = mapped_column(String(253))
    namespace: Mapped[str] = mapped_column(String(253))
    pod: Mapped[str] = mapped_column(String(253))
    currency: Mapped[str] = mapped_column(String(3))
    allocated: Mapped[int] = mapped_column(BigInteger)
    used: Mapped[int] = mapped_column(BigInteger)
    waste: Mapped[int] = mapped_column(BigInteger)
    idle: Mapped[int] = mapped_column(BigInteger)
    gpu_hours: Mapped[int] = mapped_column(BigInteger)  # micro GPU-hours
