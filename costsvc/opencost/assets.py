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

``filter`` is OpenCost's filter language (costsvc/opencost/filters.py) over an asset's fields
(opencost/opencost ``core/pkg/filter/asset/parser.go``, names in
``core/pkg/filter/fieldstrings/fieldstrings.go``; matched as ``core/pkg/opencost/assetmatcher.go``
``assetFieldMap``): ``assetType`` (the type in lower case: ``node``), ``name`` (the node),
``category`` (``Compute``), ``cluster``, ``service`` (``Kubernetes``) and ``label[<key>]`` (the
asset's labels, the key Prometheus-sanitised as OpenCost's ``PrometheusKeySanitizePass``:
``label[nvidia.com/gpu.product]``). ``"__unallocated__"`` is the empty value, as in OpenCost.
``project``, ``provider``, ``providerID``, ``account`` and the label aliases (``department``,
``environment``, ``owner``, ``product``, ``team``) are OpenCost's too but do not apply here
(gpu-costsvc knows no cloud account or provider of a node, nor its labels beyond the GPU
product): a filter naming one is a 400 that names it, never an empty answer passed off as a
match.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from costsvc.kit.money import MICRO, money
from costsvc.kit.quoting import cut
from costsvc.kit.times import iso_z
from costsvc.kit.windows import Window
from costsvc.opencost.filters import Everything, FilterError, Lookup, Node, comparisons, parse
from kube.label_names import prometheus_name

UNDEFINED = "__undefined__"  # asset.go UndefinedKey
CATEGORY = "Compute"  # assetprops.go ComputeCategory: a node's
SERVICE = "Kubernetes"  # assetprops.go KubernetesService: a cluster node's
HOUR = timedelta(hours=1)
US_PER_HOUR = 3_600 * MICRO
# OpenCost's asset filter fields: those gpu-costsvc's assets have, and those they do not
FILTER_FIELDS = ("assetType", "name", "category", "cluster", "service")
NOT_APPLYING: tuple[str, ...] = ("project", "provider", "providerID", "account")
NOT_APPLYING += ("department", "environment", "owner", "product", "team")  # label aliases
FILTER_MAPS = ("label",)


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


def asset_filter(text: str) -> Node:
    """The ``filter`` parameter as a tree; raises :class:`FilterError` naming a field that
    does not apply to these assets, or a ``label`` without a key."""
    node = parse(text, (*FILTER_FIELDS, *NOT_APPLYING), FILTER_MAPS)
    for c in comparisons(node):
        if c.field in NOT_APPLYING:
            raise FilterError(
                f"field '{c.field}' does not apply to gpu-costsvc's assets (GPU nodes: "
                f"{', '.join(FILTER_FIELDS)} and label[<key>] do)"
            )
        if c.field in FILTER_MAPS and c.key is None:
            raise FilterError(f"{c.field} without a key: filter on {c.field}[<key>]")
    return node


def _fields_of(asset: dict[str, Any]) -> Lookup:
    """A node asset's filter fields (assetmatcher.go ``assetFieldMap``)."""

    def get(field: str, key: str | None) -> str:
        if field == "assetType":
            return str(asset["type"]).lower()
        if field == "label":
            return str(asset["labels"].get(prometheus_name(key or ""), ""))
        return str(asset["properties"].get(field, ""))

    return get


# the UI's report builder asks these (opencost-ui app/services/report-filter-autocomplete.ts
# ALLOWED.infraAssets, ``assetType`` asked as ``type``): the filter field each suggests
SUGGESTED = {"type": "assetType", "assettype": "assetType", "cluster": "cluster"}
SUGGESTED |= {"category": "category", "name": "name", "service": "service"}
NO_VALUES = ("account", "provider", "providerid", "project")  # not known: nothing to suggest


def suggested_field(field: str) -> str | None:
    """The filter field the asked ``field`` suggests values of (case-insensitive); None for
    one these assets do not have (nothing to suggest). Raises :class:`FilterError` for an
    unknown or missing field."""
    name = field.lower()
    if name in NO_VALUES:
        return None
    if name not in SUGGESTED:
        raise FilterError(f"unrecognized field: {cut(field)}" if name else "field is required")
    return SUGGESTED[name]


def asset_suggestions(
    assets_of: dict[str, Any], field: str | None, search: str, limit: int
) -> list[str]:
    """The values of the filter field ``field`` (:func:`suggested_field`) among the assets, as
    the filter reads them (so a suggestion picked matches: ``node`` for the type), containing
    ``search`` (case-insensitive), distinct, sorted as Go sorts strings, at most ``limit``."""
    if field is None:
        return []
    found = {_fields_of(a)(field, None) for a in assets_of.values()}
    hits = {v for v in found if v and search.lower() in v.lower()}
    return sorted(hits, key=lambda v: v.encode())[:limit]


def assets(rows: Iterable[GpuRow], window: Window, keep: Node | None = None) -> dict[str, Any]:
    """OpenCost's ``WrapData`` of the window's asset set: the GPU nodes the filter ``keep``
    matches, keys sorted."""
    keep = keep or Everything()
    by_node: dict[tuple[str, str], list[GpuRow]] = {}
    for r in rows:
        by_node.setdefault((r.cluster, r.node), []).append(r)
    data = {}
    for (cluster, node), gpus in sorted(by_node.items()):
        asset = node_asset(gpus, window)
        if keep.matches(_fields_of(asset)):
            data[asset_key(cluster, node)] = asset
    return {"code": 200, "status": "success", "data": data}
