"""Raw samples from Prometheus's HTTP API (range selectors, not query_range: PromQL's look-back
would paper over scrape gaps, which must not be billed)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import httpx

from costsvc.ingest.integrate import Sample


class PrometheusError(RuntimeError):
    """Prometheus could not answer; the hour is left for a later retry."""


@dataclass(frozen=True, slots=True)
class Series:
    labels: dict[str, str]
    samples: list[Sample]


class PrometheusReader:
    def __init__(self, url: str, timeout: float = 60.0) -> None:
        self._client = httpx.Client(base_url=url.rstrip("/"), timeout=timeout)

    def raw(self, selector: str, at: datetime, seconds: int) -> list[Series]:
        """Every sample of ``selector`` in (at - seconds, at]."""
        params = {"query": f"{selector}[{seconds}s]", "time": f"{at.timestamp():.3f}"}
        body = self._get(params, selector)
        return [
            Series(dict(r["metric"]), [(Decimal(str(t)), Decimal(v)) for t, v in r["values"]])
            for r in body["data"]["result"]
        ]

    def latest(self, selector: str, at: datetime, seconds: int) -> list[dict[str, str]]:
        """The label sets of ``selector`` that had a sample in (at - seconds, at] (one answer
        per series, via last_over_time: for label and info series)."""
        body = self._get({"query": f"last_over_time({selector}[{seconds}s])",
                          "time": f"{at.timestamp():.3f}"}, selector)  # fmt: skip
        return [dict(r["metric"]) for r in body["data"]["result"]]

    def _get(self, params: dict[str, str], what: str) -> Any:
        try:
            resp = self._client.get("/api/v1/query", params=params)
        except httpx.HTTPError as exc:
            raise PrometheusError(f"{what}: {exc}") from None
        if resp.status_code != 200:
            raise PrometheusError(f"{what}: HTTP {resp.status_code}: {resp.text[:200]}")
        body = resp.json()
        if body.get("status") != "success":
            raise PrometheusError(f"{what}: {body.get('error', body)}")
        return body

    def close(self) -> None:
        self._client.close()
