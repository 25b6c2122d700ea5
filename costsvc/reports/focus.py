"""Chargeback rows as FinOps FOCUS 1.2 (Cost and Usage dataset) CSV rows. Pure: no I/O.

One :class:`ChargeRow` (a ``chargeback`` row: one hour, one owner and placement) becomes one
FOCUS row, its cells in :data:`COLUMNS` order: the FOCUS 1.2 columns (alphabetical), then the
custom ``x_`` columns. docs/focus.md has the column-by-column mapping; in short:

- Money is the integer micro-units of the row written as a plain decimal with six places (never
  through a float). BilledCost = EffectiveCost = allocated + idle, what is charged.
- Unit prices are **the cost model's price**, exactly: ListUnitPrice = ContractedUnitPrice =
  the price per GPU-hour the row's GPUs were charged (``chargeback.unit_price``; the model's
  price is already the agreed rate, so list and contracted are the same). PricingQuantity =
  ConsumedQuantity = the GPU-hours held (an idle line: the GPU-hours nobody held, lost time
  included), exact to the micro-hour; ListCost = ContractedCost = unit price x quantity,
  exactly (up to 12 places), as FOCUS requires. BilledCost differs from it by the rounding of
  the charge to the micro-unit (a 20-minute holding at 2.20: 0.733333 billed, 0.7333326 list)
  and by what the cost model adds to the held time: idle spread onto the line (idle policy
  ``weighted`` / ``even``) and measured energy (amortised prices).
- A row with no single price (a cluster's idle line over GPUs charged different prices, rows
  written before the price was kept) is priced as before: unit price = cost / quantity (12
  places), one without GPU-hours as 1 Hours of its idle capacity.
- A correction (``ChargeClass`` = "Correction": a change to an hour of a month already closed,
  reported in a later month) has no unit prices (FOCUS allows null there), and its amounts may
  be negative.
- Null is an empty cell. Text cells are spreadsheet-safe (costsvc/kit/csv_cells.py); numeric cells
  are never altered, so a negative correction stays a number.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

from costsvc.kit.csv_cells import CsvLines, csv_line, safe_cell
from costsvc.kit.money import kg, money
from costsvc.kit.times import iso_z, parse_month
from costsvc.rules.energy import kwh
from costsvc.rules.lines import Line

FOCUS_COLUMNS: tuple[str, ...] = (
    "AvailabilityZone",
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "CapacityReservationId",
    "CapacityReservationStatus",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "CommitmentDiscountCategory",
    "CommitmentDiscountId",
    "CommitmentDiscountName",
    "CommitmentDiscountQuantity",
    "CommitmentDiscountStatus",
    "CommitmentDiscountType",
    "CommitmentDiscountUnit",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "InvoiceId",
    "InvoiceIssuerName",
    "ListCost",
    "ListUnitPrice",
    "PricingCategory",
    "PricingCurrency",
    "PricingCurrencyContractedUnitPrice",
    "PricingCurrencyEffectiveCost",
    "PricingCurrencyListUnitPrice",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "RegionId",
    "RegionName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "ServiceSubcategory",
    "SkuId",
    "SkuMeter",
    "SkuPriceDetails",
    "SkuPriceId",
    "SubAccountId",
    "SubAccountName",
    "Tags",
)

# the custom columns holding numbers
_CUSTOM_NUMBERS: tuple[str, ...] = (
    "x_AllocatedCost",
    "x_UsedCost",
    "x_WasteCost",
    "x_IdleCost",
    "x_EnergyKWh",
    "x_IdleEnergyKWh",
    "x_CarbonKgCO2e",
)
CUSTOM_COLUMNS: tuple[str, ...] = (
    "x_Cluster",
    "x_Namespace",
    "x_Pod",
    "x_Node",
    "x_GpuModel",
    "x_MigProfile",
    "x_Team",
    "x_Project",
    "x_Stage",
    *_CUSTOM_NUMBERS,
)

COLUMNS: tuple[str, ...] = FOCUS_COLUMNS + CUSTOM_COLUMNS

# Columns holding numbers: written as plain decimals, never neutralised by safe_cell.
NUMERIC_COLUMNS: frozenset[str] = frozenset(
    {
        "BilledCost",
        "CommitmentDiscountQuantity",
        "ConsumedQuantity",
        "ContractedCost",
        "ContractedUnitPrice",
        "EffectiveCost",
        "ListCost",
        "ListUnitPrice",
        "PricingCurrencyContractedUnitPrice",
        "PricingCurrencyEffectiveCost",
        "PricingCurrencyListUnitPrice",
        "PricingQuantity",
        *_CUSTOM_NUMBERS,
    }
)

# Columns holding date/times, always YYYY-MM-DDTHH:mm:ssZ (UTC, no fractions).
DATETIME_COLUMNS: tuple[str, ...] = (
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargePeriodEnd",
    "ChargePeriodStart",
)

SERVICE_NAME = "GPU compute"
SERVICE_CATEGORY = "Compute"
SERVICE_SUBCATEGORY = "Containers"
GPU_HOURS = "GPU-Hours"
HOURS = "Hours"

_UNIT_PRICE_PLACES = Decimal("1e-12")


@dataclass(slots=True, kw_only=True)
class ChargeRow(Line):
    """One chargeback row: a line (key and money; money in integer micro-units of
    ``currency``, negative on a correction that lowers it) as billed in a month."""

    hour: datetime  # UTC, the start of the charged hour
    billing_month: str  # YYYY-MM: the month the row is reported in
    correction: bool
    currency: str  # ISO 4217


def _unit_price(cost: int, quantity: int) -> str:
    """cost / quantity (both micro-units) to 12 places, trailing zeros dropped down to 6."""
    price = (Decimal(cost) / Decimal(quantity)).quantize(_UNIT_PRICE_PLACES, ROUND_HALF_EVEN)
    text = f"{price:f}"
    whole, _, frac = text.partition(".")
    frac = frac.rstrip("0").ljust(6, "0")
    return f"{whole}.{frac}"


def _exact(micro2: int) -> str:
    """A product of two micro-unit amounts (10^-12 units), exactly, trailing zeros dropped
    down to 6 places."""
    text = f"{Decimal(micro2).scaleb(-12):f}"
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.rstrip('0').ljust(6, '0')}"


def _json(obj: dict[str, str | bool]) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class _Charge:
    """What a row charges for: its quantity (micro-units) and unit, its SKU and meter, its
    description, and the resource."""

    quantity: int
    pricing_unit: str
    sku: str
    meter: str
    what: str
    resource_id: str
    resource_name: str
    resource_type: str


def _cells(row: ChargeRow, provider: str, account: str) -> dict[str, str]:
    """The row's cells by column name; a column left out is null (an empty cell)."""
    cost = row.allocated + row.idle
    billed = money(cost)
    price = None if row.correction else row.unit_price
    # an __idle__ line: capacity nobody held, no pod
    charge = _idle_charge(row, price) if not row.pod else _pod_charge(row)
    unit_price, list_cost = _unit_prices(row, price, cost, charge.quantity, billed)
    month_start, month_end = parse_month(row.billing_month)
    return {
        "BilledCost": billed,
        "BillingAccountId": account,
        "BillingAccountName": account,
        "BillingCurrency": row.currency,
        "BillingPeriodEnd": iso_z(month_end),
        "BillingPeriodStart": iso_z(month_start),
        "ChargeCategory": "Usage",
        "ChargeClass": "Correction" if row.correction else "",
        "ChargeDescription": ("Correction: " if row.correction else "") + charge.what,
        "ChargeFrequency": "Usage-Based",
        "ChargePeriodEnd": iso_z(row.hour + timedelta(hours=1)),
        "ChargePeriodStart": iso_z(row.hour),
        "ConsumedQuantity": money(row.gpu_hours),
        "ConsumedUnit": GPU_HOURS,
        "ContractedCost": list_cost,
        "ContractedUnitPrice": unit_price,
        "EffectiveCost": billed,
        "InvoiceId": f"{account}/{row.billing_month}",
        "InvoiceIssuerName": provider,
        "ListCost": list_cost,
        "ListUnitPrice": unit_price,
        "PricingCategory": "Standard",
        "PricingCurrency": row.currency,
        "PricingCurrencyContractedUnitPrice": unit_price,
        "PricingCurrencyEffectiveCost": billed,
        "PricingCurrencyListUnitPrice": unit_price,
        "PricingQuantity": money(charge.quantity),
        "PricingUnit": charge.pricing_unit,
        "ProviderName": provider,
        "PublisherName": provider,
        "ResourceId": charge.resource_id,
        "ResourceName": charge.resource_name,
        "ResourceType": charge.resource_type,
        "ServiceCategory": SERVICE_CATEGORY,
        "ServiceName": SERVICE_NAME,
        "ServiceSubcategory": SERVICE_SUBCATEGORY,
        "SkuId": charge.sku,
        "SkuMeter": charge.meter,
        "SkuPriceDetails": _price_details(row),
        "SkuPriceId": charge.sku,
        "SubAccountId": row.cluster,
        "SubAccountName": row.cluster,
        "Tags": _json({"project": row.project, "stage": row.stage, "team": row.team}),
        **_custom_cells(row),
    }


