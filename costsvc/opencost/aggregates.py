"""OpenCost's ``aggregate`` properties, and the part of an allocation's name each gives. Pure.

Parsed as opencost/opencost parses them (``pkg/costmodel/aggregation.go``
``ParseAggregationProperties``, ``core/pkg/opencost/allocationprops.go`` ``ParseProperty``):
a comma list, each name case-insensitive (``controllerKind`` = ``controllerkind``),
``label:<key>`` and ``annotation:<key>`` with the key Prometheus-sanitised; a name OpenCost
does not know (``cronjob``, ``replicaset``, ``colour``) is dropped without a word, and when
nothing is left (or ``all`` alone) everything is one allocation named ``""``. No aggregate:
cluster, node, namespace, pod, container.

Each part of a name as OpenCost's ``GenerateKey`` writes it, from the chargeback's columns:

- ``cluster``, ``node``, ``namespace``, ``pod``, ``container``: the value (gpu-costsvc writes
  ``__unallocated__`` where a line has none: idle capacity, a line from before containers
  were kept);
- ``controllerKind``: the controller's kind as OpenCost names it (lower case; a CronJob's pods
  are ``job``, as OpenCost strips the Job's timestamp to the CronJob's name), else
  ``__unallocated__``; ``controller``: ``<kind>:<name>``; ``deployment``, ``statefulset``,
  ``daemonset``, ``job``: the controller's name when it is of that kind, else
  ``__unallocated__``;
- ``label:<key>``: the label (costsvc/opencost/podlabels.py), the owner labels straight from
  the chargeback; ``team``, ``department``, ``environment``, ``owner``, ``product``: OpenCost's
  label aliases (its default label names ``team``, ``department``, ``env``, ``owner``, ``app``;
  ``team`` is the cost model's team);
- ``service``, ``annotation:<key>``: ``__unallocated__`` (gpu-costsvc watches neither Services
  nor annotations); ``providerID``: nothing (``GenerateKey`` has no case for it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from costsvc.rules.chargeback import IDLE, UNALLOCATED
from kube.label_names import sanitize_label

LABEL_PREFIX = "label:"  # a row column holding a pod label that is no owner column
COLUMN_RULES = ("cluster", "node", "namespace", "pod", "container")
CONTROLLER_KINDS = ("deployment", "statefulset", "daemonset", "job")
# OpenCost's aliased labels and its default label names (LabelConfig)
ALIASED_LABELS = {"department": "department", "environment": "env", "owner": "owner"}
ALIASED_LABELS["product"] = "app"
NOTHING_KEPT = ("service",)  # always __unallocated__
DEFAULT = ("cluster", "node", "namespace", "pod", "container")
CONTROLLER_COLUMNS = ("controller_kind", "controller")


def label_column(key: str) -> str:
    """The row column of a label the chargeback does not keep (costsvc/opencost/podlabels.py
    fills it from the label history)."""
    return LABEL_PREFIX + sanitize_label(key)


@dataclass(frozen=True, slots=True)
class Aggregate:
    """One ``aggregate`` property: its OpenCost name, the chargeback column that answers it
    (``""``: none), the label key (``label:<key>``) it came from, and how its part of the
    name is made (``rule``: ``value``, ``owner``, ``label``, ``kind``, ``controller``, a
    controller kind, or ``none``)."""

    name: str
    column: str
    label: str | None = None
    rule: str = "value"

    @property
    def columns(self) -> tuple[str, ...]:
        """The row columns it reads."""
        if self.rule in ("kind", "controller", *CONTROLLER_KINDS):
            return CONTROLLER_COLUMNS
        return (self.column,) if self.column else ()


def owner_value(value: str) -> str:
    """An owner column as a label value: none for ``__unallocated__``/``__idle__``."""
    return "" if value in (UNALLOCATED, IDLE) else value


def opencost_kind(kind: str) -> str:
    """A controller's Kubernetes kind as OpenCost's ``controllerKind`` (pkg/costmodel/key.go
    ``resultControllerKey``: ``deployment``, ``statefulset``, ``daemonset``, ``job``,
    ``replicaset``, ``rollout``): lower case, a CronJob's pods ``job``. Other kinds (a
    LeaderWorkerSet, a RayCluster) keep their own name, lower case, where OpenCost would know
    no controller."""
    return "job" if kind == "CronJob" else kind.lower()


def parse_aggregates(items: Sequence[str], labels: Mapping[str, str]) -> list[Aggregate]:
    """``aggregate`` (``GetList`` already applied) as OpenCost parses it. ``labels``: label
    key -> the owner column it fills (the cost model's team/project/stage label keys)."""
    if not items:
        return [Aggregate(p, p) for p in DEFAULT]
    if list(items) == ["all"]:
        return []
    out = []
    for item in items:
        found = _property(item.strip(), labels)
        if found is not None:
            out.append(found)
    return out


def _property(text: str, labels: Mapping[str, str]) -> Aggregate | None:
    name = text.lower()
    if name in COLUMN_RULES:
        return Aggregate(name, name)
    if name == "controllerkind":
        return Aggregate("controllerKind", "", rule="kind")
    if name == "controller":
        return Aggregate(name, "", rule="controller")
    if name in CONTROLLER_KINDS:
        return Aggregate(name, "", rule=name)
    if name == "team":  # OpenCost's team alias: the team label, the cost model's team
        return Aggregate(name, "team", rule="owner")
    if name in ALIASED_LABELS:
        key = ALIASED_LABELS[name]
        return Aggregate(name, labels.get(key) or label_column(key), key, rule="label")
    if name in NOTHING_KEPT:
        return Aggregate(name, "", rule="none")
    if text.startswith("label:"):
        key = text.removeprefix("label:").strip()
        return Aggregate(text, labels.get(key) or label_column(key), key, rule="label")
    if text.startswith("annotation:"):
        return Aggregate(text, "", rule="none")
    return None  # providerID, and what OpenCost does not know: dropped


def part(a: Aggregate, values: Mapping[str, str]) -> str:
    """The aggregate's part of an allocation's name (``__unallocated__`` where it has none)."""
    if a.rule == "none":
        return UNALLOCATED
    if a.rule in ("kind", "controller", *CONTROLLER_KINDS):
        kind, name = opencost_kind(values.get("controller_kind", "")), values.get("controller", "")
        if not name:
            return UNALLOCATED
        if a.rule == "kind":
            return kind or UNALLOCATED
        if a.rule == "controller":
            return f"{kind}:{name}" if kind else name
        return name if kind == a.rule else UNALLOCATED
    value = values.get(a.column, "")
    if a.rule in ("owner", "label"):
        value = owner_value(value)
    return value or UNALLOCATED


def name_of(values: Mapping[str, str], aggregate: Sequence[Aggregate]) -> str:
    """An allocation's name: its parts joined with ``/``, as OpenCost joins them."""
    return "/".join(part(a, values) for a in aggregate)
