"""Chargeback rows as FinOps FOCUS 1.3 rows with data generator-calculated split cost
allocation (docs/focus.md, "FOCUS 1.3"). Pure: no I/O.

An hour's rows are grouped into origin charges (costsvc/reports/split.py: a node's GPUs of a
model at a price), each row cut into its allocated charges, and each allocated charge written
as one FOCUS row: its own money (the 1.2 row's, or the part of it), the origin's dimensions
(FOCUS_Spec specification/attributes/data_generator_calculated_split_cost_allocation_handling.md:
dimensions and non-summable metrics match the origin, summable metrics add up to it, Tags
carry the origin's), and the five ``Allocated*`` columns (specification/datasets/cost_and_usage/
columns/allocatedmethodid.md, allocatedmethoddetails.md, allocatedresourceid.md,
allocatedresourcename.md, allocatedtags.md). ServiceProviderName and HostProviderName (1.3,
replacing ProviderName and PublisherName, kept as deprecated) are the ``provider``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from decimal import Decimal

from costsvc.kit.csv_cells import CsvLines, csv_line, safe_cell
from costsvc.kit.money import money
from costsvc.kit.times import iso_z
from costsvc.reports.focus import (
    CUSTOM_COLUMNS,
    FOCUS_COLUMNS,
    GPU_HOURS,
    NUMERIC_COLUMNS,
    ChargeRow,
    _cells,
    _exact,
    _unit_price,
)
from costsvc.reports.split import Held, OriginKey, Part, origin_key, parts, ratios
from costsvc.rules.chargeback import OWNER
from costsvc.rules.cost_model import Policies

ALLOCATED_COLUMNS: tuple[str, ...] = (
    "AllocatedMethodDetails",
    "AllocatedMethodId",
    "AllocatedResourceId",
    "AllocatedResourceName",
    "AllocatedTags",
)
FOCUS13_COLUMNS: tuple[str, ...] = tuple(
    sorted((*FOCUS_COLUMNS, *ALLOCATED_COLUMNS, "HostProviderName", "ServiceProviderName"))
)
CUSTOM13_COLUMNS: tuple[str, ...] = (*CUSTOM_COLUMNS, "x_OriginChargeId")
COLUMNS13: tuple[str, ...] = FOCUS13_COLUMNS + CUSTOM13_COLUMNS
# the data generator's tag keys carry its prefix (allocatedtags.md: data generator-defined tag
# keys MUST be prefixed); the owner's keys are the cost model's own names, as in 1.2's Tags
TAG_PREFIX = "gpu-finops/"
TAG_CUT = 317  # a label key's longest (253 prefix, "/", 63 name): keys and values cut there

# (row, how it held its GPUs or None) of one hour
Held13 = tuple[ChargeRow, Held | None]


def _text(value: Decimal) -> str:
    """A JSON number from a Decimal, exactly as written (no float on the way)."""
    text = f"{value.normalize():f}"
    return "0" if text in ("-0", "") else text


def method_details(ratio: int, part: Part) -> str:
    """AllocatedMethodDetails: ``{"Elements": [{AllocatedRatio, UsageQuantity, UsageUnit}]}``
    (allocatedmethoddetails.md, the object schema), numbers written exactly; a DRA claim's
    share names its claim in the custom key ``x_Claim`` (custom keys: ``x_`` + PascalCase)."""
    m = part.method
    unit = json.dumps(m.unit, ensure_ascii=False)
    claim = f',"x_Claim":{json.dumps(m.claim, ensure_ascii=False)}' if m.claim else ""
    return (
        f'{{"Elements":[{{"AllocatedRatio":{money(ratio)},'
        f'"UsageQuantity":{_text(m.quantity)},"UsageUnit":{unit}{claim}}}]}}'
    )


def _json(obj: dict[str, str]) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _origin_cells(row: ChargeRow) -> dict[str, str]:
    """The origin charge's dimensions: the node's GPUs of the model (or the cluster)."""
    model, node = row.gpu_model, row.node
    if node:
        resource_id = f"{row.cluster}/nodes/{node}/{model}"
        name, kind = f"{node} {model}".rstrip(), "GPU"
    else:
        resource_id = name = row.cluster
        kind = "Kubernetes Cluster"
    where = f" on {node}" if node else f" in {row.cluster}"
    details = _json({"x_GpuModel": model}) if model else ""
    sku = f"gpu/{model}" if model else "gpu"
    return {
        "ChargeDescription": ("Correction: " if row.correction else "")
        + f"{model or 'GPU'} GPU-hours{where}",
        "ResourceId": resource_id,
        "ResourceName": name,
        "ResourceType": kind,
        "SkuId": sku,
        "SkuPriceId": sku,
        "SkuMeter": "GPU-hours",
        "SkuPriceDetails": details,
        "Tags": _json({f"{TAG_PREFIX}cluster": row.cluster}),
    }


def origin_id(row: ChargeRow) -> str:
    """x_OriginChargeId: the origin's resource, hour, price and class, as one text."""
    cells = _origin_cells(row)
    price = "" if row.unit_price is None else f"@{money(row.unit_price)}"
    kind = "/correction" if row.correction else ""
    return f"{cells['ResourceId']}/{iso_z(row.hour)}{price}{kind}"


