"""gpu-costsvc settings: one pydantic-settings class, every field a ``COSTSVC_*`` variable."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

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
    source: Literal["auto", "gpu-exporter", "dcgm-exporter"] = Field(
        default="auto",
        description="whose series to read: our exporter's, NVIDIA dcgm-exporter's plus "
        "kube-state-metrics', or (auto) ours in an hour that has them, else dcgm-exporter's",
    )
    listen_address: str = Field(
        default="0.0.0.0:8080",
        pattern=r"^(\[[0-9a-fA-F:]+\]|[^:]*):\d{1,5}$",
        description="host:port of the HTTP API (serve)",
    )
    kubeconfig: Path | None = None  # the label watcher of `serve`: a kubeconfig file,
    kube_api_url: str | None = None  # or an API URL without credentials (kubectl proxy);
    # in a pod, the in-cluster configuration is used when neither is set

    @field_validator("database_url")
    @classmethod
    def _known_backend(cls, url: str) -> str:
        if not url.startswith(("sqlite", "postgresql")):
            raise ValueError("use a sqlite:// or postgresql+psycopg:// URL")
        return url
