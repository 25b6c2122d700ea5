"""The demo's Kueue stand-in: two cohorts of ClusterQueues, one queue borrowing, one lending,
one idle, as Kueue's controller publishes them (kubernetes-sigs/kueue ``pkg/metrics/metrics.go``,
``metrics.enableClusterQueueResources`` on, a custom metric label ``team`` sourced from each
ClusterQueue: ``custom_team``, ``pkg/metrics/custom_labels.go``). Served beside the
kube-state-metrics stand-in on its target (demo/cluster.py ``scrape``), in the history and live.

- cohort ``training``, flavor ``h100`` (``nvidia.com/gpu``): ``nlp-train`` (team nlp) has 8
  GPUs of nominal quota and uses 11 — it borrows 3; ``vision-train`` (team vision) has 4 and
  uses 1 — it lends the 3, none left idle; a workload of ``nlp-train`` waits.
- cohort ``research``, flavor ``h100-mig`` (``nvidia.com/mig-1g.10gb``): ``research-mig``
  (team research) has 7 instances of nominal quota and uses none — idle, while nothing of
  the cohort waits; ``sandbox-mig`` (no team) has 2 and uses 2.

The cost model maps the flavors to their GPU (examples/cost-model.yaml ``queues``).
"""

from __future__ import annotations

# (cohort, ClusterQueue, team, flavor, resource, nominal, used, pending workloads)
QUEUES: tuple[tuple[str, str, str, str, str, int, int, int], ...] = (
    ("training", "nlp-train", "nlp", "h100", "nvidia.com/gpu", 8, 11, 1),
    ("training", "vision-train", "vision", "h100", "nvidia.com/gpu", 4, 1, 0),
    ("research", "research-mig", "research", "h100-mig", "nvidia.com/mig-1g.10gb", 7, 0, 0),
    ("research", "sandbox-mig", "", "h100-mig", "nvidia.com/mig-1g.10gb", 2, 2, 0),
)
ROLE = "standalone"  # pkg/util/roletracker: a controller without leader election


def exposition() -> str:
    """Kueue's answer (the same at every scrape: the demo's queues hold steady)."""
    out = []
    for name in ("nominal_quota", "resource_usage"):
        out.append(f"# TYPE kueue_cluster_queue_{name} gauge")
        for cohort, queue, team, flavor, resource, nominal, used, _ in QUEUES:
            value = nominal if name == "nominal_quota" else used
            out.append(
                f'kueue_cluster_queue_{name}{{cohort="{cohort}",cluster_queue="{queue}",'
                f'flavor="{flavor}",resource="{resource}",replica_role="{ROLE}",'
                f'custom_team="{team}"}} {value}'
            )
    out.append("# TYPE kueue_pending_workloads gauge")
    for _, queue, team, *_rest, pending in QUEUES:
        for status, value in (("active", pending), ("inadmissible", 0)):
            out.append(
                f'kueue_pending_workloads{{cluster_queue="{queue}",status="{status}",'
                f'replica_role="{ROLE}",custom_team="{team}"}} {value}'
            )
    return "\n".join(out) + "\n"