def _allocated(part: Part) -> dict[str, str]:
    """AllocatedResourceId / Name and AllocatedTags of an allocated charge: the holder (its
    pod and container) and its owner's tags; null on the unallocated portion of the origin
    (idle, lost: allocatedresourceid.md "MUST be null when a charge represents the
    unallocated portion of the origin charge")."""
    row = part.row
    if not row.pod:
        return {}
    resource_id = f"{row.cluster}/{row.namespace}/{row.pod}"
    resource_id += f"/{row.container}" if row.container else ""
    name = row.pod + (f" (MIG {row.mig_profile})" if row.mig_profile else "")
    tags = {
        "project": row.project,
        "stage": row.stage,
        "team": row.team,
        f"{TAG_PREFIX}namespace": row.namespace,
        f"{TAG_PREFIX}pod": row.pod,
    }
    if row.container:
        tags[f"{TAG_PREFIX}container"] = row.container
    if row.controller:
        tags[f"{TAG_PREFIX}workload"] = f"{row.controller_kind}/{row.controller}"
    tags.update(owner_tags(row))
    return {
        "AllocatedResourceId": resource_id,
        "AllocatedResourceName": name,
        "AllocatedTags": _json(tags),
    }


def owner_tags(row: ChargeRow) -> dict[str, str]:
    """The labels that decided the row's owner (its ``owner_from``, costsvc/rules/owners.py):
    ``gpu-finops/owner-label/<where>:<label key>`` -> the label's value (the owner it named),
    ``<where>`` being ``pod``, ``namespace`` or the queue's source; a dimension no label
    decided (the fallback ``__unallocated__``) has none. Untrusted text: each cut to
    :data:`TAG_CUT` characters (JSON-escaped where written)."""
    tags: dict[str, str] = {}
    for part in row.owner_from.split(";"):
        dimension, _, source = part.partition("=")
        if dimension in OWNER and source and source != "-":
            key = f"{TAG_PREFIX}owner-label/{source}"[: len(TAG_PREFIX) + 12 + TAG_CUT]
            tags[key] = str(getattr(row, dimension))[:TAG_CUT]
    return tags


def _cells13(
    part: Part, ratio: int, origin: dict[str, str], provider: str, account: str
) -> dict[str, str]:
    row = part.row
    cells = _cells(row, provider, account)
    cells.update(origin)
    cells["PricingQuantity"] = money(row.gpu_hours)
    cells["PricingUnit"] = GPU_HOURS
    if row.unit_price is not None and not row.correction:
        cells["ListCost"] = cells["ContractedCost"] = _exact(row.unit_price * row.gpu_hours)
    cells.update(_allocated(part))
    cells["AllocatedMethodId"] = part.method.id
    cells["AllocatedMethodDetails"] = method_details(ratio, part)
    cells["ServiceProviderName"] = cells["HostProviderName"] = provider
    return cells


def _no_price(cells: list[dict[str, str]], origin_parts: list[Part]) -> None:
    """An origin without one kept price (not a correction): the origin's cost / GPU-hours,
    one unit price for all its allocated charges (non-summable: it matches the origin's);
    ListCost = BilledCost (summable: they add up)."""
    cost = sum(p.row.allocated + p.row.idle for p in origin_parts)
    hours = sum(p.row.gpu_hours for p in origin_parts)
    price = _unit_price(cost, hours) if hours else (money(cost) if cost else money(0))
    for c in cells:
        for col in ("ListUnitPrice", "ContractedUnitPrice"):
            c[col] = price
        for col in ("PricingCurrencyListUnitPrice", "PricingCurrencyContractedUnitPrice"):
            c[col] = price
        c["ListCost"] = c["ContractedCost"] = c["BilledCost"]


def split_hour(
    rows: Iterable[Held13],
    policies_of: Callable[[str, datetime], Policies],
    provider: str = "gpu-finops",
    account: str = "gpu-finops",
) -> Iterator[tuple[ChargeRow, dict[str, str]]]:
    """One hour's rows as allocated charges, origin by origin: (the part's row, its cells)."""
    origins: dict[OriginKey, list[Part]] = {}
    for row, held in rows:
        for part in parts(row, held, policies_of(row.cluster, row.hour)):
            origins.setdefault(origin_key(part.row), []).append(part)
    for found in origins.values():
        first = found[0].row
        origin = _origin_cells(first)
        origin["x_OriginChargeId"] = origin_id(first)
        billed = [p.row.allocated + p.row.idle for p in found]
        shares = ratios(billed, [p.row.gpu_hours for p in found])
        cells = [
            _cells13(p, r, origin, provider, account) for p, r in zip(found, shares, strict=True)
        ]
        if first.unit_price is None and not first.correction:
            _no_price(cells, found)
        for p, c in zip(found, cells, strict=True):
            yield p.row, c


def focus13_row(cells: dict[str, str]) -> list[str]:
    """The cells in :data:`COLUMNS13` order ("" null); text cells spreadsheet-safe."""
    return [
        cells.get(c, "") if c in NUMERIC_COLUMNS else safe_cell(cells.get(c, "")) for c in COLUMNS13
    ]


def focus13_lines(
    hours: Iterable[list[Held13]],
    policies_of: Callable[[str, datetime], Policies],
    team: str | None = None,
    chunk: int = 2000,
) -> Iterator[str]:
    """The hours' rows as FOCUS 1.3 CSV text, header first. ``team``: only the allocated
    charges of that team (their ratios of the whole origin; no other holder's, no idle)."""
    yield csv_line(COLUMNS13)
    out = CsvLines()
    n = 0
    for rows in hours:
        for row, cells in split_hour(rows, policies_of):
            if team is not None and row.team != team:
                continue
            out.row(focus13_row(cells))
            n += 1
            if n % chunk == 0:
                yield out.take()
    if tail := out.take():
        yield tail
