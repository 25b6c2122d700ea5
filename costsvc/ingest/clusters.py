"""Several clusters from one query API, by several replicas: each (cluster, hour) once.

A replica configured with clusters (``COSTSVC_CLUSTERS``) ingests each of them on its own:
every query it sends for cluster ``c`` carries the matcher ``cluster="c"`` (for the configured
default cluster, ``cluster=~"|c"``: series without the label belong to it), so it reads that
cluster's series only. Before collecting a cluster's hours it claims the cluster
(costsvc/db/runs.py :func:`~costsvc.db.runs.claim_cluster`); a cluster another replica holds is
skipped and tried once more at the end of the pass. The hours are chosen only once the claim
is held — after the watermark (what another replica did before is not done again), or, for a
backfill range, less the hours a run started since this one began has done — so two replicas
never collect the same (cluster, hour). A replica that dies loses its claims with its process
or database session; the hours it did not store stay pending for the next run.

``["*"]``: every cluster with GPU series in the window (:func:`discover`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine

from costsvc.db import runs
from costsvc.ingest.hour import cluster_label
from costsvc.ingest.prom import Params, PrometheusReader
from costsvc.ingest.run import ingest
from costsvc.ingest.serial import Report
from costsvc.rules.cost_model import CostModel

log = logging.getLogger(__name__)
ALL = "*"
CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}")
# the series that say a cluster has GPUs: ours, and dcgm-exporter's
GPU_SERIES = ("gpu_device_up", "DCGM_FI_DEV_GPU_UTIL")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def matcher(cluster: str, default: str) -> str:
    """The label matcher of ``cluster``'s series (names are :data:`CLUSTER_NAME`s: no quote or
    backslash to escape; a dot is the only regex metacharacter they can hold)."""
    if not CLUSTER_NAME.fullmatch(cluster):
        raise ValueError(f"{cluster[:70]!r} is not a cluster name")
    if cluster == default:
        return f'cluster=~"|{cluster.replace(".", "[.]")}"'
    return f'cluster="{cluster}"'


def scope_query(query: str, match: str) -> str:
    """``query`` with ``match`` added to every vector selector: inside every ``{…}``, and as
    ``{match}`` after a metric name followed by a range (``name[1h]``) or standing alone as the
    whole query. Quoted strings are copied as they are."""
    if _IDENT.fullmatch(query.strip()):
        return f"{query.strip()}{{{match}}}"
    out: list[str] = []
    i, n = 0, len(query)
    while i < n:
        ch = query[i]
        if ch in "\"'`":
            end = i + 1
            while end < n and query[end] != ch:
                end += 2 if query[end] == "\\" and ch != "`" else 1
            out.append(query[i : end + 1])
            i = end + 1
        elif ch == "{":
            close = query.find("}", i)
            empty = close != -1 and not query[i + 1 : close].strip()
            out.append("{" + match + ("" if empty else ","))
            i += 1
        elif found := _IDENT.match(query, i):
            name, i = found.group(), found.end()
            out.append(name)
            if i < n and query[i] == "[":
                out.append(f"{{{match}}}")
        else:
            out.append(ch)
            i += 1
    return "".join(out)


class ClusterReader(PrometheusReader):
    """A query API client whose every query reads one cluster's series (:func:`scope_query`),
    and whose every answer is checked: a series of another cluster is dropped, never billed
    to this one (a query form the rewrite does not know reads more, never wrongly)."""

    def __init__(self, url: str, cluster: str, default: str, *args: Any, **options: Any) -> None:
        """``url`` and the options as :class:`PrometheusReader` takes them; ``cluster`` the
        one read, ``default`` the name of series without a cluster label."""
        super().__init__(url, *args, **options)
        self._spec_args.update(cluster=cluster, default=default)
        self.cluster, self._default = cluster, default
        self._match = matcher(cluster, default)

    def _ours(self, labels: Mapping[str, str]) -> bool:
        return cluster_label(labels, self._default) == self.cluster

    def _get(
        self, params: Params, what: str, post: bool = False, path: str = "/api/v1/query"
    ) -> Any:
        query = params.get("query")
        if isinstance(query, str):  # (not a label-values request)
            params = {**params, "query": scope_query(query, self._match)}
        body = super()._get(params, what, post, path)
        result = body.get("data", {}).get("result")
        if isinstance(result, list):
            body["data"]["result"] = [
                r for r in result if not isinstance(r, dict) or self._ours(r.get("metric", {}))
            ]
        return body


def discover(prom: PrometheusReader, start: datetime, end: datetime, default: str) -> list[str]:
    """Every cluster with GPU series in [start, end]: the values of the ``cluster`` label on
    them, and the default cluster when some have none. Read from the series index, not the
    samples (a month at 10,000 GPUs stays cheap): ``GET /api/v1/label/<name>/values`` with
    ``match[]``, ``start`` and ``end`` — the Prometheus HTTP API's "Querying label values",
    served alike by VictoriaMetrics, Thanos Query and Mimir."""
    found = set()
    for label in prom.label_values("cluster", GPU_SERIES, start, end):
        if CLUSTER_NAME.fullmatch(label):
            found.add(label)
        else:
            log.warning("cluster label %r is not a cluster name: ignored", label[:70])
    unlabelled = [f'{name}{{cluster=""}}' for name in GPU_SERIES]
    if prom.label_values("__name__", unlabelled, start, end):
        found.add(default)
    return sorted(found)


@dataclass
class FleetReport:
    """What one replica did: per cluster it claimed, its report; the clusters it left to
    other replicas (held by one both times it tried)."""

    done: dict[str, Report] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def ingest_clusters(
    engine: Engine,
    reader_for: Callable[[str], PrometheusReader],
    model: CostModel,
    clusters: list[str],
    hours_for: Callable[[str, datetime], list[datetime]],
    source: str = "auto",
    progress: Callable[[str, datetime, str | None], None] | None = None,
    on_skip: Callable[[str], None] | None = None,
    workers: int = 1,
) -> FleetReport:
    """Ingest each cluster this replica can claim. ``reader_for(cluster)``: that cluster's
    query client (closed here); ``hours_for(cluster, began)``: its hours, asked once its claim
    is held (``began``: when this call started, for :func:`~costsvc.db.runs.done_since`).
    ``on_skip(cluster)``: called when a cluster is found claimed by another replica.
    ``workers``: processes for a cluster's hours (costsvc/ingest/parallel.py), one cluster
    after another, its claim held by this process while they work."""
    began = datetime.now(UTC)
    out = FleetReport()
    waiting = list(clusters)
    for attempt in range(2):  # a pass, then one more try of the clusters that were held
        held = []
        for cluster in waiting:
            with runs.claim_cluster(engine, cluster) as claimed:
                if not claimed:
                    held.append(cluster)
                    if on_skip is not None:
                        on_skip(cluster)
                    continue
                hours = hours_for(cluster, began)
                if not hours:
                    continue
                reader = reader_for(cluster)
                try:
                    step = None if progress is None else _bind(progress, cluster)
                    out.done[cluster] = ingest(
                        engine, reader, model, cluster, hours, step, source, workers
                    )
                finally:
                    reader.close()
        waiting = held
        if not waiting:
            break
        log.info("clusters held by another replica%s: %s", " again" * attempt, waiting)
    out.skipped = waiting
    return out


def _bind(
    progress: Callable[[str, datetime, str | None], None], cluster: str
) -> Callable[[datetime, str | None], None]:
    return lambda hour, error: progress(cluster, hour, error)


def backfill_hours(
    engine: Engine, hours: list[datetime]
) -> Callable[[str, datetime], list[datetime]]:
    """A backfill range's hours for each cluster, less those another replica's run started
    since this one began has already done."""

    def hours_for(cluster: str, began: datetime) -> list[datetime]:
        done = runs.done_since(engine, cluster, began)
        return [h for h in hours if h not in done]

    return hours_for
