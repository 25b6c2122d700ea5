"""gpu-costsvc settings: one pydantic-settings class, every field a ``COSTSVC_*`` variable."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="COSTSVC_", extra="forbid")

    database_url: str = Field(
        default="sqlite:///gpu-costsvc.db",
        description="SQLAlchemy URL: sqlite:///file.db, or postgresql+psycopg://… in production",
    )
    prometheus_url: str = "http://localhost:9090"
    cost_model: Path | None = None
    cluster: str = "default"
    listen_address: str = Field(
        default="0.0.0.0:8080",
        pattern=r"^(\[[0-9a-fA-F:]+\]|[^:]*):\d{1,5}$",
        description="host:port of the HTTP API (serve)",
    )
    kubeconfig: Path | None = None  # the label watcher of `serve`: a kubeconfig file,
    kube_api_url: str | None = None  # or an API URL without credentials (kubectl proxy);
    # in a pod, the in-cluster configuration is used when neither is set

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

    @field_validator("database_url")
    @classmethod
    def _known_backend(cls, url: str) -> str:
        if not url.startswith(("sqlite", "postgresql")):
            raise ValueError("use a sqlite:// or postgresql+psycopg:// URL")
        return url
