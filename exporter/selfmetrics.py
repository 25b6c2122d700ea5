"""The exporter's own health: collection duration, errors by source and kind, last success.

Every (source, kind) error counter exists from the start, at 0, so alerts and dashboards can
use it before the first error. Only the collection thread touches this object (the GPU reader
threads hand their errors back with their reads).
"""

from __future__ import annotations

import platform
from bisect import bisect_left

from prometheus_client import ProcessCollector

from exporter import __version__
from exporter.render.exposition import Family, format_value, from_client_metric, label_pairs

ERROR_KINDS: dict[str, tuple[str, ...]] = {
    "nvml": ("init", "gpu_lost", "query", "timeout", "no_permission", "mig_geometry"),
    "pod_resources": ("unavailable", "timeout", "other"),
    "kubernetes": ("list", "watch"),
    "proc": ("read", "missing", "not_found"),
    "exporter": ("internal",),
}
# what became of each device the kubelet reported held through a DRA claim
DRA_OUTCOMES = ("gpu", "other_driver", "not_in_slice", "no_uuid")
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# the gauges of one value each, in the order they are published: name, help, the attribute
GAUGES = (
    (
        "gpu_exporter_last_collection_duration_seconds",
        "Time the last collection took to read every device.",
        "last_duration",
    ),
    (
        "gpu_exporter_last_render_duration_seconds",
        "Time the previous collection took to render its exposition.",
        "last_render_duration",
    ),
    (
        "gpu_exporter_last_success_timestamp_seconds",
        "Unix time of the last collection that read NVML (0 if none yet).",
        "last_success",
    ),
    ("gpu_exporter_nvml_up", "1 while NVML is initialised, 0 while it is not.", "nvml_up"),
    ("gpu_exporter_gpus", "GPUs found at the last discovery.", "gpus"),
    (
        "gpu_exporter_unknown_device_ids",
        "Device ids the kubelet reported that match no GPU or MIG instance on this node.",
        "unknown_device_ids",
    ),
    (
        "gpu_exporter_finished_pod_device_ids",
        "Device ids the kubelet still lists for pods whose phase is Succeeded or Failed "
        "(kubernetes#119423); never attributed.",
        "finished_pod_device_ids",
    ),
)


class SelfMetrics:
    def __init__(self, bindings_version: str, mode: str) -> None:
        self.errors = {(s, k): 0 for s, kinds in ERROR_KINDS.items() for k in kinds}
        self.collections = 0
        self._bucket_counts = [0] * len(DURATION_BUCKETS)
        self.duration_sum = 0.0
        self.last_duration = 0.0
        self.last_render_duration = 0.0
        self.last_success = 0.0
        self.nvml_up = 0
        self.gpus = 0
        self.unknown_device_ids = 0
        self.finished_pod_device_ids = 0
        self.dra_devices: dict[str, int] = {}
        self._build = label_pairs(
            (
                ("version", __version__),
                ("python_version", platform.python_version()),
                ("nvml_bindings", bindings_version),
                ("mode", mode),
            )
        )
        self._process = ProcessCollector(registry=None)

    def count_error(self, source: str, kind: str) -> None:
        key = (source, kind)
        self.errors[key] = self.errors.get(key, 0) + 1

    def observe_collection(self, seconds: float) -> None:
        self.collections += 1
        self.last_duration = seconds
        self.duration_sum += seconds
        i = bisect_left(DURATION_BUCKETS, seconds)
        if i < len(self._bucket_counts):
            self._bucket_counts[i] += 1

    def families(self) -> list[Family]:
        """Every self-metric family, from the counts kept so far."""
        build = Family(
            "gpu_exporter_build_info", "gauge", "Version of gpu-exporter and its NVML bindings."
        )
        build.add(self._build, 1)
        collections = Family(
            "gpu_exporter_collections_total", "counter", "Collections run since start."
        )
        collections.add("", self.collections)
        gauges = []
        for name, text, attribute in GAUGES:
            gauge = Family(name, "gauge", text)
            gauge.add("", getattr(self, attribute))
            gauges.append(gauge)
        process = [from_client_metric(m) for m in self._process.collect()]
        return [
            build,
            collections,
            self._duration(),
            *gauges,
            self._dra(),
            self._errors(),
            *process,
        ]

    def _duration(self) -> Family:
        """The collections' duration, as a histogram."""
        duration = Family(
            "gpu_exporter_collection_duration_seconds",
            "histogram",
            "Time to read every device of one collection.",
        )
        cumulative = 0
        for bound, n in zip(DURATION_BUCKETS, self._bucket_counts, strict=True):
            cumulative += n
            duration.add(f'le="{format_value(bound)}"', cumulative, "_bucket")
        duration.add('le="+Inf"', self.collections, "_bucket")
        duration.add("", self.duration_sum, "_sum")
        duration.add("", self.collections, "_count")
        return duration

    def _dra(self) -> Family:
        """The devices held through DRA claims, by outcome (every outcome, 0 where none)."""
        dra = Family(
            "gpu_exporter_dra_devices",
            "gauge",
            "Devices the kubelet reported held through DRA resource claims, by outcome: gpu "
            "(a GPU driver's device, found in a ResourceSlice), other_driver (not a GPU: "
            "ignored), not_in_slice (in no ResourceSlice of this node: never guessed), "
            "no_uuid (in a slice without a uuid, or a GPU and MIG profile to match it by).",
        )
        for outcome in DRA_OUTCOMES:
            dra.add(f'outcome="{outcome}"', self.dra_devices.get(outcome, 0))
        return dra

    def _errors(self) -> Family:
        """The errors by source and kind (every pair, 0 where none)."""
        errors = Family(
            "gpu_exporter_errors_total", "counter", "Errors by source and kind since start."
        )
        for (source, kind), n in sorted(self.errors.items()):
            errors.add(f'source="{source}",kind="{kind}"', n)
        return errors
