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

LABELS = (
    "`gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname` (`hostname` with "
    "`--hostname-label hostname`), `DCGM_FI_DRIVER_VERSION`"
)

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
    ("gpu_exporter_finished_pod_device_ids", "gauge", "1", "",
     "Device ids the kubelet listed at the last collection for pods whose phase is Succeeded "
     "or Failed (kubernetes#119423); never attributed."),
    ("gpu_exporter_dra_devices", "gauge", "1", "`outcome`",
     "Devices the kubelet reported held through DRA claims, by outcome: `gpu` (found in a "
     "ResourceSlice of a GPU driver), `other_driver` (ignored), `not_in_slice` (never "
     "guessed), `no_uuid` (slice device without a `uuid`, or a GPU and MIG profile to match "
     "it by)."),
    ("gpu_exporter_errors_total", "counter", "1", "source, kind",
     "Errors by source and kind: `nvml` (`init`, `gpu_lost`, `query`, `timeout`: a GPU read "
     "not back within three collection intervals, `no_permission`: e.g. the MIG GPU-instance "
     "lookup without the MIG monitor capability, `mig_geometry`: a MIG GPU whose slices NVML "
     "does not tell, whose instances then get no `gpu_allocation_share`), `pod_resources` "
     "(`unavailable`, `timeout`, `other`), `kubernetes` (`list`, `watch`), `proc` (`read`, "
     "`missing`: no /proc at `--path.procfs`, `not_found`: a GPU process absent from it), "
     "`exporter` (`internal`); every pair exists from the start at 0."),
    ("process_*", "various", "", "",
     "prometheus_client's process collector: CPU seconds, resident memory, open fds, start time."),
]  # fmt: skip

HEAD = f"""# gpu-exporter metrics

Generated from `exporter/catalogue.py` by `scripts/gen_metrics_doc.py`; a test keeps the two
in step. Every per-GPU series carries the DCGM label set {LABELS}. A GPU's series are absent
when the GPU does not support the field (never a made-up 0), and its value series while the
GPU is down (`gpu_device_up 0`: lost, or NVML not answering); its XID series stay, they say
why.

## Formats

`/metrics` answers in the Prometheus text format 0.0.4 to every scraper that accepts it, and
in OpenMetrics 1.0.0 only to one that accepts nothing else; gzip-compressed when the scraper
accepts gzip. Both are rendered once per collection; a scrape never calls NVML.

Why text first: the DCGM counters (energy, PCIe replays, ECC totals, remapped rows, NVLink
errors and bandwidth, violations) keep dcgm-exporter's names, which lack the `_total` suffix.
In text 0.0.4 a family `# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter` may have a sample
of that very name, and Prometheus records the family as `counter` (its `/api/v1/metadata`
says so; a test checks it against a real Prometheus). OpenMetrics requires a counter's samples
to end in `_total`, so there those families can only be `unknown` under their names, or
`counter` under names dashboards do not know. Prometheus lists OpenMetrics first in its
`Accept` header and text 0.0.4 after it (`q=0.5`), so it gets text; dcgm-exporter serves text
too. What is lost is nothing we publish: no exemplars, no `_created` series. A scraper that
accepts only OpenMetrics (e.g. `scrape_protocols: [OpenMetricsText1.0.0]`) gets it, with those
counters typed `unknown` and named as in dcgm-exporter. For the same reason `promtool check
metrics` reports three kinds of style lint on DCGM series and only there: counters without
`_total`, the camelCase label `modelName`, and `counter` in `DCGM_FI_DEV_PCIE_REPLAY_COUNTER`.
Our own series lint clean.

Units are DCGM 4.x's (`dcgm_fields.h`, DCGM 4.6; help texts as in dcgm-exporter 4.5.3-4.8.2
`etc/default-counters.csv`): violation counters in **ns** (NVML's `violationTime`);
`DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL` in **MB/s** — DCGM reads NVML's NVLink data counters (KiB,
all links, RX + TX) and publishes their growth per second / 1000, so although dcgm-exporter
types it `counter` its value is a rate: plot it as it is, not through `rate()`. Like every rate
here it needs two reads, so it appears from the second collection on.

## DCGM-compatible series

| Series | Type | Unit | Collector | NVML source | Help |
|---|---|---|---|---|---|
"""


def row(*cells: str) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |\n"


