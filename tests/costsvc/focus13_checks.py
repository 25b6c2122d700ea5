"""The FOCUS 1.3 requirements for the columns the 1.3 export writes, as checks of a parsed CSV
(each names the spec file and requirement it encodes). The FinOps Foundation's
focus-validator has no 1.3 rules to run offline (its release 2.2.1 ships
focus_validator/rules/model-1.2.0.1.json only; the finopsfoundation/focus-spec-validator
snapshot holds 0.5 rule sets), so the requirements are read from the spec
itself: FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec, under specification/.

:func:`violations` returns one line per broken requirement (empty: none broken)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

Row = dict[str, str]

ALLOCATED = "specification/datasets/cost_and_usage/columns/"
HANDLING = "specification/attributes/data_generator_calculated_split_cost_allocation_handling.md"

# the origin's dimensions and non-summable metrics the allocated charges MUST repeat (HANDLING:
# "FOCUS column values in allocated charges MUST match the corresponding value in the origin
# charge when the FOCUS column represents a dimension" / "a non-summable metric")
ORIGIN_COLUMNS = (
    "BillingAccountId",
    "BillingCurrency",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ContractedUnitPrice",
    "ListUnitPrice",
    "PricingUnit",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceName",
    "SkuId",
    "SkuPriceId",
    "SubAccountId",
    "Tags",
)
# the summable metrics (HANDLING: "The sum of FOCUS column values in allocated charges MUST
# match the corresponding value in the origin charge when the FOCUS column represents a
# summable metric (e.g., costs and quantities)")
SUMMABLE = ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "PricingQuantity")
PRESENT = (
    # allocatedmethodid.md, allocatedresourceid.md, allocatedresourcename.md, allocatedtags.md:
    # "MUST be present ... when the data generator supports ... split cost allocation";
    # allocatedmethoddetails.md: SHOULD (Recommended); serviceprovidername.md: MUST be present
    "AllocatedMethodId",
    "AllocatedMethodDetails",
    "AllocatedResourceId",
    "AllocatedResourceName",
    "AllocatedTags",
    "ServiceProviderName",
    "HostProviderName",
)


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text, parse_float=Decimal, parse_int=Decimal)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _details(row: Row, out: list[str]) -> Decimal | None:
    """AllocatedMethodDetails (allocatedmethoddetails.md): a JSON object whose ``Elements``
    is an array of objects, each with a numeric ``AllocatedRatio`` ("True" required), a
    string ``UsageUnit`` that "must be present if Usage Quantity is provided", a numeric
    ``UsageQuantity``; custom keys "prefixed with x_". Returns the row's ratio (their sum)."""
    where = f"{ALLOCATED}allocatedmethoddetails.md"
    obj = _json_object(row["AllocatedMethodDetails"])
    elements = None if obj is None else obj.get("Elements")
    if not isinstance(elements, list) or not elements:
        out.append(
            f"{where}: not an object with an Elements array: {row['AllocatedMethodDetails']}"
        )
        return None
    total = Decimal(0)
    for e in elements:
        ratio = e.get("AllocatedRatio") if isinstance(e, dict) else None
        if not isinstance(ratio, Decimal):
            out.append(f"{where}: Elements[*].AllocatedRatio missing or not numeric: {e}")
            return None
        if "UsageQuantity" in e and not isinstance(e.get("UsageUnit"), str):
            out.append(f"{where}: UsageQuantity without a UsageUnit: {e}")
        if "UsageQuantity" in e and not isinstance(e["UsageQuantity"], Decimal):
            out.append(f"{where}: UsageQuantity not numeric: {e}")
        custom = set(e) - {"AllocatedRatio", "UsageUnit", "UsageQuantity"}
        if any(not k.startswith("x_") for k in custom):
            out.append(f"{where}: a custom key without the x_ prefix: {sorted(custom)}")
        total += ratio
    return total