def _idle_charge(row: ChargeRow, price: int | None) -> _Charge:
    """An __idle__ line's charge: its idle GPU-hours at the GPUs' price, or one hour of the
    idle capacity (a line without GPU-hours or price); its node's GPUs, or its cluster."""
    model = row.gpu_model
    if row.gpu_hours or price is not None:
        quantity, pricing_unit = row.gpu_hours, GPU_HOURS
    else:
        quantity, pricing_unit = 1_000_000, HOURS
    sku = f"gpu-idle/{model}" if model else "gpu-idle"
    where = f" on {row.node}" if row.node else ""
    what = f"Idle {model or 'GPU'} capacity{where}"
    if row.node:
        resource_id = f"{row.cluster}/nodes/{row.node}/{model}"
        resource_name, resource_type = f"{row.node} {model}".rstrip(), "GPU"
    else:
        resource_id = resource_name = row.cluster
        resource_type = "Kubernetes Cluster"
    meter = "Idle GPU capacity"
    return _Charge(
        quantity, pricing_unit, sku, meter, what, resource_id, resource_name, resource_type
    )


def _pod_charge(row: ChargeRow) -> _Charge:
    """A pod's line's charge: the GPU-hours it held, of its GPU model and MIG profile."""
    model, mig = row.gpu_model, row.mig_profile
    sku = f"gpu/{model}" if model else "gpu"
    sku += f"/mig/{mig}" if mig else ""
    meter = "MIG GPU-hours" if mig else "GPU-hours"
    what = f"{model or 'GPU'}{f' MIG {mig}' if mig else ''} GPU-hours"
    resource_id = f"{row.cluster}/{row.namespace}/{row.pod}"
    return _Charge(
        row.gpu_hours, GPU_HOURS, sku, meter, what, resource_id, row.pod, "Kubernetes Pod"
    )


