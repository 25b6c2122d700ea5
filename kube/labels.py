"""Kubernetes label keys as Prometheus label names."""

from __future__ import annotations

import re

_NOT_A_NAME_CHAR = re.compile(r"[^a-zA-Z0-9_]")


def sanitize_label(key: str) -> str:
    """A label key as kube-state-metrics writes it in ``kube_pod_labels``:
    ``app.kubernetes.io/team`` -> ``label_app_kubernetes_io_team``."""
    return "label_" + _NOT_A_NAME_CHAR.sub("_", key)
