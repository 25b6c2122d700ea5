"""Raw samples from Prometheus's HTTP API (range selectors, not query_range: PromQL's look-back
would paper over scrape gaps, which must not be billed)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

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
        try:
            resp = self._client.get(
                "/api/v1/query",
                params={"query": f"{selector}[{seconds}s]", "time": f"{at.timestamp():.3f}"},
            )
        except httpx.HTTPError as exc:
            raise PrometheusError(f"{selector}: {exc}") from None
        if resp.status_code != 200:
            raise PrometheusError(f"{selector}: HTTP {resp.status_code}: {resp.text[:200]}")
        body = resp.json()
        if body.get("status") != "success":
            raise PrometheusError(f"{selector}: {body.get('error', body)}")
        return [
            Series(dict(r["metric"]), [(Decimal(str(t)), Decimal(v)) for t, v in r["values"]])
            for r in body["data"]["result"]
        ]

    def close(self) -> None:
        self._client.close()
