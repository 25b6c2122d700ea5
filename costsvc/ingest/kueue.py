"""One hour of Kueue from Prometheus: each ClusterQueue's nominal quota and use per flavor and
GPU resource, the team of each ClusterQueue and LocalQueue (docs/queues.md).

The series, as Kueue registers them (kubernetes-sigs/kueue ``pkg/metrics/metrics.go``:
``Subsystem: constants.KueueName`` is ``kueue``, ``pkg/constants/constants.go``), gauges with
the labels ``cohort``, ``cluster_queue``, ``flavor``, ``resource``, ``replica_role`` and the
custom labels (``custom_<name>``, ``pkg/metrics/custom_labels.go``, sourced from the
ClusterQueue by default):

- ``kueue_cluster_queue_nominal_quota``: the quota of a ClusterQueue's flavor and resource;
- ``kueue_cluster_queue_resource_usage``: what its admitted workloads use of it;
- the LocalQueue series ``kueue_local_queue_status`` (``name``, ``namespace``, ``status``)
  and ``kueue_local_queue_resource_usage`` (``name``, ``namespace``, ``flavor``,
  ``resource``), whose custom labels are sourced from the LocalQueue.

``replica_role`` is ``leader``, ``follower`` or ``standalone``
(``pkg/util/roletracker/tracker.go``): a follower's series are left out (the leader's count).
Both API versions (``kueue.x-k8s.io/v1beta1``, ``v1beta2``) publish the same series. Only
GPU resources are read: ``nvidia.com/gpu``, ``nvidia.com/mig-<profile>`` and ``amd.com/gpu``.
Label values are untrusted text: stored without NUL and cut to the columns' 253 characters
(:func:`costsvc.ingest.tokens.stored_text`). A series is a step function over the hour by
the one sampled rule (:func:`costsvc.ingest.gauges.sampled.pieces`: a scrape gap is not
held); its integral, in resource-seconds, is rounded half to even to a whole one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from costsvc.ingest.gauges.sampled import max_gap_for, pieces
from costsvc.ingest.hour import MAX_GAP, SCRAPE_GAP, cluster_label
from costsvc.ingest.prom import PrometheusReader, Series
from costsvc.ingest.tokens import stored_text
from costsvc.kit.money import round_micro
from costsvc.rules.attribution import Tags, TagsOf
from costsvc.rules.chargeback import UNALLOCATED
from costsvc.rules.cost_model import QueueOwners
from costsvc.rules.owners import QUEUE_LABEL
from costsvc.rules.queues import PodQueues, QueueUse

NOMINAL = "kueue_cluster_queue_nominal_quota"
USAGE = "kueue_cluster_queue_resource_usage"
LOCAL_QUEUE_SERIES = ("kueue_local_queue_status", "kueue_local_queue_resource_usage")
GPU_RESOURCES = r"nvidia\\.com/gpu|nvidia\\.com/mig-.+|amd\\.com/gpu"
FOLLOWER = "follower"  # pkg/util/roletracker/tracker.go RoleFollower
QueueKey = tuple[str, str, str, str, str]  # cluster, cohort, cluster queue, flavor, resource
LocalQueueKey = tuple[str, str, str]  # cluster, namespace, LocalQueue


@dataclass
class KueueHour:
    """The hour's Kueue facts: per cluster, its ClusterQueues' use; the team of each
    LocalQueue (by the cost model's custom label)."""

    uses: dict[str, list[QueueUse]] = field(default_factory=dict)
    local_queue_teams: dict[LocalQueueKey, str] = field(default_factory=dict)


def collect_kueue(
    prom: PrometheusReader, start: datetime, default_cluster: str, owners: QueueOwners
) -> KueueHour:
    """Kueue's series in the hour from ``start``; ``owners``: the cost model's
    ``queues.owners`` (its ``label``: the custom label naming a queue's team; the LocalQueues'
    series are read only when the owner rule takes the team from them)."""
    team_label = owners.label
    at = start + timedelta(hours=1) - timedelta(microseconds=1)
    t0 = Decimal(str(start.timestamp()))
    names = "|".join((NOMINAL, USAGE))
    selector = f'{{__name__=~"{names}",resource=~"{GPU_RESOURCES}"}}'
    seconds: dict[tuple[str, QueueKey], Decimal] = {}
    teams: dict[QueueKey, dict[str, Decimal]] = {}
    for s in _leaders(prom.raw(selector, at, 3600 + int(MAX_GAP))):
        lab = s.labels
        key: QueueKey = (
            cluster_label(lab, default_cluster),
            stored_text(lab.get("cohort", "")),
            stored_text(lab.get("cluster_queue", "")),
            stored_text(lab.get("flavor", "")),
            stored_text(lab.get("resource", "")),
        )
        held, integral = _held(s, t0)
        name = lab["__name__"]
        seconds[(name, key)] = seconds.get((name, key), Decimal(0)) + integral
        if name == NOMINAL and lab.get(team_label):
            found, team = teams.setdefault(key, {}), stored_text(lab[team_label])
            found[team] = found.get(team, Decimal(0)) + held
    out = KueueHour()
    if owners.team_from == "local_queue_label":
        out.local_queue_teams = _local_queue_teams(prom, at, t0, default_cluster, team_label)
    for key in sorted({k for _, k in seconds}):
        cluster, cohort, queue, flavor, resource = key
        use = QueueUse(
            cohort,
            queue,
            flavor,
            resource,
            round_micro(seconds.get((NOMINAL, key), Decimal(0))),
            round_micro(seconds.get((USAGE, key), Decimal(0))),
            _longest(teams.get(key, {})) or UNALLOCATED,
        )
        out.uses.setdefault(cluster, []).append(use)
    return out


def _local_queue_teams(
    prom: PrometheusReader, at: datetime, t0: Decimal, default_cluster: str, team_label: str
) -> dict[LocalQueueKey, str]:
    """Each LocalQueue's team in the hour: the value of ``team_label`` it held longest."""
    selector = '{__name__=~"' + "|".join(LOCAL_QUEUE_SERIES) + '",' + team_label + '!=""}'
    held: dict[LocalQueueKey, dict[str, Decimal]] = {}
    for s in _leaders(prom.raw(selector, at, 3600 + int(MAX_GAP))):
        lab = s.labels
        key = (cluster_label(lab, default_cluster), lab.get("namespace", ""), lab.get("name", ""))
        found, team = held.setdefault(key, {}), stored_text(lab[team_label])
        found[team] = found.get(team, Decimal(0)) + _held(s, t0)[0]
    return {k: team for k, v in held.items() if (team := _longest(v))}


def _leaders(series: list[Series]) -> list[Series]:
    return [s for s in series if s.labels.get("replica_role") != FOLLOWER]


def _held(s: Series, t0: Decimal) -> tuple[Decimal, Decimal]:
    """How long the series held in the hour from ``t0``, and its integral (value-seconds; a
    negative value, which no quota or use can be, counts as 0)."""
    gap = max_gap_for(s.samples, SCRAPE_GAP, MAX_GAP)
    ps = pieces(s.samples, t0, t0 + 3600, gap)
    held = sum((b - a for a, b, _ in ps), Decimal(0))
    return held, sum(((b - a) * max(v, Decimal(0)) for a, b, v in ps), Decimal(0))


def _longest(values: Mapping[str, Decimal]) -> str:
    """The value held longest (ties: the greater name, so the answer never depends on order)."""
    best = max(values.items(), key=lambda kv: (kv[1], kv[0]), default=None)
    return best[0] if best is not None and best[1] > 0 else ""


def line_tags(
    pod_labels: Mapping[tuple[str, str, str], Mapping[str, str]],
    queues: PodQueues,
    decided: Callable[[str, str, str], str],
) -> TagsOf:
    """A line's tags (costsvc/rules/attribution.py ``Tags``): its pod's LocalQueue (the queue
    label in force that hour, kept form ``label_kueue_x_k8s_io_queue_name``), ClusterQueue,
    cohort and flavor (``queues``), and which labels decided its owner (``decided``)."""

    def tags_of(cluster: str, namespace: str, pod: str, model: str, mig: str) -> Tags:
        queue = stored_text(pod_labels.get((cluster, namespace, pod), {}).get(QUEUE_LABEL, ""))
        found = queues(cluster, namespace, queue, model, mig)
        return (*found, stored_text(decided(cluster, namespace, pod), 1000))

    return tags_of


def queue_teams(
    kueue: KueueHour, links: Mapping[LocalQueueKey, str], owners: QueueOwners
) -> dict[LocalQueueKey, str]:
    """The team of each LocalQueue for the owner rule's queue step: its own label's
    (``local_queue_label``), or — ``cluster_queue_label`` — the team of the ClusterQueue it
    points to (``links``) in the hour, from that ClusterQueue's label (none: no team)."""
    if owners.team_from != "cluster_queue_label":
        return kueue.local_queue_teams
    teams = {
        (cluster, u.cluster_queue): u.team
        for cluster, uses in kueue.uses.items()
        for u in uses
        if u.team != UNALLOCATED
    }
    return {lq: t for lq, cq in links.items() if (t := teams.get((lq[0], cq)))}
