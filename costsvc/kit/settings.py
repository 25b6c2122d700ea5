"""gpu-costsvc settings: one pydantic-settings class, every field a ``COSTSVC_*`` variable."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")  # RFC 9110 token
_CLUSTER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}")  # costsvc/ingest/clusters.py
_HEADER_VALUE = re.compile(r"[\x20-\x7e\t]{0,4096}")  # visible ASCII: no CR, LF or NUL


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="COSTSVC_", extra="forbid")

    database_url: str = Field(
        default="sqlite:///gpu-costsvc.db",
        description="SQLAlchemy URL: sqlite:///file.db, or postgresql+psycopg://… in production",
    )
    prometheus_url: str = Field(
        default="http://localhost:9090",
        pattern=r"^https?://[^\s]+$",
        description="base URL of a Prometheus-compatible query API (Prometheus, VictoriaMetrics "
        "…/select/<tenant>/prometheus, Thanos Query, Mimir …/prometheus): docs/multicluster.md",
    )
    prometheus_headers: dict[str, str] = Field(
        default_factory=dict,
        description='JSON object of headers sent with every query, e.g. {"X-Scope-OrgID": "gpu"}',
    )
    prometheus_params: dict[str, str] = Field(
        default_factory=dict,
        description="JSON object of parameters added to every query, e.g. Thanos Query's "
        '{"partial_response": "false", "max_source_resolution": "0s"}',
    )
    prometheus_compression: bool = Field(
        default=False,
        description="ask the query API for gzipped answers: for one across a slow link; by "
        "default answers come uncompressed (gzip costs the engine and the service CPU on "
        "every answer: 5 % of a backfill's time beside the engine)",
    )
    prometheus_bearer_token_file: Path | None = Field(
        default=None,
        description="a file holding a bearer token for the query API (read at start-up)",
    )
    cost_model: Path | None = None
    cluster: str = "default"
    clusters: list[str] = Field(
        default_factory=list,
        description='JSON list of the clusters this replica ingests, e.g. ["east", "west"], '
        'each read with a cluster="name" matcher and claimed for its run so that several '
        'replicas ingest each (cluster, hour) once; ["*"]: every cluster with GPU series in '
        "the hours ingested; empty (default): every series as one ingest of COSTSVC_CLUSTER "
        "(costsvc/ingest/clusters.py, docs/multicluster.md)",
    )
    source: Literal["auto", "gpu-exporter", "dcgm-exporter"] = Field(
        default="auto",
        description="whose series to read: our exporter's, NVIDIA dcgm-exporter's plus "
        "kube-state-metrics', or (auto) ours in an hour that has them, else dcgm-exporter's",
    )
    # gone: how an hour is read is the data's to decide, per GPU and hour (docs/cost-model.md,
    # "Two rules, one per source"); a deployment that still sets it fails at start-up, told why
    ingest_reads: str | None = Field(
        default=None,
        description="removed: each GPU's hour is read from our exporter's integrals where it "
        "publishes them, else from the gauges (docs/cost-model.md); unset it",
    )
    ingest_workers: int = Field(
        default=1,
        ge=1,
        description="processes that ingest the hours of a multi-hour ingest (a backfill, a "
        "catch-up) in parallel, each a contiguous chunk of them; PostgreSQL only: on SQLite "
        "(one writer) hours are ingested one after another (costsvc/ingest/parallel.py)",
    )
    listen_address: str = Field(
        default="0.0.0.0:8080",
        pattern=r"^(\[[0-9a-fA-F:]+\]|[^:]*):\d{1,5}$",
        description="host:port of the HTTP API (serve)",
    )
    kubeconfig: Path | None = None  # the label watcher of `serve`: a kubeconfig file,
    kube_api_url: str | None = None  # or an API URL without credentials (kubectl proxy);
    # in a pod, the in-cluster configuration is used when neither is set
    # Kueue's LocalQueues watched too (their ClusterQueue over time, docs/queues.md): the
    # kueue.x-k8s.io version the cluster serves; unset: not watched
    kueue_api_version: Literal["v1beta1", "v1beta2"] | None = None

    @field_validator("prometheus_headers")
    @classmethod
    def _plain_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"{name[:40]!r} is not an HTTP header name")
            if not _HEADER_VALUE.fullmatch(value):
                raise ValueError(f"header {name}: control characters are not allowed")
        return headers

    @field_validator("clusters")
    @classmethod
    def _cluster_names(cls, clusters: list[str]) -> list[str]:
        if clusters == ["*"]:
            return clusters
        for name in clusters:
            if not _CLUSTER.fullmatch(name):
                raise ValueError(
                    f'{name[:70]!r}: not a cluster name (letters, digits, _ . : -), or ["*"]'
                )
        return sorted(set(clusters))

    @field_validator("prometheus_params")
    @classmethod
    def _own_params_kept(cls, params: dict[str, str]) -> dict[str, str]:
        taken = {"query", "time"} & params.keys()
        if taken:
            raise ValueError(f"{', '.join(sorted(taken))}: set by the cost service itself")
        return params

    def prometheus_request_headers(self) -> dict[str, str]:
        """The headers of every query: the configured ones and the bearer token from its file
        (OSError and ValueError name the problem; the caller names the setting)."""
        headers = dict(self.prometheus_headers)
        if self.prometheus_bearer_token_file is not None:
            token = self.prometheus_bearer_token_file.read_text().strip()
            if not token or not _HEADER_VALUE.fullmatch(token):
                raise ValueError("the file holds no usable token")
            headers["Authorization"] = f"Bearer {token}"
        return headers

    # the API's limits and exposure (docs/security.md)
    metrics_public: bool = Field(
        default=False,
        description="serve the fleet-level /metrics families without a token; nothing per "
        "team is ever public",
    )
    answer_cache_bytes: int = Field(
        default=64 * 2**20, ge=0, description="the answer cache's size in bytes (per process)"
    )
    answer_cache_max_answer_bytes: int = Field(
        default=2**20, ge=0, description="answers larger than this are not cached"
    )
    max_body_bytes: int = Field(
        default=2**20, ge=1024, description="request bodies larger than this are refused (413)"
    )
    header_timeout_seconds: float = Field(
        default=10.0, gt=0, description="a request's line and headers must arrive within this"
    )
    body_timeout_seconds: float = Field(
        default=30.0, gt=0, description="a request's body must arrive within this (408)"
    )
    send_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="a client that reads nothing of an answer for this long while more of it "
        "waits is disconnected (costsvc/api/server.py)",
    )
    shutdown_timeout_seconds: float = Field(
        default=3.0,
        gt=0,
        le=3600,
        description="on SIGTERM, answers in progress get this long to finish; then their "
        "connections are closed",
    )
    exports_per_token: int = Field(
        default=2,
        ge=1,
        le=1000,
        description="CSV exports one token may have in progress at once, per process (429)",
    )
    exports_max: int = Field(
        default=8,
        ge=1,
        le=1000,
        description="CSV exports in progress at once, per process, all tokens together (429)",
    )
    export_memory_bytes: int = Field(
        default=4 * 2**20,
        ge=0,
        le=2**30,
        description="an export is spooled in memory up to this size, then in a temporary file",
    )
    export_max_bytes: int = Field(
        default=4 * 2**30,
        ge=1024,
        le=2**40,
        description="an export larger than this is refused (507): the most disk one export's "
        "spool may take",
    )

    # the pages' sign-in sessions (costsvc/pages/session.py, docs/security.md)
    session_hours: int = Field(
        default=8, ge=1, le=24 * 30, description="a pages session ends this long after sign-in"
    )
    sessions_per_token: int = Field(
        default=20,
        ge=1,
        le=10_000,
        description="live pages sessions one token may have; a sign-in beyond it ends the "
        "token's oldest session",
    )
    signin_per_client_per_minute: int = Field(
        default=20,
        ge=1,
        le=10_000,
        description="sign-in attempts one client address may make in any minute, per process "
        "(429 with Retry-After beyond it)",
    )
    signin_per_token_per_minute: int = Field(
        default=10,
        ge=1,
        le=10_000,
        description="sign-in attempts with one token in any minute, per process (429 with "
        "Retry-After beyond it)",
    )
    session_cookie_secure: bool | None = Field(
        default=None,
        description="mark the session cookie Secure; unset: when the request came over HTTPS "
        "(set true behind a proxy that ends TLS)",
    )

    @field_validator("ingest_reads")
    @classmethod
    def _gone(cls, value: str | None) -> None:
        if value is not None:
            raise ValueError(
                "removed: each GPU's hour is now read from our exporter's integrals where it "
                "publishes them, else from the gauges, whatever this says (docs/cost-model.md, "
                '"Two rules, one per source"); unset it'
            )

    @field_validator("database_url")
    @classmethod
    def _known_backend(cls, url: str) -> str:
        if not url.startswith(("sqlite", "postgresql")):
            raise ValueError("use a sqlite:// or postgresql+psycopg:// URL")
        return url
