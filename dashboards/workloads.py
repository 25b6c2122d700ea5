"""GPU workloads: which namespaces, pods and teams hold GPU capacity, and how much sits idle?"""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models import units

from dashboards.common import (
    USED_RATIO_STEPS,
    Panel,
    add_row,
    bargauge_panel,
    bars,
    board,
    finish,
    query_variable,
    ratio,
    stacked,
    stat_panel,
    table_panel,
    target,
    thresholds,
    timeseries_panel,
)
from dashboards.selectors import PER_HOLDING, POD_HOLDINGS

SHARE = f"gpu_allocation_share{{{POD_HOLDINGS}}}"
# GPUs held per (device, container)
HELD = f"sum by ({PER_HOLDING}) ({SHARE})"
# SM utilisation per (device, container), 0..1
UTILISATION = (
    f"clamp(max by ({PER_HOLDING}) (gpu_container_sm_utilization_ratio{{{POD_HOLDINGS}}}), 0, 1)"
)
# share x (1 - utilisation); a holder without processes (no utilisation series) is all idle
IDLE = f"({HELD} * on ({PER_HOLDING}) (1 - ({UTILISATION} or on ({PER_HOLDING}) 0 * {HELD})))"
# one team per pod, from kube-state-metrics; pods without the label count as __unallocated__
POD_TEAM = (
    "label_replace(topk by (cluster, namespace, pod) (1, max by (cluster, namespace, pod, "
    'label_team) (kube_pod_labels{cluster=~"$cluster", label_team=~"$team"})), "label_team", '
    '"__unallocated__", "label_team", "")'
)


def by_team(expr: str) -> str:
    """`expr` summed per team (label_team of the pod)."""
    return (
        f"sum by (label_team) ({expr} * on (cluster, namespace, pod) group_left (label_team) "
        f"{POD_TEAM})"
    )


def workloads() -> models.Dashboard:
    b = board(
        "gpu-finops-workloads",
        "GPU workloads",
        "Which namespaces, pods and teams hold GPU capacity, how much of it they use (SM "
        "utilisation, memory) and how much is allocated but idle.",
        ["gpu", "kubernetes"],
        [
            query_variable(
                "namespace",
                "Namespace",
                'label_values(gpu_allocation_share{cluster=~"$cluster"}, namespace)',
            ),
            query_variable(
                "pod",
                "Pod",
                "label_values(gpu_allocation_share"
                '{cluster=~"$cluster", namespace=~"$namespace"}, pod)',
            ),
            query_variable(
                "Hostname",
                "Node",
                'label_values(gpu_allocation_share{cluster=~"$cluster"}, Hostname)',
            ),
        ],
        "gpu_allocation_share",
    )
    b.with_variable(
        query_variable(
            "team", "Team", 'label_values(kube_pod_labels{cluster=~"$cluster"}, label_team)'
        )
    )
    add_row(b, "Allocation", allocation())
    add_row(b, "Utilisation", utilisation())
    add_row(b, "Allocated but idle", allocated_but_idle())
    add_row(b, "Teams", teams())
    return finish(b)


def allocation() -> list[Panel]:
    return [
        stat_panel(
            "GPUs held",
            "Sum of gpu_allocation_share: physical GPUs held by the selected pods (whole GPU 1, "
            "MIG instance compute slices / the GPU's, time-slice replica 1 / replicas).",
            target(f"sum({SHARE}) or vector(0)"),
        )
        .decimals(2)
        .span(6)
        .height(4),
        stat_panel(
            "Pods holding GPUs",
            "Pods with at least one GPU, MIG instance or replica.",
            target(f"count(count by (cluster, namespace, pod) ({SHARE})) or vector(0)"),
        )
        .span(6)
        .height(4),
        stat_panel(
            "Allocated but idle",
            "GPUs held but not used: sum of share x (1 - container SM utilisation); a holder "
            "with no process on the GPU counts as fully idle.",
            target(f"sum({IDLE}) or vector(0)"),
        )
        .decimals(2)
        .thresholds(thresholds((1, "orange"), (4, "red")))
        .span(6)
        .height(4),
        ratio(
            stat_panel(
                "Used share of held GPUs",
                "1 - allocated-but-idle / held: how much of the held capacity is busy.",
                target(f"1 - sum({IDLE}) / sum({HELD})"),
            )
            .thresholds(thresholds(*USED_RATIO_STEPS))
            .span(6)
            .height(4)
        ),
        stacked(
            timeseries_panel(
                "GPU share held by namespace",
                "gpu_allocation_share summed per namespace (GPUs).",
                target(f"sum by (namespace) ({SHARE})", "{{namespace}}"),
            )
        ).decimals(2),
        stacked(
            timeseries_panel(
                "GPU share held by pod",
                "gpu_allocation_share summed per pod (GPUs).",
                target(f"sum by (namespace, pod) ({SHARE})", "{{namespace}}/{{pod}}"),
            )
        ).decimals(2),
        table_panel(
            "Current holders",
            "Every (device, container) holding now, with the extended resource and share.",
            target(
                "sum by (namespace, pod, container, Hostname, gpu, GPU_I_PROFILE, resource) "
                f"({SHARE})",
                table=True,
            ),
            columns={"Value": "Share of GPU"},
        )
        .decimals(3)
        .span(24),
    ]