ALLOCATION_PATHS = """
## Every way a GPU is handed out

The exporter reads one kubelet pod-resources `List` answer per collection and finds holdings
three ways, side by side; each gives `gpu_allocation_share` (compute basis) and
`gpu_allocation_memory_share` (memory basis) per (device unit, container):

| Path | Where it is read | `resource` label | compute share | memory share |
|---|---|---|---|---|
| device plugin, whole GPU / MIG / time-slice | `ContainerResources.devices` | the extended resource (`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`, …) | 1 · compute slices / the GPU's · 1/replicas | 1 · memory slices / the GPU's · 1/replicas |
| DRA resource claim | `ContainerResources.dynamic_resources` (field 5: claim → driver, pool, device), the device looked up in this node's `ResourceSlice`s (`resource.k8s.io/v1`: attributes `type`, `uuid`, `parentUUID`, `profile` of NVIDIA's `gpu.nvidia.com` driver) | the DRA driver (`gpu.nvidia.com`) | the device's share (GPU 1, MIG compute slices / the GPU's) / the containers holding it through claims | the same on memory (MIG memory slices / the GPU's) |
| HAMi | the pod annotation `hami.io/vgpu-devices-allocated` (`UUID,NVIDIA,MiB,cores:` per device, `;` between containers) of a container the kubelet lists | `nvidia.com/gpu` | cores/100; no core limit (cores 0): the memory share | MiB / the GPU's memory |
| memory-profile vGPU | `devices` of a resource named in `--pod-resources.vgpu-profiles RESOURCE=MiB` | that resource | the memory share | profile MiB / the GPU's memory |

Side by side (GPU labels shortened to `…`):

```
# a device plugin's whole GPU
gpu_allocation_share{…,namespace="ml",pod="train-0",container="main",resource="nvidia.com/gpu"} 1
# one DRA claim shared by three pods: a third each
gpu_allocation_share{…,namespace="ml-serving",pod="chat-a",container="server",resource="gpu.nvidia.com",claim_namespace="ml-serving",claim="shared-gpu",pod_uid="63b9b237-…"} 0.3333333333333333
# HAMi: 30 % of the cores and 16000 of 81559 MiB
gpu_allocation_share{…,namespace="vision",pod="ocr-30",container="server",resource="nvidia.com/gpu"} 0.3
gpu_allocation_memory_share{…,namespace="vision",pod="ocr-30",container="server",resource="nvidia.com/gpu"} 0.19617699088022167
```

A DRA holding also carries `claim_namespace`, `claim` and (where the pod is known to the pod
watch) `pod_uid`, on `gpu_allocation_share`, `gpu_allocation_memory_share` and the
per-container usage series. A claim shared by several pods (or containers) is one device split
equally among them — three pods on one claim hold 1/3 each, never 1 each and never "the last
pod wins"; their SM usage is published per container, so the cost service's `usage` policy can
re-split it as for a time-sliced GPU. A MIG device allocated through DRA is a MIG holding
(`GPU_I_ID`, compute slices / the GPU's); a partitionable (dynamic-MIG) device, which its slice lists
without a UUID until the driver creates it, is matched by its `parentUUID` and `profile` to
the GPU's one MIG instance of that profile (with several, it is counted as an unknown device
id, never guessed). A device of a driver that is not a GPU driver is ignored and a
device in no ResourceSlice of this node is not guessed; both are counted in
`gpu_exporter_dra_devices`. A kubelet that sends no DRA fields (before 1.27, or with
`KubeletPodResourcesDynamicResources` off) simply gives no DRA holdings. The ResourceSlices
(and HAMi's annotations) come from the Kubernetes API: they are watched where the pod watch
runs (in a cluster, or with `--kubernetes.kubeconfig` / `--kubernetes.api-url`), with RBAC to
`get/list/watch` `resourceslices`; without it every DRA device counts as `not_in_slice`.

Shares held of one GPU add up to at most 1 on each basis, except where HAMi over-subscribes a
GPU (its memory or core totals scaled past the device): the shares are published as they are
and `gpu_allocation_oversubscribed{basis="compute"|"memory"}` is 1 for that GPU. The cost
service then scales the GPU's holdings so their money adds up to the GPU's cost
(docs/cost-model.md). A device held only fractionally never puts a pod's labels on the GPU's
own series.
"""  # noqa: E501 (the table's rows are one line each)


