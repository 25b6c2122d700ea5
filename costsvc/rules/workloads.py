"""Which workload a pod belongs to. Pure.

From the pod's ``ownerReferences`` (the controller reference) and, one level up, the owner of
that owner, as the Kubernetes API reports them (costsvc/advice/kube_owners.py keeps both in
history): a Deployment through its ReplicaSet, a CronJob through its Job; a StatefulSet, DaemonSet
or any other controller as itself; a pod with no owner is its own workload.

Where the API did not tell us (no history for the pod, or for its ReplicaSet or Job), the
names Kubernetes' controllers give decide, documented in docs/rightsizing.md:

- the Deployment controller names a ReplicaSet ``<deployment>-<pod-template-hash>`` and puts
  the hash on its pods as the ``pod-template-hash`` label;
- the CronJob controller names a Job ``<cronjob>-<scheduled time in minutes since the epoch>``;
- the ReplicaSet, Job and DaemonSet controllers name a pod ``<owner>-<5 random characters>``
  (from the alphabet of ``k8s.io/apimachinery/pkg/util/rand``: no vowels, no 0, 1 or 3), the
  StatefulSet controller ``<statefulset>-<ordinal>``.

From a pod name alone a ReplicaSet's, Job's and DaemonSet's pods look the same: such a guess
has the kind ``Controller``.

The chargeback keeps each pod's controller as at that hour (:func:`controllers_of`) from the
API's history, else kube-state-metrics' ``kube_pod_owner`` / ``kube_replicaset_owner`` /
``kube_job_owner`` — never a guess from the pod's name alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kube.label_names import sanitize_label

TEMPLATE_HASH = "pod-template-hash"  # the Deployment controller's label on its pods
# k8s.io/apimachinery/pkg/util/rand: the alphanumerics of generated names
ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_R = f"[{ALPHABET}]"
_CRONJOB_JOB = re.compile(r"^(.+)-(\d{8,})$")
_REPLICASET = re.compile(rf"^(.+)-{_R}{{6,10}}$")
_DEPLOYMENT_POD = re.compile(rf"^(.+)-{_R}{{6,10}}-{_R}{{5}}$")
_CRONJOB_POD = re.compile(rf"^(.+)-\d{{8,}}-{_R}{{5}}$")
_STATEFULSET_POD = re.compile(r"^(.+)-(\d+)$")
_GENERATED_POD = re.compile(rf"^(.+)-{_R}{{5}}$")


@dataclass(frozen=True, slots=True, order=True)
class Workload:
    kind: str  # Deployment, StatefulSet, DaemonSet, Job, CronJob, ..., Pod; Controller: a guess
    name: str


Owner = tuple[str, str]  # (kind, name)


def controller_of(owner_references: list[dict[str, Any]] | None) -> Owner | None:
    """The controller reference of an object's ``ownerReferences`` (else its first owner)."""
    refs = [r for r in owner_references or [] if isinstance(r, dict)]
    if not refs:
        return None
    ref = next((r for r in refs if r.get("controller")), refs[0])
    return str(ref.get("kind", "")), str(ref.get("name", ""))


def workload_of(
    pod: str,
    owner: Owner | None,
    owners_of_owners: Mapping[Owner, Owner | None],
    labels: Mapping[str, str] | None = None,
) -> Workload:
    """The workload of pod ``pod`` whose controller is ``owner`` (None: no owner).
    ``owners_of_owners``: the controller of each ReplicaSet and Job of the namespace that the
    API reported (None: it has none); ``labels``: the pod's labels."""
    if owner is None:
        return Workload("Pod", pod)
    kind, name = owner
    if kind in ("ReplicaSet", "Job"):
        if owner in owners_of_owners:
            parent = owners_of_owners[owner]
            return Workload(*parent) if parent is not None else Workload(kind, name)
        if kind == "ReplicaSet":
            template = (labels or {}).get(TEMPLATE_HASH, "")
            if template and name.endswith("-" + template):
                return Workload("Deployment", name[: -len(template) - 1])
            if not template and (m := _REPLICASET.match(name)):
                return Workload("Deployment", m[1])
        elif m := _CRONJOB_JOB.match(name):
            return Workload("CronJob", m[1])
    return Workload(kind, name)


def template_hash(labels: Mapping[str, str] | None) -> dict[str, str]:
    """A pod's ``pod-template-hash`` (the hash its ReplicaSet's name ends in) from its labels
    as kept (kube-state-metrics' keys: ``label_pod_template_hash``), in the form
    :func:`workload_of` and :func:`workload_from_name` read; {} without one."""
    value = (labels or {}).get(sanitize_label(TEMPLATE_HASH))
    return {TEMPLATE_HASH: value} if value else {}


def workload_from_name(pod: str, labels: Mapping[str, str] | None = None) -> Workload:
    """A pod's workload guessed from its name (and ``pod-template-hash``) when the API has
    told us nothing about the pod."""
    template = (labels or {}).get(TEMPLATE_HASH, "")
    if template:
        m = re.match(rf"^(.+)-{re.escape(template)}-{_R}{{5}}$", pod)
        if m:
            return Workload("Deployment", m[1])
    if m := _CRONJOB_POD.match(pod):
        return Workload("CronJob", m[1])
    if m := _DEPLOYMENT_POD.match(pod):
        return Workload("Deployment", m[1])
    if m := _STATEFULSET_POD.match(pod):
        return Workload("StatefulSet", m[1])
    if m := _GENERATED_POD.match(pod):
        return Workload("Controller", m[1])
    return Workload("Pod", pod)


Controller = tuple[str, str]  # (kind, name) of a pod's controller; ("", "") none


def controllers_of(
    pods: Mapping[tuple[str, str], Owner | None],
    parents: Iterable[tuple[tuple[str, Owner], Owner | None]],
    labels: Mapping[tuple[str, str], Mapping[str, str]] | None = None,
) -> dict[tuple[str, str], Controller]:
    """Each pod's controller, (namespace, pod) -> (kind, name), from its own owner and the
    owners of ReplicaSets and Jobs, ((namespace, (kind, name)), owner) (:func:`workload_of`);
    ("", "") for a pod that has none. ``labels``: pods' labels (``pod-template-hash``)."""
    by_namespace: dict[str, dict[Owner, Owner | None]] = {}
    for (namespace, controller), parent in parents:
        by_namespace.setdefault(namespace, {})[controller] = parent
    out = {}
    for (namespace, pod), owner in pods.items():
        own = (labels or {}).get((namespace, pod))
        wl = workload_of(pod, owner, by_namespace.get(namespace, {}), own)
        out[(namespace, pod)] = ("", "") if wl.kind == "Pod" else (wl.kind, wl.name)
    return out
