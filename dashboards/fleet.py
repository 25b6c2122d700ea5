"""GPU fleet: are my GPUs healthy and busy? (gpu-exporter, DCGM-compatible series)"""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models import units

from dashboards.common import (
    Panel,
    add_row,
    bargauge_panel,
    bars,
    board,
    collapsed_row,
    finish,
    percent,
    query_variable,
    ratio,
    stat_panel,
    table_panel,
    target,
    thresholds,
    timeseries_panel,
    up_panel,
    value_columns,
)
from dashboards.selectors import EXPORTERS, FLEET_GPUS, NOT_IDLE_REASON, PER_GPU

GPU_LEGEND = "{{Hostname}} GPU {{gpu}}"
VIOLATIONS = ("POWER", "THERMAL", "SYNC_BOOST", "BOARD_LIMIT", "LOW_UTIL", "RELIABILITY")
ECC = {
    "SBE_VOL": "Volatile SBE",
    "DBE_VOL": "Volatile DBE",
    "SBE_AGG": "Aggregate SBE",
    "DBE_AGG": "Aggregate DBE",
}
REMAPPED_ROWS = {
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "Correctable remapped",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "Uncorrectable remapped",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "Remap pending",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "Remap failed",
}
NVLINK = ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")


def per_gpu(aggregation: str, metric: str, tail: str = "") -> str:
    """`aggregation by (Hostname, gpu) (metric{selected GPUs})`, e.g. max per GPU."""
    return f"{aggregation} by ({PER_GPU}) ({metric}{{{FLEET_GPUS}}}){tail}"


def rate_per_gpu(metric: str, tail: str = "") -> str:
    return f"sum by ({PER_GPU}) (rate({metric}{{{FLEET_GPUS}}}[$__rate_interval])){tail}"


def xid_events(window: str) -> str:
    """XID events per GPU and code over ``window``: the counter's increase, and the whole
    count of a series born in the window (a code's first XID makes its series, at 1, and
    increase() never sees it: the GPUCriticalXID alert counts it the same way)."""
    sel = f"gpu_xid_errors_total{{{FLEET_GPUS}}}"
    born = f"({sel} unless {sel} offset {window})"
    return f"(increase({sel}[{window}]) unless on ({PER_GPU}, UUID, xid) {born}) or {born}"


def fleet() -> models.Dashboard:
    b = board(
        "gpu-finops-fleet",
        "GPU fleet",
        "Per node and per GPU: utilisation, framebuffer memory, power, energy, temperatures, "
        "clocks, throttling, XID/ECC/row-remap errors and exporter health (gpu-exporter, "
        "DCGM-compatible series).",
        ["gpu", "dcgm"],
        [
            query_variable(
                "modelName",
                "GPU model",
                'label_values(gpu_device_up{cluster=~"$cluster"}, modelName)',
            ),
            query_variable(
                "Hostname",
                "Node",
                'label_values(gpu_device_up{cluster=~"$cluster", modelName=~"$modelName"}, '
                "Hostname)",
            ),
            query_variable(
                "gpu",
                "GPU",
                'label_values(gpu_device_up{cluster=~"$cluster", modelName=~"$modelName", '
                'Hostname=~"$Hostname"}, gpu)',
            ),
            query_variable(
                "job",
                "Exporter job",
                'label_values(gpu_exporter_build_info{cluster=~"$cluster"}, job)',
            ),
        ],
        "gpu_device_up",
    )
    add_row(b, "Overview", overview())
    add_row(b, "Utilisation", utilisation())
    add_row(b, "Framebuffer memory", framebuffer_memory())
    add_row(b, "Power and temperature", power_and_temperature())
    add_row(b, "Clocks", clocks())
    b.with_row(collapsed_row("Throttling", throttling()))
    b.with_row(collapsed_row("Errors: XID, ECC, remapped rows, PCIe, NVLink", errors()))
    add_row(b, "Health", health())
    return finish(b)


