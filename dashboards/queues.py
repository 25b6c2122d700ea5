"""The FinOps dashboard's Kueue row: each ClusterQueue's use against its nominal quota, what
it borrows from its cohort, its idle quota, and the workloads pending (docs/queues.md). Kueue's
own series (kubernetes-sigs/kueue pkg/metrics/metrics.go), a follower replica's left out."""

from __future__ import annotations

from dashboards.common import Panel, target, timeseries_panel
from dashboards.selectors import KUEUE_QUEUES, PER_KUEUE_QUEUE

USAGE = f"sum by ({PER_KUEUE_QUEUE}) (kueue_cluster_queue_resource_usage{{{KUEUE_QUEUES}}})"
NOMINAL = f"sum by ({PER_KUEUE_QUEUE}) (kueue_cluster_queue_nominal_quota{{{KUEUE_QUEUES}}})"
LEGEND = "{{cohort}} / {{cluster_queue}} {{flavor}} {{resource}}"


def queues() -> list[Panel]:
    """Used vs nominal, borrowed, idle quota per ClusterQueue; pending workloads."""
    return [
        timeseries_panel(
            "Kueue: used and nominal quota by ClusterQueue",
            "kueue_cluster_queue_resource_usage (what admitted workloads use) and "
            "kueue_cluster_queue_nominal_quota per ClusterQueue, flavor and GPU resource.",
            target(USAGE, LEGEND + " used"),
            target(NOMINAL, LEGEND + " nominal"),
        )
        .unit("short")
        .decimals(0)
        .span(12),
        timeseries_panel(
            "Kueue: borrowed from the cohort",
            "Use beyond the nominal quota (usage - nominal, when positive): GPUs a ClusterQueue "
            "borrows from its cohort's unused quota; what it costs under credit_lenders: "
            "GET /v1/queues.",
            target(f"clamp_min({USAGE} - {NOMINAL}, 0) > 0", LEGEND),
        )
        .unit("short")
        .decimals(0)
        .span(12),
        timeseries_panel(
            "Kueue: idle nominal quota",
            "Nominal quota not used (nominal - usage, when positive): quota that is lent to the "
            "cohort's borrowers or sits idle (GET /v1/queues splits the two).",
            target(f"clamp_min({NOMINAL} - {USAGE}, 0) > 0", LEGEND),
        )
        .unit("short")
        .decimals(0)
        .span(12),
        timeseries_panel(
            "Kueue: pending workloads by ClusterQueue",
            "kueue_pending_workloads per ClusterQueue and status (active, inadmissible): "
            "workloads waiting while quota elsewhere in the cohort is idle are the alert "
            "KueueQuotaIdleWhileCohortPending.",
            target(
                f"sum by (cluster_queue, status) (kueue_pending_workloads{{{KUEUE_QUEUES}}})",
                "{{cluster_queue}} {{status}}",
            ),
        )
        .unit("short")
        .decimals(0)
        .span(12),
    ]