def render() -> str:
    out = [HEAD]
    for s in cat.SCALAR_SERIES:
        out.append(row(f"`{s.name}`", s.kind, s.unit, f"`{s.collector}`", s.source, s.help))
    x = cat.XID_LAST
    out.append(
        row(f"`{x.name}`", x.kind, x.unit, f"`{x.collector}`", x.source, x.help).replace(
            f"| {x.help} |", f"| {x.help} Extra labels `err_code`, `err_msg`. |"
        )
    )
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
    claim = "`claim_namespace`, `claim`, `pod_uid` (where the pod is known) on DRA holdings"
    started = "`started` (when the total started at 0)"
    extra = {
        cat.XID_COUNTER.name: "`xid`",
        cat.CLOCK_EVENT_ACTIVE.name: "`reason`",
        cat.DEVICE_INFO.name: "`serial`, `vbios_version`",
        cat.MIG_INSTANCE_INFO.name: "`GPU_I_PROFILE`, `GPU_I_ID`, `GPU_CI_ID`, `mig_uuid`, "
        "`compute_slices`, `memory_slices`",
        cat.ALLOCATION_SHARE.name: mig + holder + ", `resource`; " + claim,
        cat.ALLOCATION_MEMORY_SHARE.name: mig + holder + ", `resource`; " + claim,
        cat.ALLOCATION_OVERSUBSCRIBED.name: "`basis` (`compute`, `memory`)",
        cat.CONTAINER_SM.name: mig + holder + "; " + claim,
        cat.CONTAINER_MEMORY.name: mig + holder + "; " + claim,
        cat.DEVICE_SECONDS.name: "`state` (`up`, `down`), " + started,
        cat.CONTAINER_SM_SECONDS.name: mig + holder + ", " + started + "; " + claim,
        **{
            s.name: mig + holder + ", `resource`, " + started + "; " + claim
            for s in cat.INTEGRALS
            if s not in (cat.DEVICE_SECONDS, cat.CONTAINER_SM_SECONDS)
        },
        cat.ALLOCATION_SHARE_SECONDS.name: mig
        + holder
        + ", `resource`, `share` (the gpu_allocation_share integrated), "
        + started
        + "; "
        + claim,
    }
    for s in (
        cat.DEVICE_UP,
        cat.DEVICE_INFO,
        cat.MIG_INSTANCE_INFO,
        cat.ALLOCATION_SHARE,
        cat.ALLOCATION_MEMORY_SHARE,
        cat.ALLOCATION_OVERSUBSCRIBED,
        cat.CONTAINER_SM,
        cat.CONTAINER_MEMORY,
        cat.UNATTRIBUTED,
        cat.XID_COUNTER,
        cat.CLOCK_EVENT_ACTIVE,
        *cat.INTEGRALS,
    ):
        always = (cat.DEVICE_UP, cat.DEVICE_INFO, cat.DEVICE_SECONDS)
        collector = "always" if s in always else f"`{s.collector}`"
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
        + ".\n\n**Integrals at collection resolution** (`exporter/integrals.py`). The "
        "`…_seconds_total` counters add, at every collection, each value x the time it held: "
        "a share, a utilisation or a GPU's state holds from its collection to the next; a "
        "container's SM utilisation (NVML's mean since the last collection) covers the interval "
        "just ended; a gap longer than two collection intervals counts as one. So "
        "`increase(gpu_allocation_share_seconds_total[1h])` is the GPU-seconds a container held "
        "in that hour at the exporter's resolution (5 s by default), not the scrape's, and a "
        "missed scrape loses nothing. The busy share-seconds over the measured ones (the "
        "share-seconds less the unmeasured ones, which a holding has only from its first "
        "collection whose utilisation was not read) give the efficiency of the measured part; "
        "the share-seconds name the share they integrate (`share`), so a holding's largest share "
        "in an hour needs no read of the gauge; the share-seconds cut out the time the GPU was "
        "down, as the cost service does, and where a GPU's shares add up to more than 1 on a "
        "basis (over-subscribed) each is divided by their sum at that collection, as the cost "
        "service splits such a GPU. A series first seen starts at 0; a series no longer seen "
        "stays published at its final total for 600 s, so the next scrape sees its last "
        "interval, then is dropped — back later, it starts again at 0. Every counter carries "
        'the label `started`: when its total started at 0 (Unix seconds, e.g. `started="'
        '1764165600.000"`). A total that starts again — a holding back after its series was '
        "dropped, every series of a restarted exporter — is a new series, so no series' value "
        "ever goes down and the difference of any two of its scrapes is what it grew between "
        "them: the cost service reads no `resets` of these counters (costsvc/ingest/integrals.py"
        "). It tells what OpenMetrics' `_created` tells, without a second series per counter; "
        "`increase`, `rate` and `sum by (pod)` work as before.\n\n"
        "**XIDs** arrive from NVML's event set (`nvmlEventSetCreate`, "
        "`nvmlDeviceRegisterEvents` for `nvmlEventTypeXidCriticalError`, `nvmlEventSetWait_v2`) "
        "on a background thread, as they happen. `DCGM_FI_DEV_XID_ERRORS` is the last XID code "
        "(0 until one is seen) with dcgm-exporter 4.x's labels `err_code` (the code) and "
        "`err_msg` (its message from NVIDIA's XID catalogue, as dcgm-exporter's table has it; "
        "`Unknown Error` past it); `gpu_xid_errors_total` counts the XIDs seen since the "
        "exporter started, by code (NVML delivers events only to a registered listener). Both "
        "are published for lost and hung GPUs too: a GPU that falls off the bus shows XID 79 "
        "(`GPU has fallen off the bus`) next to `gpu_device_up 0`, from the driver's event or, "
        "when a read answers GPU_IS_LOST first, recorded once for that loss.\n"
        "\n**A GPU that stops answering.** Each GPU is read on its own thread, so a GPU whose "
        "NVML calls hang cannot stall the others or the collection. While its read is out, its "
        "previous values are served for at most **three collection intervals** (15 s at the "
        "default 5 s); past that the GPU is reported down: `gpu_device_up 0`, its value series "
        "left out, the stuck read counted once in "
        '`gpu_exporter_errors_total{source="nvml",kind="timeout"}`, and `/health` (still '
        "200 while collections are fresh) lists it as `degraded: GPU 3 (GPU-…): NVML has not "
        "answered for 16 s (bound 15 s)…`. When the driver answers again the next collection "
        "reads the GPU and brings its series back.\n"
        "\n**The kubelet not answering.** While the pod-resources API cannot be reached (its "
        "socket gone, as when the kubelet restarts or the hostPath is not mounted) or does not "
        "answer within its time-out, pods are not attributed, each failed call is counted in "
        '`gpu_exporter_errors_total{source="pod_resources"}`, and `/health` (still 200: '
        "restarting the exporter would not help) says so: `degraded: kubelet pod-resources: "
        "/var/lib/kubelet/pod-resources/kubelet.sock does not exist (pods are not "
        "attributed)`. The line goes with the first answer.\n"
        "\n**Profiling (`DCGM_FI_PROF_*`)** comes from NVML GPM, which exists on Hopper and "
        "newer GPUs only (`nvmlGpmQueryDeviceSupport`). An A100, L4 or T4 has no "
        "`DCGM_FI_PROF_*` series at all, and an A100 MIG instance has no activity series at "
        "all (no device utilisation in MIG mode, no GPM): the cost service then reports that "
        "holding's efficiency as unknown, never as 0 % or 100 %. dcgm-exporter reads these "
        "fields from the DCGM daemon's profiling module, which does support older GPUs.\n"
        "\n**MIG.** MIG mode is read every collection, so `nvidia-smi -mig 1` and the instances "
        "created after it are picked up without a restart: instance series appear within two "
        "collections. `GPU_I_PROFILE` is NVML's profile name (`3g.40gb`) where the GPU-instance "
        "lookup (`nvmlDeviceGetGpuInstanceById`) is allowed; it needs the MIG *monitor* "
        "capability (NVIDIA MIG user guide, Device Nodes and Capabilities: a process with "
        "`CAP_SYS_ADMIN` holds every nvidia-capability; in a container the NVIDIA container "
        "toolkit exposes `mig/monitor` when `NVIDIA_MIG_MONITOR_DEVICES=all` is set and the "
        "container has `CAP_SYS_ADMIN`, which is how NVIDIA deploys its device plugin). The "
        "DaemonSet in `deploy/` drops every capability, so there NVML answers NO_PERMISSION: "
        'each refused lookup is counted as `gpu_exporter_errors_total{source="nvml",'
        'kind="no_permission"}`, and the name and memory slices are derived from the MIG '
        "device's own attributes exactly as NVIDIA's device plugin derives them (go-nvlib "
        "`mig_profile.go`), so the name is still canonical (`3g.40gb`); only a `+me` suffix "
        "cannot be known then. Add `SYS_ADMIN` and `NVIDIA_MIG_MONITOR_DEVICES=all` in an "
        "overlay of your own to get NVML's own names and no such errors.\n"
        "\n**MIG geometry.** A MIG instance's share of its GPU is its slices over the GPU's: "
        "7 compute and 8 memory slices on an A100 or H100, 4 and 4 on an A30, other boards "
        "their own. The exporter reads the GPU's from NVML — the GPU-instance profile with "
        "the most slices (`nvmlDeviceGetGpuInstanceProfileInfo` of each "
        "`NVML_GPU_INSTANCE_PROFILE_*`) is the whole GPU; its memory slices are the size of its "
        "placement (`nvmlDeviceGetGpuInstancePossiblePlacements`, privileged) or its memory "
        "over the one-slice profile's — and publishes it as `gpu_compute_slices` and "
        "`gpu_memory_slices` on `gpu_mig_instance_info`, where the cost service reads it. "
        "Where NVML does not tell, those labels are empty, the instances get no shares and "
        '`gpu_exporter_errors_total{source="nvml",kind="mig_geometry"}` counts it; the '
        "cost service then uses the per-model table (`kube/mig_profiles.py`, by the rule of "
        "`costsvc/rules/mig.py`) and flags a model it does not know, never guessing.\n"
    )
    out.append(ALLOCATION_PATHS)
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
