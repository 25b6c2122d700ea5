"""Chargeback rows -> OpenCost allocation sets (``/allocation``'s ``data``). Pure.

The answer has OpenCost's shape (opencost/opencost ``core/pkg/opencost/allocation_json.go``
``AllocationJSON``, ``pkg/costmodel/router.go`` ``Response``): ``{"code": 200, "status":
"success", "data": [set, ...]}``, each set a map of allocation name -> allocation, each
allocation every field of ``AllocationJSON`` in its order. Numbers are JSON numbers written
from the exact micro-units (six places; OpenCost rounds its floats to five).

What each GPU field holds (docs/api.md):

- ``gpuCost``: the allocated cost, plus its share of idle when ``shareIdle`` (then also in
  ``gpuCostIdle``, else 0); ``totalCost`` = ``gpuCost``: GPUs are all we price.
- ``gpuHours``: ∫ share dt in physical-GPU hours, plus the idle GPU-hours shared onto it with
  ``shareIdle`` (OpenCost adds ``GPUHours`` x the idle coefficient); ``gpuCount`` =
  ``gpuHours`` / the hours from the allocation's first to its last hour (``GPUs()``).
- ``gpuEfficiency``: used / (used + waste), sample resolution (docs/cost-model.md); ``null``
  when nothing was measured (OpenCost writes NaN as ``null`` too). ``totalEfficiency``:
  OpenCost's cost-weighted mean over the resources priced — GPUs only here, so the same
  figure (OpenCost weighs CPU and RAM, and would say 0 for a GPU-only allocation).
- ``gpuAllocation``: ``gpuRequestAverage`` = ``gpuCount``; ``gpuUsageAverage`` = ``gpuCount``
  x ``gpuEfficiency`` (cost-weighted when prices differ); ``isGPUShared``: a holding on a
  time-sliced or MPS GPU (``usage_facts.shared``) is part of it.
- CPU, RAM, network, PV, load balancer, external and shared fields are 0 (``pvs``,
  ``lbAllocations`` ``null``): outside gpu-costsvc's scope.

Idle (``includeIdle``) is the cost of GPU capacity no pod held (``__idle__`` chargeback
lines, and the idle an ``weighted``/``even`` idle policy spread over teams: /allocation
collects it back, so its answers do not depend on the cost model's idle policy). Its scope is
the cluster, or the node (``idleByNode``). Without ``shareIdle`` it is one ``__idle__``
allocation per set (OpenCost combines idle by name); with it, each scope's idle cost and idle
GPU-hours are split over that scope's allocations in proportion to their allocated cost
(OpenCost's ``ShareWeighted``, core/pkg/opencost/allocation.go ``computeIdleCoeffs``),
exactly to the micro-unit, and what has nobody to go to stays ``__idle__``. With a filter
(OpenCost's idle filtration, ``AggregateBy`` steps 2c and 7): shares are computed over all of
a scope's allocations, matched or not, and without ``shareIdle`` ``__idle__`` carries each
scope's idle x (allocated cost matched / allocated cost) — the idle share of what matched; a
scope where nothing was allocated carries none (OpenCost's code keeps such a scope's idle
whole: docs/api.md). Σ of one set's ``totalCost`` with ``includeIdle`` and no filter = the
fleet's cost of those hours.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from functools import lru_cache
from typing import Any

from costsvc.kit.money import MICRO, money, split
from costsvc.kit.times import iso_z as _iso_z
from costsvc.kit.windows import Window
from costsvc.opencost.aggregates import (
    LABEL_PREFIX,
    Aggregate,
    label_column,
    name_of,
    opencost_kind,
    owner_value,
)
from costsvc.opencost.filters import (
    CONTROLLER_FIELDS,
    EMPTY_FIELDS,
    KEPT_ALIASES,
    LABEL_ALIASES,
    STRING_FIELDS,
    Comparison,
    FilterError,
    Lookup,
    Node,
    comparisons,
)
from costsvc.rules.chargeback import IDLE

__all__ = ["LABEL_PREFIX", "Aggregate", "label_column"]

HOUR = timedelta(hours=1)
iso_z = lru_cache(maxsize=4096)(_iso_z)  # a few distinct hours per answer, many allocations
SIX = Decimal("0.000001")
# the properties an allocation can carry, in the order of OpenCost's AllocationProperties
PROPERTY_COLUMNS = ("cluster", "node", "container", "controller", "namespace", "pod")
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
Groups = Sequence[tuple[Window, Sequence[int]]]  # the answer's sets: window, computed sets


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


def check_filter(node: Node, label_columns: Mapping[str, str]) -> set[str]:
    """The chargeback columns the filter reads; raises :class:`FilterError` for a map field
    without a key."""
    needed: set[str] = set()
    for c in comparisons(node):
        needed |= _filter_columns(c, label_columns)
    return needed


def _filter_columns(c: Comparison, label_columns: Mapping[str, str]) -> set[str]:
    if c.field in STRING_FIELDS:
        return {c.field}
    if c.field in CONTROLLER_FIELDS:
        return {"controller_kind", "controller"}
    if c.field in KEPT_ALIASES:
        return {"team"}
    if c.field in EMPTY_FIELDS:
        return set()
    key = LABEL_ALIASES.get(c.field, c.key)
    if key is None:
        raise FilterError(f"{c.field} without a key: gpu-costsvc filters on {c.field}[<key>]")
    if c.field == "annotation":
        return set()
    return {label_columns.get(key) or label_column(key)}


def lookup(row: Row, label_columns: Mapping[str, str]) -> Lookup:
    def get(name: str, key: str | None) -> str:
        values = row.values
        if name in STRING_FIELDS:
            return values.get(name, "")
        if name == "controllerName":
            return values.get("controller", "")
        if name == "controllerKind":
            has = values.get("controller", "")
            return opencost_kind(values.get("controller_kind", "")) if has else ""
        if name in KEPT_ALIASES:
            return owner_value(values.get("team", ""))
        if name in EMPTY_FIELDS or name == "annotation":
            return ""
        key = LABEL_ALIASES.get(name, key)
        assert key is not None
        if key in label_columns:
            return owner_value(values.get(label_columns[key], ""))
        return values.get(label_column(key), "")

    return get


def _properties(values: Mapping[str, str]) -> dict[str, str | None]:
    """An allocation's OpenCost properties from a row's columns ("" is none)."""
    out: dict[str, str | None] = {}
    for column in PROPERTY_COLUMNS:
        if column == "controller":
            if "controller" in values:
                name = values["controller"]
                out["controller"] = name or None
                out["controllerKind"] = opencost_kind(values["controller_kind"]) if name else None
        elif column in values:
            out[column] = values[column] or None
    return out


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

    def merge_properties(self, properties: Mapping[str, str | None]) -> None:
        for name, value in properties.items():
            if name not in self.properties:
                self.properties[name] = value
            elif self.properties[name] != value:
                self.properties[name] = None  # differs: OpenCost keeps common ones only

    def add(self, other: _Acc) -> None:
        self.allocated += other.allocated
        self.used += other.used
        self.waste += other.waste
        self.idle += other.idle
        self.gpu_hours += other.gpu_hours
        self.shared = self.shared or other.shared
        if other.first is not None and other.end is not None:
            self.span(other.first, other.end)
        self.merge_properties(other.properties)
        for key, value in other.labels.items():
            self.labels.setdefault(key, value)


def _scope(row: Row, by_node: bool) -> tuple[str, str]:
    return (row.values.get("cluster", ""), row.values.get("node", "") if by_node else "")


def _share(amount: int, part: int, whole: int) -> int:
    """``amount`` x part / whole in micro-units, as the share of a largest-remainder split
    (0 when ``whole`` is: nothing allocated, nothing matched)."""
    if part <= 0 or whole <= 0:
        return 0
    return amount if part >= whole else split(amount, [part, whole - part])[0]


def shape_set(
    rows: Iterable[Row], keep: Node | None, options: Options, label_columns: Mapping[str, str]
) -> tuple[dict[str, _Acc], _Acc | None]:
    """One set's allocations by name, and its ``__idle__`` (None when there is none).
    ``keep`` is the filter (None: everything)."""
    rows = list(rows)
    by_node = options.idle_by_node
    pool: dict[tuple[str, str], int] = {}  # idle cost per scope
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
    in_scope: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(holders):
        in_scope.setdefault(_scope(r, by_node), []).append(i)
    allocated = {s: sum(holders[i].allocated for i in ix) for s, ix in in_scope.items()}
    shares: dict[int, tuple[int, int]] = {}  # holder -> (idle cost, idle GPU-hours) shared
    left, left_hours = dict(pool), dict(idle_hours)
    if options.include_idle and options.share_idle:
        for s, members in in_scope.items():
            weights = [holders[i].allocated for i in members]
            if (pool.get(s, 0) or idle_hours.get(s, 0)) and sum(weights):
                costs = split(pool.get(s, 0), weights)
                parts = split(idle_hours.get(s, 0), weights)
                shares.update(zip(members, zip(costs, parts, strict=True), strict=True))
                left[s] = left_hours[s] = 0
    matched: dict[tuple[str, str], int] = {}
    allocations: dict[str, _Acc] = {}
    for i, r in enumerate(holders):
        if keep is not None and not keep_row(r, keep, label_columns):
            continue
        s = _scope(r, by_node)
        matched[s] = matched.get(s, 0) + r.allocated
        name = name_of(r.values, options.aggregate)
        acc = allocations.get(name)
        if acc is None:
            acc = allocations[name] = _Acc()
            for a in options.aggregate:
                if a.label is not None and owner_value(r.values.get(a.column, "")):
                    acc.labels[a.label] = r.values[a.column]
        idle_cost, idle_gpu_hours = shares.get(i, (0, 0))
        acc.allocated += r.allocated
        acc.used += r.used
        acc.waste += r.waste
        acc.idle += idle_cost
        acc.gpu_hours += r.gpu_hours + idle_gpu_hours
        acc.shared = acc.shared or r.shared
        acc.span(r.first, r.last + HOUR)
        acc.merge_properties(_properties(r.values))
    if not options.include_idle:
        return allocations, None
    idle = _Acc()
    for s in sorted(set(pool) | set(idle_hours)):
        cost, hours = left.get(s, 0), left_hours.get(s, 0)
        undistributable = options.share_idle and not allocated.get(s)
        if keep is not None and (cost or hours) and not undistributable:
            # OpenCost's idle filtration: the idle share of what matched (idle with nobody
            # to share it with stays whole, as OpenCost keeps it: AggregateBy step 10)
            cost = _share(cost, matched.get(s, 0), allocated.get(s, 0))
            hours = _share(hours, matched.get(s, 0), allocated.get(s, 0))
        if not cost and not hours:
            continue
        idle.idle += cost
        idle.gpu_hours += hours
        lo, hi = idle_span[s]
        idle.span(lo, hi + HOUR)
        idle.merge_properties(
            {"cluster": s[0] or None, **({"node": s[1] or None} if by_node else {})}
        )
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
    eff = "null" if efficiency is None else _ratio(efficiency)
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
        f'"gpuCount":{_ratio(count)},"gpuHours":{money(acc.gpu_hours)},"gpuCost":{gpu_cost}',
        f'"gpuCostAdjustment":0,"gpuCostIdle":{money(0 if is_idle else acc.idle)}',
        f'"gpuEfficiency":{eff}',
        ZEROS_AFTER_GPU,
        f'"totalCost":{gpu_cost},"totalEfficiency":{eff}',
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
    groups: Groups | None = None,
) -> str:
    """OpenCost's ``Response`` as JSON text: ``data`` one map per answer set (``groups``:
    the computed sets each sums, as ``AllocationSetRange.Accumulate`` sums them; default:
    every set as computed), names sorted, ``__idle__`` last."""
    by_set: dict[int, list[Row]] = {}
    for r in rows:
        by_set.setdefault(r.set_index, []).append(r)
    shaped = [
        shape_set(by_set.get(i, []), keep, options, label_columns) for i in range(len(windows))
    ]
    if groups is None:
        groups = [(w, (i,)) for i, w in enumerate(windows)]
    sets = []
    for window, members in groups:
        total: dict[str, _Acc] = {}
        idle_total: _Acc | None = None
        for i in members:
            allocations, idle = shaped[i]
            for name, acc in allocations.items():
                total.setdefault(name, _Acc()).add(acc)
            if idle is not None:
                idle_total = idle_total or _Acc()
                idle_total.add(idle)
        items = [
            f"{_string(name)}:{render(name, acc, window)}" for name, acc in sorted(total.items())
        ]
        if idle_total is not None:
            items.append(f"{_string(IDLE)}:{render(IDLE, idle_total, window, is_idle=True)}")
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
