"""Kubernetes label keys as Prometheus label names."""

from __future__ import annotations

import re

_NOT_A_NAME_CHAR = re.compile(r"[^a-zA-Z0-9_]")


def prometheus_name(key: str) -> str:
    """A label key as a Prometheus label name: each character outside ``[a-zA-Z0-9_]`` an
    ``_`` (OpenCost's ``PrometheusKeySanitizePass``, opencost/opencost
    ``core/pkg/filter/transform/promlabels.go``): ``nvidia.com/gpu.product`` ->
    ``nvidia_com_gpu_product``."""
    return _NOT_A_NAME_CHAR.sub("_", key)


def sanitize_label(key: str) -> str:
    """A label key as kube-state-metrics writes it in ``kube_pod_labels``:
    ``app.kubernetes.io/team`` -> ``label_app_kubernetes_io_team``."""
    return "label_" + prometheus_name(key)


def ksm_labels(labels: dict[str, str]) -> dict[str, str]:
    """The pod's or namespace's own labels among a ``kube_*_labels`` series' labels (those
    :func:`sanitize_label` wrote: ``label_*``)."""
    return {n: v for n, v in labels.items() if n.startswith("label_")}


# A label value as Kubernetes validates it (k8s.io/apimachinery pkg/util/validation
# validation.go: labelValueFmt = "(" + qualifiedNameFmt + ")?", LabelValueMaxLength = 63):
# empty, or alphanumerics, '-', '_', '.', starting and ending with an alphanumeric.
LABEL_VALUE_MAX = 63
LABEL_VALUE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_LABEL_VALUE = re.compile(LABEL_VALUE)


def is_label_value(value: str) -> bool:
    """Whether ``value`` is a valid Kubernetes label value (the empty string is)."""
    return len(value) <= LABEL_VALUE_MAX and _LABEL_VALUE.fullmatch(value) is not None
