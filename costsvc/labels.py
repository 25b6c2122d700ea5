"""Team, project and stage of a pod, from its labels as they were at that hour.

Each dimension is taken from the first of its configured pod label keys that the pod has; if
none, from the same keys on the pod's namespace (when ``namespace_fallback`` is on); else
``__unallocated__``. Label values are untrusted text: they are kept verbatim here and made safe
where they are written out (exposition, JSON, CSV).
"""

from __future__ import annotations

from collections.abc import Mapping

from costsvc.attribution import UNALLOCATED, Owner
from costsvc.costmodel import LabelKeys


def _first(labels: Mapping[str, str], keys: list[str]) -> str | None:
    for key in keys:
        value = labels.get(key)
        if value:
            return value
    return None


def resolve_owner(
    pod_labels: Mapping[str, str], namespace_labels: Mapping[str, str], keys: LabelKeys
) -> Owner:
    def pick(dim_keys: list[str]) -> str:
        found = _first(pod_labels, dim_keys)
        if found is None and keys.namespace_fallback:
            found = _first(namespace_labels, dim_keys)
        return found or UNALLOCATED

    return Owner(pick(keys.team), pick(keys.project), pick(keys.stage))