def utilisation() -> list[Panel]:
    return [
        ratio(
            timeseries_panel(
                "Container SM utilisation",
                "gpu_container_sm_utilization_ratio: SM utilisation of a container's processes on "
                "a device (0..1 of the device).",
                target(
                    f"max by ({PER_HOLDING}) "
                    f"(gpu_container_sm_utilization_ratio{{{POD_HOLDINGS}}})",
                    "{{namespace}}/{{pod}}/{{container}} {{Hostname}} GPU {{gpu}}",
                ),
            )
        ),
        timeseries_panel(
            "Container GPU memory used",
            "gpu_container_memory_used_bytes summed per container over its devices.",
            target(
                "sum by (namespace, pod, container) "
                f"(gpu_container_memory_used_bytes{{{POD_HOLDINGS}}})",
                "{{namespace}}/{{pod}}/{{container}}",
            ),
        )
        .unit(units.BytesIEC)
        .min(0),
        bars(
            timeseries_panel(
                "Unattributed GPU processes",
                "gpu_unattributed_processes: processes on a GPU that map to no pod (host "
                "processes or unknown containers).",
                target(
                    "sum by (Hostname, gpu) "
                    '(gpu_unattributed_processes{cluster=~"$cluster", Hostname=~"$Hostname"}) > 0',
                    "{{Hostname}} GPU {{gpu}}",
                ),
            )
        )
        .span(24)
        .height(6),
    ]


def allocated_but_idle() -> list[Panel]:
    return [
        stacked(
            timeseries_panel(
                "Allocated-but-idle GPUs by namespace",
                "share x (1 - SM utilisation) summed per namespace.",
                target(f"sum by (namespace) ({IDLE})", "{{namespace}}"),
            )
        ).decimals(2),
        bargauge_panel(
            "Top allocated-but-idle pods",
            "The ten pods holding the most idle GPU capacity now.",
            target(
                f"topk(10, sum by (namespace, pod) ({IDLE}))",
                "{{namespace}}/{{pod}}",
                instant=True,
            ),
        )
        .decimals(2)
        .thresholds(thresholds((0.5, "orange"), (1, "red"))),
    ]


def teams() -> list[Panel]:
    return [
        stacked(
            timeseries_panel(
                "GPU share held by team",
                "gpu_allocation_share joined to kube-state-metrics kube_pod_labels (label_team) "
                "on namespace, pod; pods without a team label are __unallocated__.",
                target(by_team(SHARE), "{{label_team}}"),
            )
        ).decimals(2),
        stacked(
            timeseries_panel(
                "Allocated-but-idle GPUs by team",
                "share x (1 - SM utilisation), per team from kube_pod_labels (label_team).",
                target(by_team(IDLE), "{{label_team}}"),
            )
        ).decimals(2),
        table_panel(
            "Teams now",
            "Per team: GPUs held, allocated but idle, and the used share of what it holds.",
            target(by_team(SHARE), table=True),
            target(by_team(IDLE), table=True),
            target(f"1 - {by_team(IDLE)} / {by_team(SHARE)}", table=True),
            columns={
                "label_team": "Team",
                "Value #A": "GPUs held",
                "Value #B": "Idle GPUs",
                "Value #C": "Used share",
            },
        )
        .decimals(2)
        .span(24),
    ]
