"""Chargeback rows -> OpenCost allocation sets (``/allocation``'s ``data``). Pure.

The answer has OpenCost's shape (opencost/opencost ``core/pkg/opencost/allocation_json.go``
``AllocationJSON``, ``pkg/costmodel/router.go`` ``Response``): ``{"code": 200, "status":
"success", "data": [set, ...]}``, each set a map of allocation name -> allocation, each
allocation every field of ``AllocationJSON`` in its order. Numbers are JSON numbers written
from the exact micro-units (six places; OpenCost rounds its floats to five).

What each GPU field holds (docs/api.md):

- ``gpuCost``: the allocated cost, plus its share of idle when ``shareIdle`` (then also in
  ``gpuCostIdle``, else 0); ``totalCost`` = ``gpuCost``: GPUs are all we price.
- ``gpuHours``: ∫ share dt in physical-GPU hours; ``gpuCount`` = ``gpuHours`` / the hours from
  the allocation's first to its last hour (OpenCost's ``GPUs()``).
- ``gpuEfficiency``: used / (used + waste), sample resolution (docs/cost-model.md); ``null``
  when nothing was measured (OpenCost writes NaN as ``null`` too).
- ``gpuAllocation``: ``gpuRequestAverage`` = ``gpuCount``; ``gpuUsageAverage`` = ``gpuCount``
  x ``gpuEfficiency`` (cost-weighted when prices differ); ``isGPUShared``: a holding on a
  time-sliced or MPS GPU (``usage_facts.shared``) is part of it.
- CPU, RAM, network, PV, load balancer, external and shared fields are 0 (``pvs``,
  ``lbAllocations`` ``null``): outside gpu-costsvc's scope. ``totalEfficiency`` is OpenCost's
  CPU/RAM efficiency: 0.

Idle (``includeIdle``) is the cost of GPU capacity no pod held (``__idle__`` chargeback
lines, and the idle an ``weighted``/``even`` idle policy spread over teams: /allocation
collects it back, so its answers do not depend on the cost model's idle policy). Its scope is
the cluster, or the node (``idleByNode``). Without ``shareIdle`` it is one ``__idle__``
allocation per set (OpenCost combines idle by name); with it, each scope's idle is split over
that scope's allocations in proportion to their allocated cost (OpenCost's
``ShareWeighted``), exactly to the micro-unit, and what has nobody to go to stays
``__idle__``. With a filter, ``__idle__`` carries the idle of the scopes where something
matched. Σ of one set's ``totalCost`` with ``includeIdle`` and no filter = the fleet's cost of
those hours.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from functools import lru_cache
from typing import Any

from costsvc.chargeback import IDLE, UNALLOCATED
from costsvc.money import MICRO, money, split
from costsvc.opencost.filters import (
    KEPT_ALIASES,
    NOT_KEPT,
    STRING_FIELDS,
    Comparison,
    FilterError,
    Lookup,
    Node,
    comparisons,
)
from costsvc.opencost.params import Window
from costsvc.utc import iso_z as _iso_z
from kube.labels import sanitize_label

HOUR = timedelta(hours=1)
iso_z = lru_cache(maxsize=4096)(_iso_z)  # a few distinct hours per answer, many allocations
SIX = Decimal("0.000001")
# the properties an allocation can carry from the chargeback
PROPERTY_COLUMNS = ("cluster", "node", "namespace", "pod")
DEFAULT_AGGREGATE = ("cluster", "node", "namespace", "pod")  # OpenCost's + container
ZERO_BEFORE_GPU = (
    "cpuCores",
    "cpuCoreRequestAverage",
    "cpuCoreLimitAverage",
    "cpuCoreUsageAverage",
    "cpuCoreHours",
    "cpuCost",
    "cpuCostAdjustment",
    "cpuCostIdle",
    "cpuEfficiency",
)
ZERO_AFTER_GPU = (
    "networkTransferBytes",
    "networkReceiveBytes",
    "networkCost",
    "networkCrossZoneCost",
    "networkCrossRegionCost",
    "networkInternetCost",
    "networkCostAdjustment",
    "loadBalancerCost",
    "loadBalancerCostAdjustment",
    "pvBytes",
    "pvByteHours",
    "pvCost",
    "pvs",
    "pvCostAdjustment",
    "ramBytes",
    "ramByteRequestAverage",
    "ramByteLimitAverage",
    "ramByteUsageAverage",
    "ramByteHours",
    "ramCost",
    "ramCostAdjustment",
    "ramCostIdle",
    "ramEfficiency",
    "externalCost",
    "sharedCost",
)
NULL_FIELDS = ("pvs",)
LABEL_PREFIX = "label:"  # a row column holding a pod label that is no owner column


def label_column(key: str) -> str:
    """The row column of a label the chargeback does not keep (costsvc/opencost/podlabels.py
    fills it from the label history)."""
    return LABEL_PREFIX + sanitize_label(key)


@dataclass(frozen=True, slots=True)
class Aggregate:
    """One ``aggregate`` property: its OpenCost name, the chargeback column that answers
    it, and the label key (``label:<key>``) it came from."""

    name: str
    column: str
    label: str | None = None


@dataclass(frozen=True, slots=True)
class Row:
    """The chargeback summed over one set and one combination of the columns asked for."""

    set_index: int
    values: Mapping[str, str]  # column -> value, for the columns the query grouped by
    allocated: int
    used: int
    waste: int
    idle: int
    gpu_hours: int  # micro GPU-hours
    first: datetime  # first and last hour with a line
    last: datetime
    shared: bool = False

    @property
    def is_idle(self) -> bool:
        return self.values.get("team") == IDLE


@dataclass(frozen=True, slots=True)
class Options:
    aggregate: Sequence[Aggregate]
    include_idle: bool = False
    share_idle: bool = False
    idle_by_node: bool = False
    accumulate: bool = False


def check_filter(node: Node, label_columns: Mapping[str, str]) -> set[str]:
    """The chargeback columns the filter reads; raises :class:`FilterError` for a field the
    chargeback does not keep."""
    needed: set[str] = set()
    for c in comparisons(node):
        needed.add(_filter_column(c, label_columns))
    return needed


def _filter_column(c: Comparison, label_columns: Mapping[str, str]) -> str:
    if c.field in STRING_FIELDS:
        return c.field
    if c.field in KEPT_ALIASES:
        return "team"
    if c.field == "label":
        if c.key is None:
            raise FilterError("label without a key: gpu-costsvc filters on label[<key>]")
        return label_columns.get(c.key) or label_column(c.key)
    assert c.field in (*NOT_KEPT, "annotation")
    raise FilterError(f"{c.field}: not kept by gpu-costsvc's chargeback")


def _owner(value: str) -> str:
    """An owner column as a label value: none for ``__unallocated__``/``__idle__``."""
    return "" if value in (UNALLOCATED, IDLE) else value


def lookup(row: Row, label_columns: Mapping[str, str]) -> Lookup:
    def get(name: str, key: str | None) -> str:
        if name in STRING_FIELDS:
            return row.values.get(name, "")
        if name in KEPT_ALIASES:
            return _owner(row.values.get("team", ""))
        assert key is not None
        if key in label_columns:
            return _owner(row.values.get(label_columns[key], ""))
        return row.values.get(label_column(key), "")

    return get


@dataclass(slots=True)
class _Acc:
    """One allocation being summed."""

    allocated: int = 0
    used: int = 0
    waste: int = 0
    idle: int = 0  # shared idle (gpuCostIdle), or the idle allocation's cost
    gpu_hours: int = 0
    first: datetime | None = None
    end: datetime | None = None
    shared: bool = False
    properties: dict[str, str | None] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def span(self, first: datetime, end: datetime) -> None:
        self.first = first if self.first is None else min(self.first, first)
        self.end = end if self.end is None else max(self.end, end)

    def merge_properties(self, values: Mapping[str, str]) -> None:
        for column in PROPERTY_COLUMNS:
            if column not in values:
                continue
            value = values[column] or None
            if column not in self.properties:
                self.properties[column] = value
            elif self.properties[column] != value:
                self.properties[column] = None  # differs: OpenCost keeps common ones only

    def add(self, other: _Acc) -> None:
        self.allocated += other.allocated
        self.used += other.used
        self.waste += other.waste
        self.idle += other.idle
        self.gpu_hours += other.gpu_hours
        self.shared = self.shared or other.shared
        if other.first is not None and other.end is not None:
            self.span(other.first, other.end)
        for column, value in other.properties.items():
            if column not in self.properties:
                self.properties[column] = value
            elif self.properties[column] != value:
                self.properties[column] = None
        for key, value in other.labels.items():
            self.labels.setdefault(key, value)


def _name(values: Mapping[str, str], aggregate: Sequence[Aggregate]) -> str:
    parts = []
    for a in aggregate:
        value = values.get(a.column, "")
        if a.label is not None or a.column == "team":
            value = _owner(value)
        parts.append(value or UNALLOCATED)
    return "/".join(parts)


def _scope(row: Row, by_node: bool) -> tuple[str, str]:
    return (row.values.get("cluster", ""), row.values.get("node", "") if by_node else "")


def shape_set(
    rows: Iterable[Row], keep: Node | None, options: Options, label_columns: Mapping[str, str]
) -> tuple[dict[str, _Acc], _Acc | None]:
    """One set's allocations by name, and its ``__idle__`` (None when there is none).
    ``keep`` is the filter (None: everything)."""
    rows = list(rows)
    by_node = options.idle_by_node
    pool: dict[tuple[str, str], int] = {}
    idle_hours: dict[tuple[str, str], int] = {}
    idle_span: dict[tuple[str, str], tuple[datetime, datetime]] = {}
    for r in rows:
        s = _scope(r, by_node)
        pool[s] = pool.get(s, 0) + r.idle
        if r.is_idle:
            idle_hours[s] = idle_hours.get(s, 0) + r.gpu_hours
        if r.idle or r.is_idle:
            lo, hi = idle_span.get(s, (r.first, r.last))
            idle_span[s] = (min(lo, r.first), max(hi, r.last))
    holders = [r for r in rows if not r.is_idle]
    shares: dict[int, int] = {}
    left = dict(pool)
    if options.include_idle and options.share_idle:
        in_scope: dict[tuple[str, str], list[int]] = {}
        for i, r in enumerate(holders):
            in_scope.setdefault(_scope(r, by_node), []).append(i)
        for s, members in in_scope.items():
            weights = [holders[i].allocated for i in members]
            if pool.get(s, 0) and sum(weights):
                for i, part in zip(members, split(pool[s], weights), strict=True):
                    shares[i] = part
                left[s] = 0
    selected: set[tuple[str, str]] = set()
    allocations: dict[str, _Acc] = {}
    for i, r in enumerate(holders):
        if keep is not None and not keep_row(r, keep, label_columns):
            continue
        selected.add(_scope(r, by_node))
        name = _name(r.values, options.aggregate)
        acc = allocations.get(name)
        if acc is None:
            acc = allocations[name] = _Acc()
            for a in options.aggregate:
                if a.label is not None and _owner(r.values.get(a.column, "")):
                    acc.labels[a.label] = r.values[a.column]
        acc.allocated += r.allocated
        acc.used += r.used
        acc.waste += r.waste
        acc.idle += shares.get(i, 0)
        acc.gpu_hours += r.gpu_hours
        acc.shared = acc.shared or r.shared
        acc.span(r.first, r.last + HOUR)
        acc.merge_properties(r.values)
    if keep is None:
        selected = set(pool) | set(idle_hours)
    else:
        for r in rows:
            if r.is_idle and keep_row(r, keep, label_columns):
                selected.add(_scope(r, by_node))
    if not options.include_idle:
        return allocations, None
    idle = _Acc()
    for s in sorted(selected):
        cost = left.get(s, 0)
        hours = idle_hours.get(s, 0) if cost or not options.share_idle else 0
        if not cost and not hours:
            continue
        idle.idle += cost
        idle.gpu_hours += hours
        lo, hi = idle_span[s]
        idle.span(lo, hi + HOUR)
        idle.merge_properties({"cluster": s[0], **({"node": s[1]} if by_node else {})})
    return allocations, (idle if idle.first is not None else None)


def keep_row(row: Row, keep: Node, label_columns: Mapping[str, str]) -> bool:
    return keep.matches(lookup(row, label_columns))


def _ratio(value: Decimal) -> str:
    return format(value.quantize(SIX), "f")


# the fields outside our scope, as JSON text once: 0, or null for the maps (pvs)
ZEROS_BEFORE_GPU = ",".join(f'"{n}":0' for n in ZERO_BEFORE_GPU)
ZEROS_AFTER_GPU = ",".join(f'"{n}":{"null" if n in NULL_FIELDS else "0"}' for n in ZERO_AFTER_GPU)
NULL_MAPS = ("proportionalAssetResourceCosts", "lbAllocations", "sharedCostBreakdown")
AFTER_TOTAL = ",".join(f'"{n}":null' for n in NULL_MAPS)


def render(name: str, acc: _Acc, window: Window, is_idle: bool = False) -> str:
    """One allocation as JSON text: every field of OpenCost's ``AllocationJSON`` in its
    order, numbers written from the exact micro-units (never through a float)."""
    first = acc.first or window.start
    end = acc.end or window.start
    minutes = Decimal(int((end - first).total_seconds())) / 60
    hours = minutes / 60
    gpu_hours = Decimal(acc.gpu_hours) / MICRO
    count = gpu_hours / hours if hours else Decimal(0)
    measured = acc.used + acc.waste
    efficiency: Decimal | None = Decimal(acc.used) / measured if measured else None
    if is_idle:
        efficiency = Decimal(0)
    gpu_cost = money(acc.idle if is_idle else acc.allocated + acc.idle)
    properties: dict[str, Any] = {k: v for k, v in acc.properties.items() if v}
    if acc.labels:
        properties["labels"] = dict(sorted(acc.labels.items()))
    if is_idle:
        gpu_allocation = "null"
    else:
        usage = "null" if efficiency is None else _ratio(count * efficiency)
        shared = "true" if acc.shared else "false"
        gpu_allocation = (
            f'{{"gpuRequestAverage":{_ratio(count)},"gpuUsageAverage":{usage},'
            f'"isGPUShared":{shared}}}'
        )
    parts = [
        f'"name":{_string(name)}',
        f'"properties":{json.dumps(properties, ensure_ascii=False)}',
        f'"window":{{"start":"{iso_z(window.start)}","end":"{iso_z(window.end)}"}}',
        f'"start":"{iso_z(first)}","end":"{iso_z(end)}","minutes":{_ratio(minutes)}',
        ZEROS_BEFORE_GPU,
        f'"gpuCount":{_ratio(count)},"gpuHours":{_ratio(gpu_hours)},"gpuCost":{gpu_cost}',
        f'"gpuCostAdjustment":0,"gpuCostIdle":{money(0 if is_idle else acc.idle)}',
        f'"gpuEfficiency":{"null" if efficiency is None else _ratio(efficiency)}',
        ZEROS_AFTER_GPU,
        f'"totalCost":{gpu_cost},"totalEfficiency":0',
        AFTER_TOTAL,
        f'"gpuAllocation":{gpu_allocation}',
    ]
    return "{" + ",".join(parts) + "}"


def response_json(
    rows: Iterable[Row],
    windows: Sequence[Window],
    options: Options,
    label_columns: Mapping[str, str],
    keep: Node | None = None,
) -> str:
    """OpenCost's ``Response`` as JSON text: ``data`` one map per set (one in all when
    accumulating), names sorted, ``__idle__`` last."""
    by_set: dict[int, list[Row]] = {}
    for r in rows:
        by_set.setdefault(r.set_index, []).append(r)
    shaped = [
        shape_set(by_set.get(i, []), keep, options, label_columns) for i in range(len(windows))
    ]
    if options.accumulate and windows:
        total: dict[str, _Acc] = {}
        idle_total: _Acc | None = None
        for allocations, idle in shaped:
            for name, acc in allocations.items():
                total.setdefault(name, _Acc()).add(acc)
            if idle is not None:
                idle_total = idle_total or _Acc()
                idle_total.add(idle)
        shaped = [(total, idle_total)]
        windows = [Window(windows[0].start, windows[-1].end)]
    sets = []
    for (allocations, idle), window in zip(shaped, windows, strict=True):
        items = [
            f"{_string(name)}:{render(name, acc, window)}"
            for name, acc in sorted(allocations.items())
        ]
        if idle is not None:
            items.append(f"{_string(IDLE)}:{render(IDLE, idle, window, is_idle=True)}")
        sets.append("{" + ",".join(items) + "}")
    return '{"code":200,"status":"success","data":[' + ",".join(sets) + "]}"


def to_json(value: Any) -> str:
    """JSON text with :class:`~decimal.Decimal` written as a plain number (never a float)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{_string(k)}:{to_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(to_json(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)
