"""Write docs/metrics.md from the exporter's series catalogue.

Run: python scripts/gen_metrics_doc.py

The tests fail when the committed file differs from what this prints, so the table of series
cannot drift from the code.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from exporter import catalogue as cat  # noqa: E402
from exporter.nvml.library import CLOCK_EVENT_REASONS  # noqa: E402

LABELS = "`gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`, `DCGM_FI_DRIVER_VERSION`"

SELF = [
    ("gpu_exporter_build_info", "gauge", "1", "version, python_version, nvml_bindings, mode",
     "Always 1; the labels say what is running."),
    ("gpu_exporter_collections_total", "counter", "1", "", "Collections run since start."),
    ("gpu_exporter_collection_duration_seconds", "histogram", "s", "",
     "Time to read every device in one collection (NVML calls only)."),
    ("gpu_exporter_last_collection_duration_seconds", "gauge", "s", "",
     "The same, for the last collection."),
    ("gpu_exporter_last_render_duration_seconds", "gauge", "s", "",
     "Time the previous collection spent rendering the exposition."),
    ("gpu_exporter_last_success_timestamp_seconds", "gauge", "s (Unix time)", "",
     "When NVML was last read successfully; 0 before the first success."),
    ("gpu_exporter_nvml_up", "gauge", "bool", "", "1 while NVML is initialised."),
    ("gpu_exporter_gpus", "gauge", "1", "", "GPUs found at the last discovery."),
    ("gpu_exporter_unknown_device_ids", "gauge", "1", "",
     "Device ids the kubelet reported at the last collection that match no GPU or MIG instance "
     "of this node (counted, never guessed)."),
    ("gpu_exporter_errors_total", "counter", "1", "source, kind",
     "Errors by source and kind: `nvml` (`init`, `gpu_lost`, `query`), `pod_resources` "
     "(`unavailable`, `timeout`, `other`), `kubernetes` (`list`, `watch`), `proc` (`read`), "
     "`exporter` (`internal`); every pair exists from the start at 0."),
    ("process_*", "various", "", "",
     "prometheus_client's process collector: CPU seconds, resident memory, open fds, start time."),
]  # fmt: skip

HEAD = f"""# gpu-exporter metrics

Generated from `exporter/catalogue.py` by `scripts/gen_metrics_doc.py`; a test keeps the two
in step. Every per-GPU series carries the DCGM label set {LABELS}. A GPU's series are absent
when the GPU does not support the field (never a made-up 0) and while the GPU is lost
(`gpu_device_up 0`).

## Formats

`/metrics` answers in the Prometheus text format 0.0.4, or in OpenMetrics 1.0.0 when the
scraper lists `application/openmetrics-text` in `Accept` (Prometheus does), gzip-compressed
when it accepts gzip. Both are rendered once per collection; a scrape never calls NVML.

The DCGM-compatible counters keep dcgm-exporter's names, which lack the `_total` suffix. In
the text format they are typed `counter`, as dcgm-exporter types them. OpenMetrics requires
counter samples to end in `_total`, so there they are typed `unknown` and keep their names:
the series stored by Prometheus are named exactly as dcgm-exporter's, and `rate()` works on
them either way. For the same reason `promtool check metrics` reports three kinds of style
lint on DCGM series and only there: counters without `_total`, the camelCase label
`modelName`, and `counter` in `DCGM_FI_DEV_PCIE_REPLAY_COUNTER`. Our own series lint clean.

## DCGM-compatible series