def overview() -> list[Panel]:
    return [
        stat_panel(
            "GPUs up",
            "GPUs whose last NVML read succeeded (gpu_device_up = 1).",
            target(f"sum(gpu_device_up{{{FLEET_GPUS}}})"),
        )
        .span(4)
        .height(4),
        stat_panel(
            "GPUs lost",
            "GPUs the exporter knows but could not read at the last collection "
            "(gpu_device_up = 0).",
            target(f"count(gpu_device_up{{{FLEET_GPUS}}} == 0) or vector(0)"),
        )
        .thresholds(thresholds((1, "red")))
        .span(4)
        .height(4),
        percent(
            stat_panel(
                "Mean GPU utilisation",
                "Average of DCGM_FI_DEV_GPU_UTIL over the selected GPUs.",
                target(f"avg(DCGM_FI_DEV_GPU_UTIL{{{FLEET_GPUS}}})"),
            )
            .span(4)
            .height(4)
        ),
        ratio(
            stat_panel(
                "Framebuffer used",
                "Framebuffer memory used over framebuffer total, all selected GPUs (MIG instances "
                "included).",
                target(
                    f"sum(DCGM_FI_DEV_FB_USED{{{FLEET_GPUS}}})"
                    f" / sum(DCGM_FI_DEV_FB_TOTAL{{{FLEET_GPUS}}})"
                ),
            )
            .thresholds(thresholds((0.9, "orange"), (0.97, "red")))
            .span(4)
            .height(4)
        ),
        stat_panel(
            "Power draw",
            "Sum of DCGM_FI_DEV_POWER_USAGE over the selected GPUs.",
            target(f"sum(DCGM_FI_DEV_POWER_USAGE{{{FLEET_GPUS}}})"),
        )
        .unit(units.Watt)
        .span(4)
        .height(4),
        stat_panel(
            "Energy in time range",
            "Energy the selected GPUs used over the dashboard time range: increase of "
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ) / 3.6e9 = kWh.",
            target(
                "sum(increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
                f"{{{FLEET_GPUS}}}[$__range])) / 3.6e9",
                instant=True,
            ),
        )
        .unit(units.KiloWattHour)
        .decimals(2)
        .span(4)
        .height(4),
    ]


