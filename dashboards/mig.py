"""GPU MIG instances: how are my MIG GPUs cut up, who holds each instance, which sit idle?"""

from __future__ import annotations

from grafana_foundation_sdk.models import common, units
from grafana_foundation_sdk.models import dashboard as models

from dashboards.common import (
    Panel,
    add_row,
    bargauge_panel,
    basic_bars,
    board,
    finish,
    query_variable,
    ratio,
    stat_panel,
    table_panel,
    target,
    timeseries_panel,
)
from dashboards.selectors import MIG_INSTANCES, PER_MIG_INSTANCE

GI_LEGEND = "{{Hostname}} GPU {{gpu}} GI {{GPU_I_ID}} ({{GPU_I_PROFILE}})"
# the MIG-enabled physical GPUs
MIG_GPUS = f"count by (Hostname, gpu) (gpu_mig_instance_info{{{MIG_INSTANCES}}})"


def per_instance(aggregation: str, metric: str) -> str:
    """`aggregation by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE) (metric{selected instances})`."""
    return f"{aggregation} by ({PER_MIG_INSTANCE}) ({metric}{{{MIG_INSTANCES}}})"


def mig() -> models.Dashboard:
    b = board(
        "gpu-finops-mig",
        "GPU MIG instances",
        "Multi-Instance GPU layout and use: instances per GPU and profile, who holds them, "
        "their memory and graphics-engine activity per GPU instance (GPU_I_ID).",
        ["gpu", "mig"],
        [
            query_variable(
                "Hostname",
                "Node",
                'label_values(gpu_mig_instance_info{cluster=~"$cluster"}, Hostname)',
            ),
            query_variable(
                "gpu",
                "GPU",
                "label_values(gpu_mig_instance_info"
                '{cluster=~"$cluster", Hostname=~"$Hostname"}, gpu)',
            ),
            query_variable(
                "profile",
                "MIG profile",
                "label_values(gpu_mig_instance_info"
                '{cluster=~"$cluster", Hostname=~"$Hostname", gpu=~"$gpu"}, GPU_I_PROFILE)',
            ),
        ],
        "gpu_mig_instance_info",
    )
    add_row(b, "Layout", layout())
    add_row(b, "Activity", activity())
    add_row(b, "Memory", memory())
    return finish(b)


def layout() -> list[Panel]:
    return [
        stat_panel(
            "MIG instances",
            "Number of MIG GPU instances (gpu_mig_instance_info).",
            target(f"count(gpu_mig_instance_info{{{MIG_INSTANCES}}}) or vector(0)"),
        )
        .span(6)
        .height(4),
        stat_panel(
            "MIG-enabled GPUs",
            "Physical GPUs with at least one MIG instance.",
            target(f"count({MIG_GPUS}) or vector(0)"),
        )
        .span(6)
        .height(4),
        stat_panel(
            "Instances held by pods",
            "MIG instances some container holds (gpu_allocation_share on a GPU_I_ID).",
            target(f"count({per_instance('count', 'gpu_allocation_share')}) or vector(0)"),
        )
        .span(6)
        .height(4),
        ratio(
            stat_panel(
                "MIG capacity held",
                "Sum of gpu_allocation_share on MIG instances over the number of MIG-enabled GPUs: "
                "the share of the physical GPUs' compute slices (of each GPU's: 7 on A100/H100, "
                "4 on A30) that pods hold.",
                target(f"sum(gpu_allocation_share{{{MIG_INSTANCES}}}) / count({MIG_GPUS})"),
            )
            .span(6)
            .height(4)
        ),
        basic_bars(
            bargauge_panel(
                "Instances per GPU",
                "MIG instances on each physical GPU.",
                target(MIG_GPUS, "{{Hostname}} GPU {{gpu}}", instant=True),
            )
        ),
        basic_bars(
            bargauge_panel(
                "Instances by profile",
                "MIG instances per profile (GPU_I_PROFILE) over the selected GPUs.",
                target(
                    f"count by (GPU_I_PROFILE) (gpu_mig_instance_info{{{MIG_INSTANCES}}})",
                    "{{GPU_I_PROFILE}}",
                    instant=True,
                ),
            )
        ),
        table_panel(
            "MIG instances",
            "Every MIG instance now: profile, GPU and compute instance ids, MIG UUID, compute "
            "slices and memory slices, and the GPU's (gpu_compute_slices, gpu_memory_slices).",
            target(
                "max by (Hostname, gpu, modelName, GPU_I_PROFILE, GPU_I_ID, GPU_CI_ID, "
                "mig_uuid, compute_slices, memory_slices) "
                f"(gpu_mig_instance_info{{{MIG_INSTANCES}}})",
                table=True,
            ),
            columns={},
            hide=("Time", "Value"),
        ).span(24),
        table_panel(
            "Instance holders",
            "Which container holds which MIG instance, and its share of the physical GPU.",
            target(
                f"sum by ({PER_MIG_INSTANCE}, namespace, pod, container) "
                f"(gpu_allocation_share{{{MIG_INSTANCES}}})",
                table=True,
            ),
            columns={"Value": "Share of GPU"},
        ),
        table_panel(
            "Unallocated instances",
            "MIG instances no container holds: idle capacity the cost service reports as idle.",
            target(
                f"{per_instance('count', 'gpu_mig_instance_info')} unless on (Hostname, gpu, "
                f"GPU_I_ID) gpu_allocation_share{{{MIG_INSTANCES}}}",
                table=True,
            ),
            columns={},
            hide=("Time", "Value"),
        ),
    ]