| Series | Type | Unit | Collector | NVML source | Help |
|---|---|---|---|---|---|
"""


def row(*cells: str) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |\n"


def render() -> str:
    out = [HEAD]
    for s in cat.SCALAR_SERIES:
        out.append(row(f"`{s.name}`", s.kind, s.unit, f"`{s.collector}`", s.source, s.help))
    for counter, base in cat.NVLINK_DCGM_NAMES.items():
        out.append(
            row(
                f"`{base}_TOTAL`",
                "counter",
                "1",
                "`nvlink`",
                f"nvmlDeviceGetFieldValues({base.replace('DCGM_FI_DEV', 'NVML_FI_DEV')}_TOTAL)",
                f"{cat.NVLINK_HELP[counter]} total for all links.",
            )
        )
        out.append(
            row(
                f"`{base}_L0` … `{base}_L17`",
                "counter",
                "1",
                "`nvlink_links`",
                f"nvmlDeviceGetNvLinkErrorCounter(link, {counter})",
                f"{cat.NVLINK_HELP[counter]} for one link; only links active at discovery.",
            )
        )
    out.append(
        "\n## Our own per-GPU series\n\n| Series | Type | Unit | Collector | Source | Extra labels"
        " | Help |\n|---|---|---|---|---|---|---|\n"
    )
    holder = "`namespace`, `pod`, `container`"
    mig = "`GPU_I_PROFILE`, `GPU_I_ID` on MIG instances; "
    extra = {
        cat.XID_COUNTER.name: "`xid`",
        cat.CLOCK_EVENT_ACTIVE.name: "`reason`",
        cat.DEVICE_INFO.name: "`serial`, `vbios_version`",
        cat.MIG_INSTANCE_INFO.name: "`GPU_I_PROFILE`, `GPU_I_ID`, `GPU_CI_ID`, `mig_uuid`, "
        "`compute_slices`, `memory_slices`",
        cat.ALLOCATION_SHARE.name: mig + holder + ", `resource`",
        cat.CONTAINER_SM.name: mig + holder,
        cat.CONTAINER_MEMORY.name: mig + holder,
    }
    for s in (
        cat.DEVICE_UP,
        cat.DEVICE_INFO,
        cat.MIG_INSTANCE_INFO,
        cat.ALLOCATION_SHARE,
        cat.CONTAINER_SM,
        cat.CONTAINER_MEMORY,
        cat.UNATTRIBUTED,
        cat.XID_COUNTER,
        cat.CLOCK_EVENT_ACTIVE,
    ):
        collector = "always" if s in (cat.DEVICE_UP, cat.DEVICE_INFO) else f"`{s.collector}`"
        out.append(
            row(f"`{s.name}`", s.kind, s.unit, collector, s.source, extra.get(s.name, ""), s.help)
        )
    out.append(
        "\nOn a MIG-enabled GPU the memory (`DCGM_FI_DEV_FB_*`) and profiling "
        "(`DCGM_FI_PROF_*`) series are per instance, with `GPU_I_PROFILE` and `GPU_I_ID`; the "
        "device-only series (power, temperatures, clocks, energy, errors) are emitted once for "
        "the physical GPU and never per instance. A device held by exactly one container has "
        "`namespace`, `pod` and `container` on its series; a device several containers share "
        "(time-slicing, or a MIG GPU's device-only series) never does.\n"
    )
    out.append(
        "\n`gpu_clock_event_reason_active` has one series per reason: "
        + ", ".join(f"`{r}`" for r in sorted(_reasons()))
        + ".\n\n`gpu_xid_errors_total` counts the XID events seen since the exporter started "
        "(NVML delivers events only to a registered listener); `DCGM_FI_DEV_XID_ERRORS` is the "
        "last XID code, 0 until one is seen.\n"
    )
    out.append(
        "\n## Exporter self-metrics\n\n| Series | Type | Unit | Labels | Help |\n"
        "|---|---|---|---|---|\n"
    )
    for name, kind, unit, labels, help_text in SELF:
        out.append(row(f"`{name}`", kind, unit, labels, help_text))
    out.append(
        "\n## Collectors\n\nEach can be switched with `--collector.<name>` / "
        "`--no-collector.<name>` (environment: `GPU_EXPORTER_COLLECTOR_<NAME>=true|false`); "
        "on by default: "
        + ", ".join(f"`{c}`" for c in cat.COLLECTORS if c not in cat.OFF_BY_DEFAULT)
        + "; off by default: "
        + ", ".join(f"`{c}`" for c in cat.COLLECTORS if c in cat.OFF_BY_DEFAULT)
        + " (per-link NVLink counters: 72 series and 72 NVML calls per NVLink GPU per "
        "collection; the `_TOTAL` counters come from one field-values call).\n"
    )
    return "".join(out)


def _reasons() -> list[str]:
    return list(CLOCK_EVENT_REASONS)


if __name__ == "__main__":
    (ROOT / "docs" / "metrics.md").write_text(render(), encoding="utf-8")