def utilisation() -> list[Panel]:
    return [
        percent(
            timeseries_panel(
                "GPU utilisation",
                "DCGM_FI_DEV_GPU_UTIL: percent of time a kernel ran on the GPU, per GPU.",
                target(per_gpu("avg", "DCGM_FI_DEV_GPU_UTIL"), GPU_LEGEND),
            )
        ),
        percent(
            timeseries_panel(
                "Memory copy utilisation",
                "DCGM_FI_DEV_MEM_COPY_UTIL: percent of time device memory was read or written.",
                target(per_gpu("avg", "DCGM_FI_DEV_MEM_COPY_UTIL"), GPU_LEGEND),
            )
        ),
        ratio(
            timeseries_panel(
                "SM active and tensor pipe active",
                "Profiling ratios from NVML GPM (Hopper and newer): DCGM_FI_PROF_SM_ACTIVE and "
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, averaged per GPU (over MIG instances too).",
                target(per_gpu("avg", "DCGM_FI_PROF_SM_ACTIVE"), GPU_LEGEND + " SM active"),
                target(per_gpu("avg", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"), GPU_LEGEND + " tensor"),
            )
        ),
        percent(
            timeseries_panel(
                "Encoder and decoder utilisation",
                "DCGM_FI_DEV_ENC_UTIL and DCGM_FI_DEV_DEC_UTIL per GPU.",
                target(per_gpu("avg", "DCGM_FI_DEV_ENC_UTIL"), GPU_LEGEND + " enc"),
                target(per_gpu("avg", "DCGM_FI_DEV_DEC_UTIL"), GPU_LEGEND + " dec"),
            )
        ),
    ]


def framebuffer_memory() -> list[Panel]:
    return [
        timeseries_panel(
            "Framebuffer used",
            "DCGM_FI_DEV_FB_USED (MiB) per GPU; on a MIG GPU the sum over its instances.",
            target(per_gpu("sum", "DCGM_FI_DEV_FB_USED"), GPU_LEGEND),
        )
        .unit(units.Mebibytes)
        .min(0),
        ratio(
            timeseries_panel(
                "Framebuffer used (share of total)",
                "DCGM_FI_DEV_FB_USED / DCGM_FI_DEV_FB_TOTAL per GPU.",
                target(
                    f"{per_gpu('sum', 'DCGM_FI_DEV_FB_USED')}"
                    f" / {per_gpu('sum', 'DCGM_FI_DEV_FB_TOTAL')}",
                    GPU_LEGEND,
                ),
            )
        ),
    ]


def power_and_temperature() -> list[Panel]:
    return [
        timeseries_panel(
            "Power draw",
            "DCGM_FI_DEV_POWER_USAGE per GPU, with the enforced power limit.",
            target(per_gpu("max", "DCGM_FI_DEV_POWER_USAGE"), GPU_LEGEND),
            target(per_gpu("max", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT"), GPU_LEGEND + " limit"),
        )
        .unit(units.Watt)
        .min(0),
        timeseries_panel(
            "Energy rate",
            "rate() of DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ/s) / 1000 = average power in W "
            "over the rate window, per GPU.",
            target(rate_per_gpu("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", " / 1000"), GPU_LEGEND),
        )
        .unit(units.Watt)
        .min(0),
        bargauge_panel(
            "Energy per node in time range",
            "increase of DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ) over the time range, per "
            "node, in kWh.",
            target(
                "sum by (Hostname) (increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
                f"{{{FLEET_GPUS}}}[$__range])) / 3.6e9",
                "{{Hostname}}",
                instant=True,
            ),
        )
        .unit(units.KiloWattHour)
        .decimals(2)
        .span(8),
        timeseries_panel(
            "GPU temperature",
            "DCGM_FI_DEV_GPU_TEMP per GPU.",
            target(per_gpu("max", "DCGM_FI_DEV_GPU_TEMP"), GPU_LEGEND),
        )
        .unit(units.Celsius)
        .thresholds(thresholds((80, "orange"), (90, "red")))
        .span(8),
        timeseries_panel(
            "Memory temperature",
            "DCGM_FI_DEV_MEMORY_TEMP (HBM) per GPU.",
            target(per_gpu("max", "DCGM_FI_DEV_MEMORY_TEMP"), GPU_LEGEND),
        )
        .unit(units.Celsius)
        .thresholds(thresholds((85, "orange"), (95, "red")))
        .span(8),
    ]


def clocks() -> list[Panel]:
    return [
        timeseries_panel(
            "SM clock",
            "DCGM_FI_DEV_SM_CLOCK (MHz) per GPU.",
            target(per_gpu("max", "DCGM_FI_DEV_SM_CLOCK", " * 1e6"), GPU_LEGEND),
        ).unit(units.Hertz),
        timeseries_panel(
            "Memory clock",
            "DCGM_FI_DEV_MEM_CLOCK (MHz) per GPU.",
            target(per_gpu("max", "DCGM_FI_DEV_MEM_CLOCK", " * 1e6"), GPU_LEGEND),
        ).unit(units.Hertz),
    ]


def throttling() -> list[Panel]:
    return [
        bars(
            timeseries_panel(
                "Clock event reasons active",
                "gpu_clock_event_reason_active: 1 while a reason holds the clocks down "
                "(gpu_idle left out: it is the normal state of an idle GPU).",
                target(
                    f"max by ({PER_GPU}, reason) (gpu_clock_event_reason_active"
                    f"{{{FLEET_GPUS}, {NOT_IDLE_REASON}}}) > 0",
                    GPU_LEGEND + " {{reason}}",
                ),
            )
        )
        .min(0)
        .max(1),
        timeseries_panel(
            "Throttled time by cause",
            "rate() of the DCGM_FI_DEV_*_VIOLATION counters (ns, as DCGM 4.x) / 1e9: the "
            "fraction of time each constraint held the clocks down.",
            *(
                target(
                    rate_per_gpu(f"DCGM_FI_DEV_{v}_VIOLATION", " / 1e9"),
                    f"{GPU_LEGEND} {v.lower()}",
                )
                for v in VIOLATIONS
            ),
        )
        .unit(units.PercentUnit)
        .min(0),
        table_panel(
            "Clock throttle reasons (bitmask)",
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS now: bitmask of "
            "DCGM_CLOCKS_THROTTLE_REASON_* (1 = GPU idle, 4 = SW power cap, 8 = HW "
            "slowdown, 32 = SW thermal, 64 = HW thermal, 128 = power brake).",
            target(
                f"max by ({PER_GPU}, modelName) "
                f"(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{{{FLEET_GPUS}}})",
                table=True,
            ),
            columns={"Value": "Reasons bitmask"},
        ).span(24),
    ]


def errors() -> list[Panel]:
    return [
        bars(
            timeseries_panel(
                "XID errors by code",
                "gpu_xid_errors_total: XID events per rate window, by GPU and XID code (a "
                "code's first XID included). Empty when no XID happened in the window.",
                target(
                    f"sum by ({PER_GPU}, xid) ({xid_events('$__rate_interval')}) > 0",
                    GPU_LEGEND + " XID {{xid}}",
                ),
            )
        ),
        table_panel(
            "Last XID per GPU",
            "DCGM_FI_DEV_XID_ERRORS: the last XID code seen per GPU (0 until one is seen), "
            "and XID events in the time range.",
            target(per_gpu("max", "DCGM_FI_DEV_XID_ERRORS"), table=True),
            target(
                f"sum by ({PER_GPU}) ({xid_events('$__range')})",
                table=True,
            ),
            columns=value_columns("Last XID", "XID events in range"),
        ),
        table_panel(
            "ECC errors",
            "DCGM_FI_DEV_ECC_*_TOTAL: single-bit (corrected) and double-bit (uncorrected) "
            "ECC errors, volatile (since driver load) and aggregate (lifetime), current "
            "totals.",
            *(target(per_gpu("max", f"DCGM_FI_DEV_ECC_{k}_TOTAL"), table=True) for k in ECC),
            columns=value_columns(*ECC.values()),
        ).thresholds(thresholds((1, "orange"))),
        table_panel(
            "Remapped rows",
            "Row remapping per GPU: rows remapped for correctable and uncorrectable errors, "
            "a pending remap (reset the GPU) and a failed remap (replace the GPU).",
            *(target(per_gpu("max", m), table=True) for m in REMAPPED_ROWS),
            columns=value_columns(*REMAPPED_ROWS.values()),
        ).thresholds(thresholds((1, "red"))),
        timeseries_panel(
            "PCIe replays",
            "rate() of DCGM_FI_DEV_PCIE_REPLAY_COUNTER: PCIe retries per second.",
            target(rate_per_gpu("DCGM_FI_DEV_PCIE_REPLAY_COUNTER"), GPU_LEGEND),
        ).unit(units.Short),
        timeseries_panel(
            "NVLink errors",
            "rate() of the DCGM_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL counters (all links), "
            "errors per second.",
            *(
                target(
                    rate_per_gpu(f"DCGM_FI_DEV_NVLINK_{k}_ERROR_COUNT_TOTAL"),
                    f"{GPU_LEGEND} {k.lower()}",
                )
                for k in NVLINK
            ),
        ).unit(units.Short),
    ]


def health() -> list[Panel]:
    return [
        up_panel(
            "GPU up",
            "gpu_device_up per GPU: UP when the last NVML read of the GPU succeeded.",
            target(per_gpu("max", "gpu_device_up"), GPU_LEGEND),
        )
        .span(24)
        .height(5),
        up_panel(
            "Exporter NVML up",
            "gpu_exporter_nvml_up per exporter: 1 while NVML is initialised.",
            target(
                f"min by (cluster, instance) (gpu_exporter_nvml_up{{{EXPORTERS}}})",
                "{{instance}}",
            ),
        )
        .span(8)
        .height(5),
        up_panel(
            "Exporter scrape up",
            "Prometheus `up` for the exporter targets.",
            target(f"up{{{EXPORTERS}}}", "{{instance}}"),
        )
        .span(8)
        .height(5),
        stat_panel(
            "Since last successful NVML read",
            "time() - gpu_exporter_last_success_timestamp_seconds per exporter (exporters that "
            "never read NVML successfully report 0 and are left out).",
            target(
                "time() - max by (instance) "
                f"(gpu_exporter_last_success_timestamp_seconds{{{EXPORTERS}}} > 0)",
                "{{instance}}",
            ),
        )
        .unit(units.Seconds)
        .thresholds(thresholds((60, "orange"), (300, "red")))
        .span(8)
        .height(5),
        timeseries_panel(
            "Collection duration",
            "gpu_exporter_last_collection_duration_seconds: time to read every device in one "
            "collection.",
            target(
                f"max by (instance) (gpu_exporter_last_collection_duration_seconds{{{EXPORTERS}}})",
                "{{instance}}",
            ),
        ).unit(units.Seconds),
        timeseries_panel(
            "Exporter errors",
            "rate() of gpu_exporter_errors_total by source and kind (only non-zero rates).",
            target(
                "sum by (instance, source, kind) "
                f"(rate(gpu_exporter_errors_total{{{EXPORTERS}}}[$__rate_interval])) > 0",
                "{{instance}} {{source}}/{{kind}}",
            ),
        ).unit(units.Short),
    ]
