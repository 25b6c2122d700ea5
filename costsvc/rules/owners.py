"""Team, project and stage of a pod, from its labels as they were at that hour. Pure.

The one home of the owner rule (docs/architecture.md, "Rules"): :func:`resolve_label` —
a pod's label, else its namespace's, else a fallback — used by the ingest (:class:`OwnerLookup`),
rightsizing (costsvc/advice/run.py) and ``/allocation``'s labels (costsvc/opencost/podlabels.py);
and of the rule that labels from the Kubernetes-API history win over kube-state-metrics'
(:func:`with_history`: the ingest's hour, rightsizing's window).

Each dimension is taken from the first of its configured pod label keys that the pod has; if
none, from the same keys on the pod's namespace (when ``namespace_fallback`` is on); else
``__unallocated__``. Labels come from the Kubernetes-API history where it has the pod, else
from kube-state-metrics (whose label keys are sanitised: ``label_app_kubernetes_io_team``).
Label values are untrusted text: they are kept verbatim here and made safe where they are
written out (exposition, JSON, CSV).

The queue step (the cost model's ``queues.owners``, docs/queues.md): a pod submitted through
Kueue carries its LocalQueue's name in the label ``kueue.x-k8s.io/queue-name``
(kubernetes-sigs/kueue ``pkg/controller/constants/constants.go`` ``QueueLabel``); its team can
be that LocalQueue's (Kueue's custom label on its LocalQueue series, or the team labels of the
LocalQueue's namespace) or its ClusterQueue's. With ``pod_first`` the team is the pod's own
label, else the queue's, else the namespace's; with ``queue_first`` the queue's, else the
pod's, else the namespace's. A pod without the queue label, or whose queue has no team, falls
back to the rule above. Project and stage never come from the queue. With
``cluster_queue_label`` the
queue's team is the custom label of the LocalQueue's ClusterQueue (the link from the
Kubernetes API, costsvc/queues/links.py), handed in as the LocalQueue's team.

Beside the owner, the rule says which label decided it (:meth:`OwnerLookup.decided`, kept on
the chargeback line as ``owner_from``): per dimension ``pod:<key>``, ``namespace:<key>`` (the
key as configured), ``local_queue:<label>``, ``cluster_queue:<label>``,
``local_queue_namespace:<key>``, or ``-`` (the fallback): ``team=pod:team;project=-;stage=-``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from costsvc.rules.attribution import HourFacts, Owner
from costsvc.rules.chargeback import UNALLOCATED
from costsvc.rules.cost_model import LabelKeys, QueueOwners
from kube.label_names import sanitize_label

PodLabels = dict[tuple[str, str], dict[str, str]]  # (namespace, pod) -> labels
NamespaceLabels = dict[str, dict[str, str]]  # namespace -> labels
K = TypeVar("K")
# the queue label as kept (kube-state-metrics' form: label_kueue_x_k8s_io_queue_name)
QUEUE_LABEL = sanitize_label("kueue.x-k8s.io/queue-name")
LocalQueueTeams = Mapping[tuple[str, str, str], str]  # (cluster, namespace, LocalQueue) -> team


def _first(labels: Mapping[str, str], keys: Sequence[str]) -> str | None:
    for key in keys:
        value = labels.get(key)
        if value:
            return value
    return None


def resolve_label(
    pod_labels: Mapping[str, str],
    namespace_labels: Mapping[str, str],
    keys: Sequence[str],
    fallback: str = "",
    namespace_fallback: bool = True,
) -> str:
    """The owner rule: the value of the first of ``keys`` the pod has (non-empty); else, with
    ``namespace_fallback``, of the first its namespace has; else ``fallback``."""
    found = _first(pod_labels, keys)
    if found is None and namespace_fallback:
        found = _first(namespace_labels, keys)
    return found or fallback


def resolve_owner(
    pod_labels: Mapping[str, str], namespace_labels: Mapping[str, str], keys: LabelKeys
) -> Owner:
    fallback = keys.namespace_fallback  # (once per holding and hour: no closure per call)
    return Owner(
        resolve_label(pod_labels, namespace_labels, keys.team, UNALLOCATED, fallback),
        resolve_label(pod_labels, namespace_labels, keys.project, UNALLOCATED, fallback),
        resolve_label(pod_labels, namespace_labels, keys.stage, UNALLOCATED, fallback),
    )


def sanitised_keys(keys: LabelKeys) -> LabelKeys:
    """``keys`` as kube-state-metrics writes label keys (the form the labels are kept in)."""
    return LabelKeys(
        team=[sanitize_label(k) for k in keys.team],
        project=[sanitize_label(k) for k in keys.project],
        stage=[sanitize_label(k) for k in keys.stage],
        namespace_fallback=keys.namespace_fallback,
    )


def sanitised(labels: Mapping[str, str]) -> dict[str, str]:
    """Labels as the Kubernetes API gives them, in the form they are kept in: keys as
    kube-state-metrics writes them (``label_app_kubernetes_io_team``)."""
    return {sanitize_label(k): v for k, v in labels.items()}


def with_history(
    kept: dict[K, dict[str, str]], history: Mapping[K, Mapping[str, str]]
) -> dict[K, dict[str, str]]:
    """The rule: labels from the Kubernetes-API history win over kube-state-metrics'. Each
    object of ``history`` (its labels as the API gave them) replaces its entry in ``kept``
    (kube-state-metrics' labels, kept form), sanitised; ``kept``, so updated, is returned."""
    for key, labels in history.items():
        kept[key] = sanitised(labels)
    return kept


def merge_history(facts: HourFacts, cluster: str, pods: PodLabels, spaces: NamespaceLabels) -> None:
    """Labels from the Kubernetes-API history win over kube-state-metrics' in ``facts``."""
    with_history(facts.pod_labels, {(cluster, *key): labels for key, labels in pods.items()})
    with_history(facts.namespace_labels, {(cluster, name): v for name, v in spaces.items()})


DIMS = ("team", "project", "stage")
SOURCES = {  # where a queue's team comes from, as ``owner_from`` names it
    "local_queue_label": "local_queue",
    "cluster_queue_label": "cluster_queue",
    "local_queue_namespace": "local_queue_namespace",
}


def _decided(
    pod: Mapping[str, str],
    ns: Mapping[str, str],
    keys: Sequence[str],
    raw: Sequence[str],
    nsf: bool,
) -> str:
    """Which label decided a dimension by :func:`resolve_label`: ``pod:<key>``,
    ``namespace:<key>`` (the key as configured), or ``-`` (the fallback)."""
    for where, labels in (("pod", pod), ("namespace", ns if nsf else {})):
        for key, shown_as in zip(keys, raw, strict=True):
            if labels.get(key):
                return f"{where}:{shown_as}"
    return "-"


class OwnerLookup:
    """``(cluster, namespace, pod) -> Owner`` over one hour's labels; :meth:`decided`: which
    labels decided it (``team=pod:team;project=namespace:project;stage=-``)."""

    def __init__(
        self,
        facts: HourFacts,
        keys: LabelKeys,
        queues: QueueOwners | None = None,
        local_queue_teams: LocalQueueTeams | None = None,
    ) -> None:
        self._facts = facts
        # the labels are kept sanitised (kube-state-metrics' form): look the keys up that way
        self._raw = keys
        self._keys = sanitised_keys(keys)
        self._queues = queues if queues is not None and queues.team_from != "off" else None
        self._lq_teams = local_queue_teams or {}
        self._seen: dict[tuple[str, str, str], tuple[Owner, str]] = {}

    def __call__(self, cluster: str, namespace: str, pod: str) -> Owner | None:
        return self._resolve(cluster, namespace, pod)[0]

    def decided(self, cluster: str, namespace: str, pod: str) -> str:
        """Which label decided each of the pod's team, project and stage (``owner_from``)."""
        return self._resolve(cluster, namespace, pod)[1]

    def _resolve(self, cluster: str, namespace: str, pod: str) -> tuple[Owner, str]:
        found = self._seen.get((cluster, namespace, pod))
        if found is not None:
            return found
        pod_labels = self._facts.pod_labels.get((cluster, namespace, pod), {})
        ns_labels = self._facts.namespace_labels.get((cluster, namespace), {})
        keys, raw, nsf = self._keys, self._raw, self._keys.namespace_fallback
        owner = resolve_owner(pod_labels, ns_labels, keys)
        froms = [
            _decided(pod_labels, ns_labels, getattr(keys, d), getattr(raw, d), nsf) for d in DIMS
        ]
        team = self._queue_team(cluster, namespace, pod_labels, ns_labels)
        queues = self._queues
        if team and queues is not None:
            own = _first(pod_labels, keys.team)
            if queues.precedence == "queue_first" or not own:
                owner = Owner(team, owner.project, owner.stage)
                froms[0] = f"{SOURCES[queues.team_from]}:{self._queue_key(ns_labels)}"
        found = owner, ";".join(f"{d}={f}" for d, f in zip(DIMS, froms, strict=True))
        self._seen[(cluster, namespace, pod)] = found
        return found

    def _queue_key(self, ns: Mapping[str, str]) -> str:
        """The label that named the queue's team: the queues' custom label, or the first team
        key the LocalQueue's namespace has (as configured)."""
        assert self._queues is not None
        if self._queues.team_from != "local_queue_namespace":
            return self._queues.label
        return next(r for k, r in zip(self._keys.team, self._raw.team, strict=True) if ns.get(k))

    def _queue_team(
        self, cluster: str, namespace: str, pod_labels: Mapping[str, str], ns: Mapping[str, str]
    ) -> str | None:
        """The team of the pod's LocalQueue (in the pod's namespace, as Kueue requires), or of
        its ClusterQueue (``local_queue_teams`` then holds the ClusterQueue's team)."""
        queue = pod_labels.get(QUEUE_LABEL)
        if not queue or self._queues is None:
            return None
        if self._queues.team_from == "local_queue_namespace":
            return _first(ns, self._keys.team)
        return self._lq_teams.get((cluster, namespace, queue))
