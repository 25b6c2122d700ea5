"""Any pod label for ``aggregate=label:<key>`` and ``filter=label[<key>]:…``, from the label
history the Kubernetes watcher keeps (costsvc/labels/history.py). Pure.

The owner labels (team, project, stage) are columns of the chargeback, as they were at each
hour. Any other key is looked up here: a pod's labels as in force during the allocation set —
where they changed within the set, its latest (the rule the ingest applies to each hour, so
with ``step=1h`` it is exact) — else its namespace's, as owners fall back; else none
(``__unallocated__``). Keys compare Prometheus-sanitised, as OpenCost's do
(``label:app_kubernetes_io_name`` and ``label:app.kubernetes.io/name`` are the same). Without
the watcher (labels only from kube-state-metrics) there is no history, and only the owner
labels aggregate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from costsvc.kit.windows import Window
from costsvc.labels.history import was_in_force_during
from costsvc.opencost.shape import LABEL_PREFIX, Row
from costsvc.rules.owners import resolve_label, sanitised


@dataclass(frozen=True, slots=True)
class Labelled:
    """One row of label history: the labels of a pod (``pod`` set) or of a namespace."""

    cluster: str
    namespace: str
    pod: str | None
    labels: Mapping[str, str]
    valid_from: datetime
    valid_to: datetime | None


def _latest(history: Sequence[Labelled], window: Window) -> Mapping[str, str] | None:
    found: Labelled | None = None
    for h in history:
        in_force = was_in_force_during(h.valid_from, h.valid_to, window.start, window.end)
        if in_force and (found is None or h.valid_from >= found.valid_from):
            found = h
    return None if found is None else found.labels


def with_labels(
    rows: Iterable[Row],
    windows: Sequence[Window],
    keys: Iterable[str],
    history: Iterable[Labelled],
) -> list[Row]:
    """``rows`` (grouped by cluster, namespace and pod) with a ``label:<key>`` column for each
    of ``keys`` (sanitised, as :func:`~costsvc.opencost.shape.label_column` writes them): ""
    where neither the pod nor its namespace has the label."""
    wanted = set(keys)
    pods: dict[tuple[str, str, str], list[Labelled]] = {}
    spaces: dict[tuple[str, str], list[Labelled]] = {}
    for h in history:
        if h.pod is None:
            spaces.setdefault((h.cluster, h.namespace), []).append(h)
        else:
            pods.setdefault((h.cluster, h.namespace, h.pod), []).append(h)
    out = []
    for r in rows:
        window = windows[r.set_index]
        cluster, namespace = r.values.get("cluster", ""), r.values.get("namespace", "")
        own = _latest(pods.get((cluster, namespace, r.values.get("pod", "")), []), window)
        space = _latest(spaces.get((cluster, namespace), []), window)
        mine, theirs = sanitised(own or {}), sanitised(space or {})
        values = dict(r.values)
        for key in wanted:  # the owner rule: the pod's, else its namespace's, else none
            values[LABEL_PREFIX + key] = resolve_label(mine, theirs, [key])
        out.append(replace(r, values=values))
    return out