def _unit_prices(
    row: ChargeRow, price: int | None, cost: int, quantity: int, billed: str
) -> tuple[str, str]:
    """The unit price and the list cost: the model's price, exactly, and its product with the
    quantity; without one, cost / quantity and the billed cost (a correction's: null)."""
    if price is not None:
        return money(price), _exact(price * quantity)
    if row.correction:  # a correction's unit prices may be null, and are
        return "", billed
    if quantity:
        return _unit_price(cost, quantity), billed
    return (money(0) if cost == 0 else ""), billed


def _price_details(row: ChargeRow) -> str:
    """SkuPriceDetails: an idle line's flag, the GPU model and the MIG profile (JSON; "" for
    none)."""
    details: dict[str, str | bool] = {} if row.pod else {"x_Idle": True}
    if row.gpu_model:
        details["x_GpuModel"] = row.gpu_model
    if row.mig_profile:
        details["x_MigProfile"] = row.mig_profile
    return _json(details) if details else ""


def _custom_cells(row: ChargeRow) -> dict[str, str]:
    """The ``x_`` columns: the line's key, and its money, energy and carbon."""
    return {
        "x_Cluster": row.cluster,
        "x_Namespace": row.namespace,
        "x_Pod": row.pod,
        "x_Node": row.node,
        "x_GpuModel": row.gpu_model,
        "x_MigProfile": row.mig_profile,
        "x_Team": row.team,
        "x_Project": row.project,
        "x_Stage": row.stage,
        "x_AllocatedCost": money(row.allocated),
        "x_UsedCost": money(row.used),
        "x_WasteCost": money(row.waste),
        "x_IdleCost": money(row.idle),
        "x_EnergyKWh": kwh(row.energy_mj + row.idle_energy_mj),
        "x_IdleEnergyKWh": kwh(row.idle_energy_mj),
        "x_CarbonKgCO2e": kg(row.co2e_mg + row.idle_co2e_mg),
    }


def focus_row(
    row: ChargeRow, *, provider: str = "gpu-finops", account: str = "gpu-finops"
) -> list[str]:
    """The FOCUS 1.2 cells of ``row`` in :data:`COLUMNS` order ("" is null). Text cells are
    passed through :func:`safe_cell`; numeric cells are written as they are."""
    cells = _cells(row, provider, account)
    return [
        cells.get(c, "") if c in NUMERIC_COLUMNS else safe_cell(cells.get(c, "")) for c in COLUMNS
    ]


def focus_lines(rows: Iterable[ChargeRow], chunk: int = 2000) -> Iterator[str]:
    """``rows`` as FOCUS 1.2 CSV text: the header line first, then the rows ``chunk`` at a time
    (:class:`~costsvc.kit.csv_cells.CsvLines`: QUOTE_MINIMAL, ``\\n`` line ends, CR and LF
    quoted)."""
    yield csv_line(COLUMNS)
    out = CsvLines()
    for n, row in enumerate(rows, 1):
        out.row(focus_row(row))
        if n % chunk == 0:
            yield out.take()
    if tail := out.take():
        yield tail
