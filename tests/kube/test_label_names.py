"""Kubernetes label keys as Prometheus label names."""

from __future__ import annotations

import pytest

from kube.label_names import sanitize_label


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("team", "label_team"),
        ("app.kubernetes.io/name", "label_app_kubernetes_io_name"),
        ("cost-center", "label_cost_center"),
    ],
)
def test_sanitize_label(key: str, name: str) -> None:
    assert sanitize_label(key) == name
