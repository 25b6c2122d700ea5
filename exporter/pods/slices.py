"""The DRA devices of this node, as its ``ResourceSlice``s (``resource.k8s.io/v1``) publish them.

A slice (``spec.driver``, ``spec.pool.name``, ``spec.nodeName``, ``spec.devices[]``) lists a
driver's devices by name, each with typed ``attributes`` (``{"string": …}``, ``{"int": …}``,
``{"bool": …}``, ``{"version": …}``; kubernetes/api resource/v1 types.go ``DeviceAttribute``).
The kubelet's pod-resources answer names an allocated device by (driver, pool, device); this
directory turns that triplet into the GPU or MIG instance NVML knows, by the attributes NVIDIA's
DRA driver publishes (NVIDIA/k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin, driver
``gpu.nvidia.com``):

    type        "gpu" (a whole GPU: deviceinfo.go), "mig" (a MIG device: mig.go), "vfio"
    uuid        GPU-… (a GPU), MIG-… (a MIG device that exists; a dynamic-MIG partition not yet
                created has none)
    parentUUID  the MIG device's GPU;  profile  its MIG profile (e.g. 1g.10gb)

An attribute name may carry the driver's domain (``gpu.nvidia.com/uuid``) or not (``uuid``:
the driver's domain is implied); both are read.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

GPU_DRIVERS = ("gpu.nvidia.com",)


@dataclass(frozen=True, slots=True)
class SliceDevice:
    driver: str
    pool: str
    name: str
    kind: str  # the "type" attribute ("gpu", "mig", …), "" when absent
    uuid: str  # "" when absent
    parent_uuid: str = ""
    profile: str = ""


def _value(attribute: Any) -> str:
    if not isinstance(attribute, dict):
        return ""
    for key in ("string", "version", "int", "bool"):
        if key in attribute and attribute[key] is not None:
            return str(attribute[key])
    return ""


def slice_devices(raw: dict[str, Any]) -> list[SliceDevice]:
    """The devices of one ResourceSlice as the API serves it (a dict)."""
    spec = raw.get("spec") or {}
    driver = str(spec.get("driver") or "")
    pool = str((spec.get("pool") or {}).get("name") or "")
    out = []
    for device in spec.get("devices") or []:
        if not isinstance(device, dict) or not device.get("name"):
            continue
        attrs = device.get("attributes") or {}
        if not isinstance(attrs, dict):
            attrs = {}

        def attr(name: str, attrs: dict[str, Any] = attrs) -> str:
            found = attrs.get(name)
            if found is None:
                found = attrs.get(f"{driver}/{name}")
            return _value(found)

        out.append(
            SliceDevice(
                driver,
                pool,
                str(device["name"]),
                attr("type"),
                attr("uuid"),
                attr("parentUUID"),
                attr("profile"),
            )
        )
    return out


class SliceDirectory:
    """(driver, pool, device) -> :class:`SliceDevice`, from the slices of this node; replaced
    wholesale or slice by slice by its source, read by reference swap like the pod directory."""

    def __init__(self, slices: Iterable[tuple[str, list[SliceDevice]]] = ()) -> None:
        self._lock = threading.Lock()
        self._slices: dict[str, list[SliceDevice]] = dict(slices)
        self._index = _index(self._slices)

    def replace(self, slices: Iterable[tuple[str, list[SliceDevice]]]) -> None:
        fresh = dict(slices)
        with self._lock:
            self._slices, self._index = fresh, _index(fresh)

    def upsert(self, name: str, devices: list[SliceDevice]) -> None:
        with self._lock:
            slices = {**self._slices, name: devices}
            self._slices, self._index = slices, _index(slices)

    def remove(self, name: str) -> None:
        with self._lock:
            slices = dict(self._slices)
            slices.pop(name, None)
            self._slices, self._index = slices, _index(slices)

    def get(self, driver: str, pool: str, device: str) -> SliceDevice | None:
        return self._index.get((driver, pool, device))

    def __len__(self) -> int:
        return len(self._index)


def _index(slices: dict[str, list[SliceDevice]]) -> dict[tuple[str, str, str], SliceDevice]:
    return {(d.driver, d.pool, d.name): d for devices in slices.values() for d in devices}
