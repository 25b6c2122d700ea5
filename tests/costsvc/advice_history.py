"""A week of synthetic Prometheus history (5-minute samples) for the rightsizing and quota
tests, and the Kubernetes objects the loopback API serves with it. Prices: H100 2.50, A100
1.80 per GPU-hour. Hand-computed answers are in tests/costsvc/test_advice.py.

namespace  team      pod (owner)                                  GPU            figures
infer      search    chat-6d5f7b9c8d-x2k9p (RS -> Deployment chat) H100 GPU-C   9 GB, profiling 0.12
infer      search    embed-7f9c6b5d4-q8w2z (RS not served; hash)   H100 GPU-E   50 GB, 0.60
infer      search    rank-5c4d8f7b6-a (RS -> Deployment rank)      H100 GPU-RH  9 GB, profiling 0.12
infer      search    rank-5c4d8f7b6-b                              A100 GPU-RA  9 GB, utilisation 12
infer-mig  search    svc-0 (not in the API: by name)               H100 GPU-M   1g.10gb, prof 0.7
train      research  train-llm-h7k2m (Job train-llm)               H100 GPU-T   70 GB, 0.95
db         research  vecdb-0 (StatefulSet vecdb)                   H100 GPU-V   5 GB, 0.50 10 % of
                                                                                the time, else 0.01
scratch    -         fresh-x2k9p (3 hours only)                    H100 GPU-F   2 GB, 0.30

ResourceQuotas: infer requests.nvidia.com/gpu 4 (used 4); db requests.nvidia.com/gpu 2 (used
1); infer-mig requests.nvidia.com/mig-1g.10gb 7 (used 1); train and scratch none.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

END = datetime(2026, 11, 20, tzinfo=UTC)
START = END - timedelta(days=7)
T_END = int(END.timestamp())
T_START = int(START.timestamp())
STEP = 300
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
GB = 10**9
MODEL_DOC = {
    "versions": [
        {
            "effective_from": "2026-11-01T00:00:00Z",
            "prices": [{"model": H100, "hourly": "2.50"}, {"model": A100, "hourly": "1.80"}],
        }
    ]
}
# (namespace, pod, gpu uuid, model, memory bytes, activity source, activity, first sample)
WHOLE = [
    ("infer", "chat-6d5f7b9c8d-x2k9p", "GPU-C", H100, 9 * GB, "prof", 0.12, T_START),
    ("infer", "embed-7f9c6b5d4-q8w2z", "GPU-E", H100, 50 * GB, "prof", 0.60, T_START),
    ("infer", "rank-5c4d8f7b6-a", "GPU-RH", H100, 9 * GB, "prof", 0.12, T_START),
    ("infer", "rank-5c4d8f7b6-b", "GPU-RA", A100, 9 * GB, "util", 12.0, T_START),
    ("train", "train-llm-h7k2m", "GPU-T", H100, 70 * GB, "prof", 0.95, T_START),
    ("db", "vecdb-0", "GPU-V", H100, 5 * GB, "prof", None, T_START),
    ("scratch", "fresh-x2k9p", "GPU-F", H100, 2 * GB, "prof", 0.30, T_END - 3 * 3600),
]
TEAMS = {"infer": "search", "infer-mig": "search", "train": "research", "db": "research"}
TOTAL_MIB = {H100: 81559, A100: 81920}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def history() -> str:
    fam: dict[str, list[str]] = {}

    def add(name: str, labels: dict[str, str], value: Any, start: int) -> None:
        text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        lines = fam.setdefault(name, [])
        # the first sample one step after ``start``: a window (start, END] holds 2016 of them
        for i, t in enumerate(range(start + STEP, T_END, STEP)):
            v = value(i) if callable(value) else value
            lines.append(f"{name}{{{text}}} {v} {t}")

    for ns, pod, uuid, model, memory, source, activity, first in WHOLE:
        gpu = {"gpu": "0", "UUID": uuid, "modelName": model, "Hostname": f"node-{uuid}"}
        holder = {**gpu, "namespace": ns, "pod": pod, "container": "main"}
        add("gpu_device_up", gpu, 1, first)
        add("DCGM_FI_DEV_FB_USED", holder, memory // 2**20, first)
        add("DCGM_FI_DEV_FB_FREE", holder, TOTAL_MIB[model] - memory // 2**20, first)
        add("gpu_allocation_share", {**holder, "resource": "nvidia.com/gpu"}, 1, first)
        add("gpu_container_memory_used_bytes", holder, memory, first)
        if activity is None:  # busy one sample in ten
            value: Any = lambda i: 0.5 if i % 10 == 0 else 0.01  # noqa: E731
        else:
            value = activity
        name = "DCGM_FI_PROF_GR_ENGINE_ACTIVE" if source == "prof" else "DCGM_FI_DEV_GPU_UTIL"
        add(name, holder, value, first)
    # a MIG H100 as 7 x 1g.10gb, one instance held by infer-mig/svc-0
    gpu = {"gpu": "0", "UUID": "GPU-M", "modelName": H100, "Hostname": "node-m"}
    add("gpu_device_up", gpu, 1, T_START)
    inst = {**gpu, "GPU_I_ID": "7", "GPU_I_PROFILE": "1g.10gb"}
    holder = {**inst, "namespace": "infer-mig", "pod": "svc-0", "container": "main"}
    add("gpu_allocation_share", {**holder, "resource": "nvidia.com/mig-1g.10gb"}, 1 / 7, T_START)
    add("gpu_container_memory_used_bytes", holder, 5 * GB, T_START)
    add("gpu_container_sm_utilization_ratio", holder, 0.10, T_START)
    # the instance's own profiling (relative to the instance): 0.7 of 1/7 = 0.1 of the GPU
    add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", holder, 0.7, T_START)
    for ns, team in TEAMS.items():
        add("kube_namespace_labels", {"namespace": ns, "label_team": team}, 1, T_START)
    out = []
    for name, lines in fam.items():
        out.append(f"# TYPE {name} gauge")
        out.extend(lines)
    out.append("# EOF")
    return "\n".join(out) + "\n"


def _meta(namespace: str, name: str, owner: tuple[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{namespace}-{name}",
        "creationTimestamp": "2026-11-01T00:00:00Z",
    }
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "controller": True,
             "uid": f"uid-{owner[1]}"}
        ]  # fmt: skip
    return meta


def kube_objects() -> dict[str, list[dict[str, Any]]]:
    """What the loopback Kubernetes API serves: path -> objects."""
    pods = [
        ("infer", "chat-6d5f7b9c8d-x2k9p", ("ReplicaSet", "chat-6d5f7b9c8d"), "6d5f7b9c8d"),
        ("infer", "embed-7f9c6b5d4-q8w2z", ("ReplicaSet", "embed-7f9c6b5d4"), "7f9c6b5d4"),
        ("infer", "rank-5c4d8f7b6-a", ("ReplicaSet", "rank-5c4d8f7b6"), "5c4d8f7b6"),
        ("infer", "rank-5c4d8f7b6-b", ("ReplicaSet", "rank-5c4d8f7b6"), "5c4d8f7b6"),
        ("train", "train-llm-h7k2m", ("Job", "train-llm"), None),
        ("db", "vecdb-0", ("StatefulSet", "vecdb"), None),
    ]
    out: dict[str, list[dict[str, Any]]] = {"pods": []}
    for ns, name, owner, template in pods:
        meta = _meta(ns, name, owner)
        meta["labels"] = {"pod-template-hash": template} if template else {}
        out["pods"].append({"kind": "Pod", "apiVersion": "v1", "metadata": meta, "spec": {}})
    out["/apis/apps/v1/replicasets"] = [
        {"kind": "ReplicaSet", "metadata": _meta("infer", rs, ("Deployment", d))}
        for rs, d in (("chat-6d5f7b9c8d", "chat"), ("rank-5c4d8f7b6", "rank"))
    ]
    out["/apis/batch/v1/jobs"] = [{"kind": "Job", "metadata": _meta("train", "train-llm")}]
    out["/api/v1/resourcequotas"] = [
        {
            "kind": "ResourceQuota",
            "metadata": _meta(ns, "gpus"),
            "spec": {"hard": {resource: hard, "pods": "100"}},
            "status": {"hard": {resource: hard, "pods": "100"}, "used": {resource: used}},
        }
        for ns, resource, hard, used in (
            ("infer", "requests.nvidia.com/gpu", "4", "4"),
            ("db", "requests.nvidia.com/gpu", "2", "1"),
            ("infer-mig", "requests.nvidia.com/mig-1g.10gb", "7", "1"),
        )
    ]
    return out
