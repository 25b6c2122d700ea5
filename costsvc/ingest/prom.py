"""Raw samples from Prometheus's HTTP API (range selectors, not query_range: PromQL's look-back
would paper over scrape gaps, which must not be billed)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import httpx

from costsvc.ingest.gauges.sampled import Sample

# a request's parameters; a list value is sent as a repeated parameter (``match[]``)
Params = Mapping[str, str | list[str]]


def instant_text(at: datetime) -> str:
    """An evaluation time as every query writes it (seconds, millisecond resolution: the
    hour's last instant, ``…:59:59.999999``, is evaluated at the next hour's first)."""
    return f"{at.timestamp():.3f}"


class PrometheusError(RuntimeError):
    """Prometheus could not answer; the hour is left for a later retry."""


LABEL_TEXTS = 1_000_000  # label texts kept shared at most (then dropped, and kept again)


@dataclass(frozen=True, slots=True)
class Series:
    labels: dict[str, str]
    samples: Sequence[Sample]  # a list, or a steady series' (costsvc/ingest/gauges/steady.py)


@dataclass(frozen=True)
class ReaderSpec:
    """How to build a reader again in another process (costsvc/ingest/parallel.py): its
    class and the arguments it was made with (picklable; a spawned worker rebuilds it)."""

    kind: type[PrometheusReader]
    args: dict[str, Any] = field(default_factory=dict)


class PrometheusReader:
    """One Prometheus-compatible query API: Prometheus, VictoriaMetrics, Thanos Query, Mimir.

    ``headers`` go with every request (a tenant's ``X-Scope-OrgID`` for Mimir, an
    ``Authorization`` bearer token); ``params`` are added to every query (Thanos Query's
    ``partial_response=false`` and ``max_source_resolution=0s``: docs/multicluster.md).
    ``raw_only``: the gauges' series read sample by sample, never from the engine's
    summaries (costsvc/ingest/gauges/steady.py) — not a setting: the tests and benches that
    check the summaries against the samples they stand for use it.
    ``compress``: ask for gzipped answers (a query API across a slow link); by default they
    come uncompressed.
    """

    def __init__(
        self,
        url: str,
        timeout: float = 60.0,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        compress: bool = False,
        raw_only: bool = False,
    ) -> None:
        self.raw_only = raw_only
        self._spec_args: dict[str, Any] = {
            "url": url,
            "timeout": timeout,
            "headers": dict(headers or {}),
            "params": dict(params or {}),
            "compress": compress,
            "raw_only": raw_only,
        }
        sent = dict(headers or {})
        if not compress and not any(k.lower() == "accept-encoding" for k in sent):
            # answers uncompressed: gzip costs the engine and this process CPU for every
            # answer (a re-ingest's are megabytes: 5 % of a backfill's time here) to save
            # bandwidth that a query API beside the service does not need
            sent["Accept-Encoding"] = "identity"
        # label values' texts, one string each across answers (a holding's UUID, pod and node
        # in each of its families: an hour of 10,000 GPUs holds ~300,000 label sets at once)
        self._label_texts: dict[str, str] = {}
        self._client = httpx.Client(base_url=url.rstrip("/"), timeout=timeout, headers=sent)
        self._params = dict(params or {})

    def spec(self) -> ReaderSpec:
        """What :meth:`from_spec` needs to make a reader like this one (same class, URL,
        timeout, headers, parameters, raw_only), in a process of its own."""
        return ReaderSpec(type(self), dict(self._spec_args))

    @staticmethod
    def from_spec(spec: ReaderSpec) -> PrometheusReader:
        return spec.kind(**spec.args)

    def raw(self, selector: str, at: datetime, seconds: int) -> list[Series]:
        """Every sample of ``selector`` in (at - seconds, at], less those that are no reading.

        A NaN or infinite value is no reading: VictoriaMetrics returns Prometheus staleness
        markers (a NaN) in range-selector answers where Prometheus drops them
        (VictoriaMetrics/VictoriaMetrics#5806, #7275), and an exporter may expose NaN. Dropped,
        the series ends at its last real sample as it does in Prometheus; a series left with no
        sample is not returned at all, as Prometheus would not return it."""
        params = {"query": f"{selector}[{seconds}s]", "time": instant_text(at)}
        body = self._get(params, selector[:80], post=len(selector) > 1000)
        # a target's series share their scrape times, and values repeat: convert each once
        times: dict[float, Decimal] = {}
        values: dict[str, Decimal] = {}
        no_reading: set[str] = set()  # the texts of the values that are NaN or infinite

        def time_of(t: float) -> Decimal:
            dt = times[t] = Decimal(str(t))
            return dt

        def value_of(v: str) -> Decimal:
            dv = values[v] = Decimal(v)
            if not dv.is_finite():
                no_reading.add(v)
            return dv

        out = []
        for r in body["data"]["result"]:
            pairs = r["values"]
            samples = [
                (times[t] if t in times else time_of(t), values[v] if v in values else value_of(v))
                for t, v in pairs
            ]
            # (checked against the few value texts seen as NaN or infinite, not per sample)
            if no_reading and any(v in no_reading for _, v in pairs):
                samples = [(t, v) for t, v in samples if v.is_finite()]
            if samples:
                out.append(Series(dict(r["metric"]), samples))
        return out

    def range_values(
        self, expr: str, first: datetime, last: datetime, step: int
    ) -> list[tuple[dict[str, str], list[tuple[str, str]]]]:
        """A range query (``query_range``, POST) evaluated at ``first``, ``first + step``, ...
        ``last``: each series' labels and its (evaluation instant as :func:`instant_text`
        writes it, value text as the API wrote it; NaN and infinities included). For per-hour
        summaries of many hours in one answer (costsvc/ingest/gauges/steady.py)."""
        params = {
            "query": expr,
            "start": instant_text(first),
            "end": instant_text(last),
            "step": str(step),
        }
        body = self._get(params, expr[:80], post=True, path="/api/v1/query_range")
        texts: dict[float, str] = {}  # every series has the same few evaluation instants

        def text(t: float) -> str:
            found = texts[t] = f"{float(t):.3f}"
            return found

        shared = self._label_texts
        if len(shared) > LABEL_TEXTS:
            shared.clear()
        keep = shared.setdefault
        out = []
        for r in body["data"]["result"]:
            labels = r["metric"]  # (the answer's own dict, its values made shared texts)
            values = list(labels.values())
            labels.update(zip(list(labels), map(keep, values, values), strict=True))
            out.append((labels, [(texts[t] if t in texts else text(t), v) for t, v in r["values"]]))
        return out

    def instant(self, expr: str, at: datetime) -> list[tuple[dict[str, str], Decimal]]:
        """Each series of an instant query's answer and its value (NaN/infinite left out)."""
        body = self._get({"query": expr, "time": instant_text(at)}, expr[:80])
        out = []
        for r in body["data"]["result"]:
            value = Decimal(r["value"][1])
            if value.is_finite():
                out.append((dict(r["metric"]), value))
        return out

    def latest(self, selector: str, at: datetime, seconds: int) -> list[dict[str, str]]:
        """The label sets of ``selector`` that had a sample in (at - seconds, at] (one answer
        per series, via last_over_time: for label and info series)."""
        body = self._get(
            {"query": f"last_over_time({selector}[{seconds}s])", "time": instant_text(at)},
            selector,
        )
        return [dict(r["metric"]) for r in body["data"]["result"]]

    def vector(self, query: str, at: datetime) -> list[tuple[dict[str, str], Decimal]]:
        """:meth:`instant`, for reads that aggregate in PromQL (rightsizing, quotas); never
        for money."""
        return self.instant(query, at)

    def label_values(
        self, label: str, match: Sequence[str], start: datetime, end: datetime
    ) -> list[str]:
        """The values of ``label`` on the series of the ``match[]`` selectors in [start, end],
        from the series index (``GET /api/v1/label/<name>/values``: the Prometheus HTTP API's
        "Querying label values", served alike by VictoriaMetrics, Thanos Query and Mimir)."""
        params: Params = {
            "match[]": list(match),
            "start": f"{start.timestamp():.3f}",
            "end": f"{end.timestamp():.3f}",
        }
        body = self._get(params, f"{label} values", path=f"/api/v1/label/{label}/values")
        return [str(v) for v in body.get("data") or []]

    def _get(
        self, params: Params, what: str, post: bool = False, path: str = "/api/v1/query"
    ) -> Any:
        # the answer read as a stream: a response keeps what it read, and it is in a reference
        # cycle with its stream, which the ingest's paused collector does not free for hours
        if post:  # long selectors (a regex of many pods) go in a form body, not the URL
            asked = self._client.stream("POST", path, data={**self._params, **params})
        else:
            asked = self._client.stream("GET", path, params={**self._params, **params})
        try:
            with asked as resp:
                if resp.status_code != 200:
                    text = b"".join(resp.iter_bytes())[:200].decode("utf-8", "replace")
                    raise PrometheusError(f"{what}: HTTP {resp.status_code}: {text}")
                content = b"".join(resp.iter_bytes())
        except httpx.HTTPError as exc:
            raise PrometheusError(f"{what}: {exc}") from None
        try:
            body = json.loads(content)
        except ValueError as exc:
            raise PrometheusError(f"{what}: not JSON: {exc}") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error", body) if isinstance(body, dict) else body
            raise PrometheusError(f"{what}: {str(error)[:200]}")
        if body.get("warnings"):
            # Thanos Query (partial_response=true) and federated engines answer what they could
            # reach with warnings: an incomplete answer is never billed; the hour is retried
            raise PrometheusError(f"{what}: incomplete answer: {'; '.join(body['warnings'])[:200]}")
        return body

    def close(self) -> None:
        self._client.close()
