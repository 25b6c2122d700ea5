"""One hour's reads from Prometheus, shared by both rules (docs/cost-model.md, "Two rules, one
per source"): the hour's instants, the reads asked for through the run's reader
(costsvc/ingest/reader.py), each series' cluster, the GPUs' and pods' facts that do not depend
on the rule (a GPU's node and model, the pods' labels and controllers).

How a gauge's samples become figures is the gauges' (costsvc/ingest/gauges/holding_hour.py); how
counters do, the integrals' (costsvc/ingest/integrals.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import TYPE_CHECKING, TypeVar, cast

from costsvc.ingest.prom import PrometheusReader, Series
from costsvc.rules.attribution import GpuHour, HourFacts
from costsvc.rules.workloads import controllers_of, template_hash
from kube.label_names import ksm_labels

if TYPE_CHECKING:
    from costsvc.ingest.reader import RunReader

SCRAPE_GAP = Decimal(60)  # a silence longer than max(this, 2 scrape intervals) is a gap ...
MAX_GAP = Decimal(300)  # ... and one longer than this always is (Prometheus' staleness)
PRESENCE_GAP = Decimal(3600)  # a GPU seen in the hour exists between sightings
# a label or info series (kube-state-metrics' kube_pod_labels, owners; MIG instance info) is
# read over the hour and the look-back its holdings are read with: a pod whose last sample came
# just before the hour, or exactly at its start, still held the GPU into it (its samples hold
# until the next), and its labels must name its team whichever target was scraped last and
# whichever engine answers (a window's start is closed on Prometheus 2, open on Prometheus 3 and
# VictoriaMetrics: a sample exactly at the hour's start was in one and not the other)
LATEST_SECONDS = 3600 + int(MAX_GAP)
MICROSECOND = Decimal("0.000001")
Holes = list[tuple[Decimal, Decimal]]  # sorted, non-overlapping [since, until) intervals
T = TypeVar("T")


def us(seconds: Decimal) -> Decimal:
    """Seconds rounded to micro-seconds: what is stored is exactly what was priced."""
    return seconds.quantize(MICROSECOND, rounding=ROUND_HALF_EVEN)


def _nothing(labels: dict[str, str]) -> None:
    return None


class HourReads:
    """One hour [start, start + 1 h) of one Prometheus, for one default cluster."""

    def __init__(self, reader: RunReader, start: datetime, cluster: str) -> None:
        self.reader, self.cluster = reader, cluster
        self.at = start + timedelta(hours=1) - timedelta(microseconds=1)  # the hour's last instant
        self.t0 = Decimal(str(start.timestamp()))
        self.t1 = self.t0 + 3600
        self._pending: dict[tuple[str, int], Future[list[Series]]] = {}

    @property
    def prom(self) -> PrometheusReader:
        """The query API itself, for the reads that are never synthesised."""
        return self.reader.prom

    def prefetch(self, reads: Iterable[tuple[str, Decimal]]) -> None:
        """Ask for these reads now: Prometheus answers the next while this one is integrated."""
        self._pending.update(self.reader.prefetch(self.at, reads))

    def cancel(self) -> None:
        for f in self._pending.values():
            f.cancel()

    def cluster_of(self, labels: dict[str, str]) -> str:
        return cluster_label(labels, self.cluster)

    def raw(self, selector: str, look_back: Decimal = MAX_GAP) -> list[Series]:
        """Every sample of ``selector`` in the hour and ``look_back`` before it (a steady
        series' samples synthesised from summaries: costsvc/ingest/gauges/steady.py)."""
        pending = self._pending.pop((selector, int(look_back)), None)
        if pending is not None:
            return pending.result()
        return self.reader.read(selector, self.at, 3600 + int(look_back))

    def latest(self, selector: str) -> list[dict[str, str]]:
        """The label sets of ``selector`` with a sample in the hour or its look-back
        (:data:`LATEST_SECONDS`), sorted."""
        return [lab for lab, _ in self.latest_with(selector, _nothing)]

    def latest_with(
        self, selector: str, derive: Callable[[dict[str, str]], T]
    ) -> list[tuple[dict[str, str], T]]:
        """:meth:`latest`, each label set with ``derive(labels)`` (worked out once per label
        set of a block of hours: costsvc/ingest/reader.py)."""
        return self.reader.latest(selector, self.at, LATEST_SECONDS, derive)


def pod_and_namespace_labels(w: HourReads, facts: HourFacts) -> None:
    """kube-state-metrics' ``kube_pod_labels`` / ``kube_namespace_labels`` of the hour."""
    # (keys: the cluster and ``names``' values, as the facts key them)
    pods = _latest_labels(w, "kube_pod_labels", ("namespace", "pod"))
    facts.pod_labels.update(cast(dict[tuple[str, str, str], dict[str, str]], pods))
    spaces = _latest_labels(w, "kube_namespace_labels", ("namespace",))
    facts.namespace_labels.update(cast(dict[tuple[str, str], dict[str, str]], spaces))


# kube-state-metrics' owner series (docs/pod-metrics.md, replicaset-metrics.md, job-metrics.md:
# owner_kind, owner_name, owner_is_controller; "<none>" for an object without owners), and the
# label naming the owned object in each
OWNER_SERIES = (
    ("kube_pod_owner", "pod"),
    ("kube_replicaset_owner", "replicaset"),
    ("kube_job_owner", "job_name"),
)
NO_OWNER = "<none>"


def pod_controllers(w: HourReads, facts: HourFacts) -> None:
    """The controller of each pod that held a GPU in the hour, from kube-state-metrics' owner
    series: a pod's ``kube_pod_owner`` (its controller reference, else its first owner), and
    one level up ``kube_replicaset_owner`` / ``kube_job_owner`` (a Deployment, a CronJob)."""
    held = {(h.cluster, h.namespace, h.pod) for h in facts.holdings}
    if not held:
        return
    owners: dict[str, dict[tuple[str, str, str], list[tuple[bool, str, str]]]] = {}
    for metric, name in OWNER_SERIES:
        found = owners.setdefault(name, {})
        for lab in w.latest(metric):
            kind, owner = lab.get("owner_kind", ""), lab.get("owner_name", "")
            key = (w.cluster_of(lab), lab.get("namespace", ""), lab.get(name, ""))
            if kind and NO_OWNER not in (kind, owner):
                is_controller = lab.get("owner_is_controller") == "true"
                found.setdefault(key, []).append((not is_controller, kind, owner))
            else:
                found.setdefault(key, [])
    pods = {k: v for k, v in owners["pod"].items() if k in held}
    if not pods:
        return
    for cluster in sorted({k[0] for k in pods}):
        parents = [
            ((ns, (kind, obj)), _first(refs))
            for name, kind in (("replicaset", "ReplicaSet"), ("job_name", "Job"))
            for (c, ns, obj), refs in owners[name].items()
            if c == cluster
        ]
        mine = {(ns, pod): _first(refs) for (c, ns, pod), refs in pods.items() if c == cluster}
        labels = {
            (ns, pod): template_hash(lab)
            for (c, ns, pod), lab in facts.pod_labels.items()
            if c == cluster and (ns, pod) in mine
        }
        for (ns, pod), controller in controllers_of(mine, parents, labels).items():
            facts.controllers[(cluster, ns, pod)] = controller


def _first(refs: list[tuple[bool, str, str]]) -> tuple[str, str] | None:
    """The controller among an object's owners (else the first by kind and name); None: it
    has none."""
    return min(refs)[1:] if refs else None


def add_gpu(
    facts: HourFacts,
    cluster: str,
    uuid: str,
    lab: dict[str, str],
    present: Decimal,
    lost: Decimal = Decimal(0),
) -> None:
    # dcgm-exporter's releases (and our exporter by default) write Hostname, its main branch
    # hostname (NVIDIA/dcgm-exporter#655; gpu-exporter --hostname-label hostname)
    node = lab.get("Hostname") or lab.get("hostname", "")
    facts.gpus.append(
        GpuHour(
            cluster,
            node,
            uuid,
            lab.get("modelName", ""),
            lab.get("node_pool") or None,
            present,
            lost_seconds=lost,
        )
    )
    facts.node_of[(cluster, uuid)] = node


def cluster_label(labels: Mapping[str, str], default: str) -> str:
    """A series' cluster: its ``cluster`` label, else the service's own cluster."""
    return labels.get("cluster") or default


_KEYED: dict[
    tuple[tuple[str, ...], str],
    Callable[[dict[str, str]], tuple[tuple[str, ...], dict[str, str]]],
] = {}


def _keyed(
    names: tuple[str, ...], cluster: str
) -> Callable[[dict[str, str]], tuple[tuple[str, ...], dict[str, str]]]:
    """A series' object (its cluster, ``names``' values) and ``label_*`` labels: one function
    per names and default cluster, so that a block of hours works it out once per label set
    (costsvc/ingest/reader.py ``latest``)."""
    found = _KEYED.get((names, cluster))
    if found is None:

        def derive(lab: dict[str, str]) -> tuple[tuple[str, ...], dict[str, str]]:
            key = (cluster_label(lab, cluster), *(lab.get(n, "") for n in names))
            return key, ksm_labels(lab)

        found = _KEYED[(names, cluster)] = derive
    return found


def _latest_labels(
    w: HourReads, metric: str, names: tuple[str, ...]
) -> dict[tuple[str, ...], dict[str, str]]:
    """Each object's ``label_*`` labels as last seen in the hour: one answer per series, and
    for the rare object relabelled within the hour (several series), its raw samples decide."""
    found: dict[tuple[str, ...], tuple[dict[str, str], dict[str, str]]] = {}
    several: dict[tuple[str, ...], list[dict[str, str]]] = {}  # (relabelled: its label sets)
    for lab, (key, own) in w.latest_with(metric, _keyed(names, w.cluster)):
        first = found.setdefault(key, (lab, own))
        if first[0] is not lab:
            several.setdefault(key, [first[0]]).append(lab)
    out = {key: own for key, (_, own) in found.items()}
    for key, sets in sorted(several.items()):
        match = ",".join(
            f'{n}="{v}"'
            for n, v in zip(names, key[1:], strict=True)
            if '"' not in v and "\\" not in v
        )
        newest: tuple[Decimal, dict[str, str]] | None = None
        for s in w.prom.raw(f"{metric}{{{match}}}", w.at, LATEST_SECONDS):
            if (w.cluster_of(s.labels), *(s.labels.get(n, "") for n in names)) != key:
                continue
            stamp = max((t for t, _ in s.samples if t < w.t1), default=None)
            if stamp is not None and (newest is None or stamp >= newest[0]):
                newest = (stamp, ksm_labels(s.labels))
        out[key] = newest[1] if newest else ksm_labels(sorted(sets, key=str)[-1])
    return out
