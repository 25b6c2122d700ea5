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
        """Every sample of ``selector`` in (at - seconds, at], less those that are no reading.

        A NaN or infinite value is no reading: VictoriaMetrics returns Prometheus staleness
        markers (a NaN) in range-selector answers where Prometheus drops them
        (VictoriaMetrics/VictoriaMetrics#5806, #7275), and an exporter may expose NaN. Dropped,
        the series ends at its last real sample as it does in Prometheus; a series left with no
        sample is not returned at all, as Prometheus would not return it."""
        params = {"query": f"{selector}[{seconds}s]", "time": f"{at.timestamp():.3f}"}
        body = self._get(params, selector)
        # a target's series share their scrape times, and values repeat: convert each once
        times: dict[float, Decimal] = {}
        values: dict[str, Decimal] = {}
        out = []
        for r in body["data"]["result"]:
            samples = []
            for t, v in r["values"]:
                dt = times.get(t)
                if dt is None:
                    dt = times[t] = Decimal(str(t))
                dv = values.get(v)
                if dv is None:
                    dv = values[v] = Decimal(v)
                if dv.is_finite():
                    samples.append((dt, dv))
            if samples:
                out.append(Series(dict(r["metric"]), samples))
        return out

    def latest(self, selector: str, at: datetime, seconds: int) -> list[dict[str, str]]:
        """The label sets of ``selector`` that had a sample in (at - seconds, at] (one answer
        per series, via last_over_time: for label and info series)."""
        body = self._get(
            {"query": f"last_over_time({selector}[{seconds}s])", "time": f"{at.timestamp():.3f}"},
            selector,
        )
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