def activity() -> list[Panel]:
    return [
        ratio(
            timeseries_panel(
                "Graphics engine activity per instance",
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE per GPU instance: ratio of time the graphics engine "
                "of the instance was active.",
                target(per_instance("avg", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"), GI_LEGEND),
            )
        ),
        ratio(
            timeseries_panel(
                "SM active per instance",
                "DCGM_FI_PROF_SM_ACTIVE per GPU instance.",
                target(per_instance("avg", "DCGM_FI_PROF_SM_ACTIVE"), GI_LEGEND),
            )
        ),
        table_panel(
            "Least active instances",
            "Mean DCGM_FI_PROF_GR_ENGINE_ACTIVE over the time range, lowest first.",
            target(
                f"bottomk(10, avg by ({PER_MIG_INSTANCE}) "
                f"(avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{MIG_INSTANCES}}}[$__range])))",
                table=True,
            ),
            columns={"Value": "Mean activity"},
        )
        .unit(units.PercentUnit)
        .cell_options(common.TableColorTextCellOptions())
        .span(8),
        ratio(
            timeseries_panel(
                "Instance activity by holder",
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE of each MIG instance held by one container, "
                "with its namespace and pod. NVML gives no per-process utilisation on MIG "
                "instances, so this is the instance's own activity (GPM: Hopper and newer; an "
                "A100 instance has none).",
                target(
                    f"max by ({PER_MIG_INSTANCE}, namespace, pod) "
                    f'(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{MIG_INSTANCES}, pod!=""}})',
                    "{{namespace}}/{{pod}} GI {{GPU_I_ID}}",
                ),
            ).span(16)
        ),
    ]


def memory() -> list[Panel]:
    return [
        timeseries_panel(
            "Framebuffer used per instance",
            "DCGM_FI_DEV_FB_USED (MiB) per GPU instance.",
            target(per_instance("sum", "DCGM_FI_DEV_FB_USED"), GI_LEGEND),
        )
        .unit(units.Mebibytes)
        .min(0),
        ratio(
            timeseries_panel(
                "Framebuffer used per instance (share)",
                "DCGM_FI_DEV_FB_USED / DCGM_FI_DEV_FB_TOTAL per GPU instance.",
                target(
                    f"{per_instance('sum', 'DCGM_FI_DEV_FB_USED')}"
                    f" / {per_instance('sum', 'DCGM_FI_DEV_FB_TOTAL')}",
                    GI_LEGEND,
                ),
            )
        ),
    ]
