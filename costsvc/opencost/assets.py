"""OpenCost's ``/assets`` answer from the fleet's GPUs (pure): one ``Node`` asset per GPU node,
its GPUs' cost as the chargeback charged it (costsvc/opencost/queries.py ``gpu_rows``).

OpenCost (opencost/opencost ``pkg/costmodel/handlers.go`` ``ComputeAssetsHandler``) answers
``WrapData(assetSet)``: ``{"code": 200, "status": "success", "data": {key: asset}}``, one map
(``core/pkg/opencost/asset_json.go`` ``AssetSet.MarshalJSON`` writes ``as.Assets``); it reads
``window`` and ``filter`` only. The key is the asset's properties joined by ``/``, an empty one
``__undefined__`` (``core/pkg/opencost/asset.go`` ``key``: provider, account, project,
category, cluster, type, service, providerID, name). OpenCost has no GPU asset type (``asset.go``
``AssetType``: Any, Cloud, ClusterManagement, Disk, LoadBalancer, Network, Node, SharedAsset):
a node's GPUs are its ``gpuCount``, ``GPUHours`` and ``gpuCost``, as here. Each field of
``Node.MarshalJSON`` in its order; gpu-costsvc prices GPUs only, so a node's CPU and RAM fields
are 0, its breakdowns null (unknown, not idle: the OpenCost UI shows no utilisation) and its
``totalCost`` its ``gpuCost``: the sum, over its GPUs, of what the chargeback charged each (its
price x the time it was present; ``gpu_hours.cost``). Numbers are written from the exact
micro-units, never through a float.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from costsvc.kit.money import MICRO, money
from costsvc.kit.times import iso_z
from costsvc.kit.windows import Window

UNDEFINED = "__undefined__"  # asset.go UndefinedKey
CATEGORY = "Compute"  # assetprops.go ComputeCategory: a node's
SERVICE = "Kubernetes"  # assetprops.go KubernetesService: a cluster node's
HOUR = timedelta(hours=1)
US_PER_HOUR = 3_600 * MICRO


@dataclass(frozen=True, slots=True)
class GpuRow:
    """One GPU over the window: its node, the time it was present (µs), what it was charged
    (micro-units) and its first and last hour."""

    cluster: str
    node: str
    gpu_uuid: str
    model: str
    present_us: int
    cost: int
    first: datetime
    last: datetime


def asset_key(cluster: str, node: str) -> str:
    """OpenCost's key of a node asset (``asset.go`` ``key`` with its default properties)."""
    parts = ["", "", "", CATEGORY, cluster, "Node", SERVICE, "", node]
    return "/".join(p or UNDEFINED for p in parts)


def _six(value: Decimal) -> Decimal:
    return value.quantize(Decimal("0.000001"))


def node_asset(gpus: list[GpuRow], window: Window) -> dict[str, Any]:
    """One node's asset: every field of OpenCost's ``Node.MarshalJSON``, in its order."""
    first = max(min(g.first for g in gpus), window.start)
    end = min(max(g.last for g in gpus) + HOUR, window.end)
    minutes = Decimal(int((end - first).total_seconds())) / 60
    gpu_hours = Decimal(sum(g.present_us for g in gpus)) / US_PER_HOUR
    cost = money(sum(g.cost for g in gpus))
    models = sorted({g.model for g in gpus if g.model})
    properties = {"category": CATEGORY, "service": SERVICE, "cluster": gpus[0].cluster}
    properties["name"] = gpus[0].node
    return {
        "type": "Node",
        "properties": properties,
        # the GPU product as NVIDIA's GPU feature discovery labels a node (several: joined)
        "labels": {"nvidia_com_gpu_product": ",".join(models)} if models else {},
        "window": {"start": iso_z(window.start), "end": iso_z(window.end)},
        "start": iso_z(first),
        "end": iso_z(end),
        "minutes": _six(minutes),
        "nodeType": "",
        "cpuCores": 0,
        "ramBytes": 0,
        "cpuCoreHours": 0,
        "ramByteHours": 0,
        "GPUHours": _six(gpu_hours),
        "cpuBreakdown": None,
        "ramBreakdown": None,
        "preemptible": 0,
        "discount": 0,
        "cpuCost": 0,
        "gpuCost": Decimal(cost),
        "gpuCount": _six(gpu_hours * 60 / minutes) if minutes else Decimal(0),  # Node.GPUs()
        "ramCost": 0,
        "adjustment": 0,
        "totalCost": Decimal(cost),
    }


def assets(rows: Iterable[GpuRow], window: Window) -> dict[str, Any]:
    """OpenCost's ``WrapData`` of the window's asset set: the GPU nodes, keys sorted."""
    by_node: dict[tuple[str, str], list[GpuRow]] = {}
    for r in rows:
        by_node.setdefault((r.cluster, r.node), []).append(r)
    data = {
        asset_key(cluster, node): node_asset(gpus, window)
        for (cluster, node), gpus in sorted(by_node.items())
    }
    return {"code": 200, "status": "success", "data": data}