def _standalone_checks(row: Row, out: list[str]) -> None:
    """A charge related to no split (the borrowing policy's lines): allocatedmethodid.md
    "MUST be null when the charge is not related to split cost allocation", and so the other
    Allocated* columns (each "MUST be null when AllocatedMethodId is null")."""
    for col in PRESENT[:5]:
        if row[col]:
            out.append(f"{ALLOCATED}{col.lower()}.md: {row[col]!r} on a charge with no split")
    for col in ("ServiceProviderName", "HostProviderName"):
        if not row[col]:
            out.append(f"{ALLOCATED}{col.lower()}.md: null")


def _row_checks(row: Row, out: list[str]) -> None:
    method = row["AllocatedMethodId"]
    if not method:  # allocatedmethodid.md: MUST NOT be null when related to a split
        out.append(f"{ALLOCATED}allocatedmethodid.md: null on an allocated charge")
    for col in ("ServiceProviderName", "HostProviderName"):
        if not row[col]:  # serviceprovidername.md / hostprovidername.md: MUST NOT be null
            out.append(f"{ALLOCATED}{col.lower()}.md: null")
    rid, name = row["AllocatedResourceId"], row["AllocatedResourceName"]
    if bool(rid) != bool(name):  # allocatedresourcename.md: null exactly when the id is
        out.append(f"{ALLOCATED}allocatedresourcename.md: id {rid!r} with name {name!r}")
    tags = _json_object(row["Tags"]) or {}
    if row["AllocatedTags"]:
        allocated = _json_object(row["AllocatedTags"])
        if allocated is None:  # allocatedtags.md: JSON object, KeyValueFormat
            out.append(f"{ALLOCATED}allocatedtags.md: not a JSON object")
        elif set(allocated) & set(tags):  # "MUST NOT include resource tags already in Tags"
            out.append(
                f"{ALLOCATED}allocatedtags.md: repeats Tags keys {set(allocated) & set(tags)}"
            )


def violations(rows: list[Row], origin_of: Callable[[Row], str] | None = None) -> list[str]:
    """Every broken 1.3 requirement of ``rows`` (allocated charges grouped by their origin,
    ``origin_of``: x_OriginChargeId by default)."""
    out: list[str] = []
    if rows:
        missing = [c for c in PRESENT if c not in rows[0]]
        out.extend(f"column {c} not present" for c in missing)
        if missing:
            return out
    origin_of = origin_of or (lambda r: r["x_OriginChargeId"])
    groups: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        if not row.get("x_OriginChargeId", "x"):  # a stand-alone charge: no origin
            _standalone_checks(row, out)
            continue
        groups[origin_of(row)].append(row)
        _row_checks(row, out)
    for origin, members in groups.items():
        ratios = [_details(r, out) for r in members]
        if all(r is not None for r in ratios):
            total = sum(r for r in ratios if r is not None)
            if total != 1:  # allocatedmethoddetails.md: the sum "MUST be equal to 1 (100%)"
                out.append(f"{ALLOCATED}allocatedmethoddetails.md: {origin} ratios sum to {total}")
        for col in ORIGIN_COLUMNS:
            if col in members[0] and len({r[col] for r in members}) > 1:
                out.append(f"{HANDLING}: {origin} allocated charges differ in {col}")
    return out


def sums(
    rows: list[Row], origin_of: Callable[[Row], str] | None = None
) -> dict[str, dict[str, Decimal]]:
    """Per origin, each summable metric summed over its allocated charges (exact decimals)."""
    origin_of = origin_of or (lambda r: r["x_OriginChargeId"])
    out: dict[str, dict[str, Decimal]] = defaultdict(lambda: dict.fromkeys(SUMMABLE, Decimal(0)))
    for row in rows:
        for col in SUMMABLE:
            try:
                out[origin_of(row)][col] += Decimal(row[col])
            except InvalidOperation:
                raise AssertionError(f"{col} not a decimal: {row[col]!r}") from None
    return dict(out)
