"""Value sets of deploy/helm/gpu-finops that test_chart.py validates (kubernetes-validate,
the CRDs, helm lint) and test_chart_options.py checks object by object."""

from __future__ import annotations

from typing import Any

DIGEST = "sha256:" + "0123456789abcdef" * 4
OPTIONS: dict[str, Any] = {
    "image": {"repository": "registry.example/gpu-finops", "tag": "1.2.3", "digest": DIGEST},
    "fullnameOverride": "fin",
    "namespaceOverride": "gpu-system",
    "exporter": {
        "podAnnotations": {"example.com/scraped": "no"},
        "serviceAccount": {"annotations": {"example.com/role": "exporter"}},
        "monitor": {
            "honorLabels": True,
            "relabelings": [{"targetLabel": "cluster", "replacement": "east"}],
            "metricRelabelings": [{"action": "drop", "regex": "DCGM_FI_PROF_.*"}],
        },
    },
    "costsvc": {
        "podAnnotations": {"example.com/team": "finops"},
        "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/c"}},
        "priorityClassName": "high",
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "system", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {}},
        "monitor": {
            "honorLabels": True,
            "relabelings": [{"targetLabel": "cluster", "replacement": "east"}],
            "metricRelabelings": [{"action": "drop", "regex": "costsvc_http_.*"}],
        },
    },
}
