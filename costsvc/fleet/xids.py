"""The last XID of each lost GPU (costsvc/fleet/health.py), read when the fleet page is made from
the configured Prometheus-compatible query API: the service stores no XID. One instant query
(``GET /api/v1/query``, costsvc/fleet/query_api.py: the ingest's headers and parameters, 2 s,
1 MiB) at the end of the page's range or now, whichever is earlier, over the whole range, of
``DCGM_FI_DEV_XID_ERRORS`` restricted to the lost GPUs' UUIDs (at most :data:`MAX_GPUS`, the
most recently lost first). Any failure is a one-line reason, never raised. No SQL.

The series, as dcgm-exporter 4.x writes it (NVIDIA/dcgm-exporter
internal/pkg/collector/gpu_collector.go ``toMetric``: for ``DCGM_FI_DEV_XID_ERRORS`` the
attributes ``err_code`` = the value, ``err_msg`` = its text from xid_errors.go, "Unknown Error"
past it) and as our exporter does (exporter/catalogue.py ``XID_LAST``,
exporter/render/label_text.py ``xid_labels``; docs/metrics.md): a gauge, the last XID code
(0 until one is seen), labelled ``UUID``, ``gpu``, ``Hostname``, ``err_code``, ``err_msg``,
and ``cluster`` where the store adds it (docs/multicluster.md; none: ``COSTSVC_CLUSTER``). The
code is in the labels, so each new code is a new series and the old one ends: the GPU's last
XID is the value of its series seen last. The query returns, for every series, its last value
(``last_over_time``) and when it was last seen (the newest sample timestamp of a
:data:`STEP_S` subquery: within :data:`STEP_S` of its last sample), told apart by the label
:data:`PART`."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from costsvc.fleet.health import LostGpu
from costsvc.fleet.query_api import Unreadable, read, source, text
from costsvc.ingest.prom import instant_text
from costsvc.kit.settings import Settings

SERIES = "DCGM_FI_DEV_XID_ERRORS"
MAX_GPUS = 60  # lost GPUs asked about at most (the query's text stays under ~8 KB)
STEP_S = 300  # the subquery's step: a series' last-seen time is within this (s)
MESSAGE_CHARS = 80  # an err_msg is cut to this
PART = "costsvc_xid_part"  # "code": the last value; "seen": when the series was last seen
# a UUID as matched in the query (letters, digits, _ . : -); any other is not asked about
_UUID = re.compile(r"[A-Za-z0-9_.:-]{1,100}")


class NotXids(Unreadable):
    """Why an answer is not the instant query's vector (one line)."""


@dataclass(frozen=True)
class Xid:
    code: int  # the last XID code; 0: none since the exporter started
    message: str  # its err_msg label, cut ("" where the series has none)


@dataclass
class Xids:
    """The last XID of each lost GPU asked about, by (cluster, UUID), or ``trouble``: why
    none could be read."""

    source: str  # the API read, without credentials or parameters
    by_gpu: dict[tuple[str, str], Xid] = field(default_factory=dict)
    asked: int = 0  # lost GPUs asked about
    not_asked: int = 0  # lost GPUs not asked about (past MAX_GPUS, or an unusual UUID)
    trouble: str | None = None

    def of(self, cluster: str, uuid: str) -> Xid | None:
        return self.by_gpu.get((cluster, uuid))


def query(uuids: Iterable[str], seconds: int) -> str:
    """The PromQL of the last XID code and last-seen time of every series of ``uuids`` (each a
    :data:`_UUID`: only ``.`` needs escaping in the regex) over the last ``seconds``."""
    regex = "|".join(u.replace(".", "\\\\.") for u in uuids)
    sel = f'{SERIES}{{UUID=~"{regex}"}}'
    return (
        f'label_replace(last_over_time({sel}[{seconds}s]), "{PART}", "code", "", "")'
        f" or label_replace(max_over_time(timestamp({sel})[{seconds}s:{STEP_S}s]),"
        f' "{PART}", "seen", "", "")'
    )


def _number(value: Any) -> float:
    """The number of a vector element's ``value`` (``[time, "text"]``)."""
    if not isinstance(value, list) or len(value) != 2 or not isinstance(value[1], str):
        raise NotXids("a sample that is not [time, value]")
    try:
        return float(value[1])
    except ValueError:
        raise NotXids("a sample value that is not a number") from None


def parse(data: Any, cluster: str, wanted: set[str]) -> dict[tuple[str, str], Xid]:
    """The last XID of each GPU of ``wanted`` in an answer's ``data`` (a vector of
    :func:`query`), keyed by (its ``cluster`` label, or ``cluster`` where it has none; UUID):
    the value of its series seen last (of two seen at the same time, a non-zero code);
    :class:`NotXids` when it is not that JSON. The form:
    https://prometheus.io/docs/prometheus/latest/querying/api/#instant-queries."""
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise NotXids("its answer is not an instant vector")
    result = data.get("result")
    if not isinstance(result, list):
        raise NotXids("its answer holds no list of series")
    codes: dict[tuple[tuple[str, str], ...], float] = {}
    seen: dict[tuple[tuple[str, str], ...], float] = {}
    for raw in result:
        if not isinstance(raw, dict) or not isinstance(raw.get("metric"), dict):
            raise NotXids("a series without labels")
        # the name dropped: last_over_time keeps it in Prometheus 2.x, timestamp() does not
        labels = {k: text(v) for k, v in raw["metric"].items() if k not in (PART, "__name__")}
        into = codes if raw["metric"].get(PART) == "code" else seen
        into[tuple(sorted(labels.items()))] = _number(raw.get("value"))
    best: dict[tuple[str, str], tuple[float, bool, Xid]] = {}
    for key, value in codes.items():
        labels = dict(key)
        uuid = labels.get("UUID", "")
        if uuid not in wanted or not math.isfinite(value) or value != int(value) or value < 0:
            continue
        xid = Xid(int(value), text(labels.get("err_msg", ""), MESSAGE_CHARS))
        rank = (seen.get(key, -math.inf), xid.code != 0, xid)
        gpu = (labels.get("cluster") or cluster, uuid)
        if gpu not in best or rank[:2] > best[gpu][:2]:
            best[gpu] = rank
    return {gpu: rank[2] for gpu, rank in best.items()}


def lost_xids(settings: Settings, lost: list[LostGpu], start: datetime, at: datetime) -> Xids:
    """The last XID of each of the ``lost`` GPUs (at most :data:`MAX_GPUS`, in their order) over
    [start, at], or why it could not be read; nothing is asked when none is lost."""
    out = Xids(source=source(settings.prometheus_url.strip()))
    asked = [g.gpu_uuid for g in lost if _UUID.fullmatch(g.gpu_uuid)][:MAX_GPUS]
    uuids = sorted(set(asked))
    out.asked, out.not_asked = len(asked), len(lost) - len(asked)
    if not uuids:
        return out
    seconds = max(1, math.ceil((at - start).total_seconds()))
    params = {"query": query(uuids, seconds), "time": instant_text(at)}
    try:
        out.by_gpu = parse(read(settings, "/api/v1/query", params), settings.cluster, set(uuids))
    except Unreadable as exc:
        out.trouble = str(exc)
    return out
