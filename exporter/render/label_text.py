"""The label text of the GPU series, escaped once and reused between collections.

Every label a GPU, MIG-instance or per-container series carries is written here: the DCGM set,
``GPU_I_PROFILE``/``GPU_I_ID``, ``err_code``/``err_msg`` of the last XID,
``namespace``/``pod``/``container`` and the pods' own labels, so a new label touches only this
module. A GPU's text is rebuilt only when its identity
changes; MIG-instance and holder texts are kept while the last collection still used them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from exporter.nvml.library import CLOCK_EVENT_REASONS
from exporter.nvml.results import MigGeometry, MigInstance
from exporter.pods.claims import Holder
from exporter.pods.directory import PodDirectory
from exporter.render.exposition import label_pairs
from exporter.render.xid_messages import xid_message
from exporter.snapshot import GpuIdentity
from kube.label_names import sanitize_label

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

PodLabels = Callable[[Holder], str]


# The host label's name: dcgm-exporter's releases write "Hostname"; its main branch renames
# it "hostname" (NVIDIA/dcgm-exporter#655, internal/pkg/rendermetrics/render_metrics.go).
HOSTNAME_LABELS = ("Hostname", "hostname")


def gpu_labels(identity: GpuIdentity, hostname: str, hostname_label: str = "Hostname") -> str:
    """The DCGM label set of a GPU."""
    return label_pairs(
        (
            ("gpu", str(identity.index)),
            ("UUID", identity.uuid),
            ("pci_bus_id", identity.pci_bus_id),
            ("device", identity.device),
            ("modelName", identity.model),
            (hostname_label, hostname),
            ("DCGM_FI_DRIVER_VERSION", identity.driver_version),
        )
    )


def xid_labels(code: int) -> str:
    """dcgm-exporter 4.x's labels of DCGM_FI_DEV_XID_ERRORS: the code and its message."""
    return label_pairs((("err_code", str(code)), ("err_msg", xid_message(code))))


def holder_labels(holder: Holder) -> str:
    return label_pairs(
        (("namespace", holder.namespace), ("pod", holder.pod), ("container", holder.container))
    )


def pod_label_renderer(directory: PodDirectory, keys: tuple[str, ...]) -> PodLabels:
    """``holder -> 'label_team="x",label_project="y"'`` from the pods' labels (empty values
    where a pod lacks a key, so every series of a family has the same label names)."""
    names = [(key, sanitize_label(key)) for key in keys]

    def render(holder: Holder) -> str:
        pod = directory.by_name(holder.namespace, holder.pod)
        labels = pod.labels if pod is not None else {}
        return label_pairs((name, labels.get(key, "")) for key, name in names)

    return render


@dataclass(frozen=True, slots=True)
class GpuLabels:
    base: str  # the DCGM label set
    info: str  # base + serial, vbios_version (gpu_device_info)
    reasons: tuple[tuple[str, int], ...]  # base + reason, and the reason's bit, per reason


@dataclass(frozen=True, slots=True)
class MigLabels:
    base: str  # the GPU's base + GPU_I_PROFILE, GPU_I_ID
    # mig_uuid, GPU_CI_ID, compute_slices, memory_slices and the GPU's gpu_compute_slices,
    # gpu_memory_slices (gpu_mig_instance_info; empty where NVML does not tell the geometry)
    info: str


class _Kept(Generic[K, V]):
    """Values the current or the previous collection used; older ones are dropped."""

    __slots__ = ("_before", "_now")

    def __init__(self) -> None:
        self._now: dict[K, V] = {}
        self._before: dict[K, V] = {}

    def get(self, key: K, build: Callable[[K], V]) -> V:
        value = self._now.get(key)
        if value is None:
            value = self._before.get(key)
            if value is None:
                value = build(key)
            self._now[key] = value
        return value

    def turn(self) -> None:
        self._before, self._now = self._now, {}


# GPU base labels + the instance's facts + the GPU's geometry (0, 0: unknown)
_MigKey = tuple[str, int, int, str, str, int, int, int, int]


class LabelCache:
    """Label text for the series of one exporter (one host name)."""

    def __init__(
        self, hostname: str, pod_labels: PodLabels | None = None, hostname_label: str = "Hostname"
    ) -> None:
        self._hostname = hostname
        self._hostname_label = hostname_label
        self._xids: dict[int, str] = {}
        self._pod_labels = pod_labels
        self._gpus: _Kept[GpuIdentity, GpuLabels] = _Kept()
        self._migs: _Kept[_MigKey, MigLabels] = _Kept()
        self._holders: _Kept[Holder, str] = _Kept()
        self._containers: dict[Holder, str] = {}

    def turn(self) -> None:
        """Start a collection: forget what the one before last used."""
        self._gpus.turn()
        self._migs.turn()
        self._holders.turn()
        self._containers = {}

    def gpu(self, identity: GpuIdentity) -> GpuLabels:
        return self._gpus.get(identity, self._build_gpu)

    def _build_gpu(self, identity: GpuIdentity) -> GpuLabels:
        base = gpu_labels(identity, self._hostname, self._hostname_label)
        extra = label_pairs((("serial", identity.serial), ("vbios_version", identity.vbios)))
        reasons = tuple(
            (f'{base},reason="{reason}"', bit) for reason, bit in CLOCK_EVENT_REASONS.items()
        )
        return GpuLabels(base, f"{base},{extra}", reasons)

    def mig(self, gpu: GpuLabels, instance: MigInstance, geometry: MigGeometry | None) -> MigLabels:
        i, g = instance, geometry or MigGeometry(0, 0)
        key = (
            gpu.base,
            i.gi_id,
            i.ci_id,
            i.profile,
            i.uuid,
            i.compute_slices,
            i.memory_slices,
            g.compute_slices,
            g.memory_slices,
        )
        return self._migs.get(key, _build_mig)

    def xid(self, code: int) -> str:
        text = self._xids.get(code)
        if text is None:
            text = self._xids[code] = xid_labels(code)
        return text

    def holder(self, holder: Holder) -> str:
        """``namespace``, ``pod``, ``container`` of the device series a sole holder's."""
        return self._holders.get(holder, holder_labels)

    def container(self, holder: Holder) -> str:
        """The labels of a per-container series: the holder's, then its pod's own labels
        (read again every collection, as a pod's labels may change)."""
        text = self._containers.get(holder)
        if text is None:
            text = self.holder(holder)
            if self._pod_labels is not None:
                extra = self._pod_labels(holder)
                if extra:
                    text = f"{text},{extra}"
            self._containers[holder] = text
        return text


def _build_mig(key: _MigKey) -> MigLabels:
    gpu_base, gi_id, ci_id, profile, uuid, compute, memory, gpu_compute, gpu_memory = key
    extra = label_pairs((("GPU_I_PROFILE", profile), ("GPU_I_ID", str(gi_id))))
    info = label_pairs(
        (
            ("mig_uuid", uuid),
            ("GPU_CI_ID", str(ci_id)),
            ("compute_slices", str(compute)),
            ("memory_slices", str(memory)),
            ("gpu_compute_slices", str(gpu_compute) if gpu_compute else ""),
            ("gpu_memory_slices", str(gpu_memory) if gpu_memory else ""),
        )
    )
    return MigLabels(f"{gpu_base},{extra}", info)
