"""The Kueue borrowing policy's money (``credit_lenders``, docs/queues.md rule 3) as lines of a
month's reports: the chargeback CSV, FOCUS 1.2 and FOCUS 1.3 (docs/queues.md, "In CSV and
FOCUS"; docs/focus.md, "Borrowing charges and lending credits").

Read from ``queue_hours`` (costsvc/queues/): one line per hour, ClusterQueue, flavor and
resource that moved money — a borrower's **charge** (+) and a lender's **credit** (-); a row
with neither (policy ``none``, or nothing borrowed) gives no line. A line is the ClusterQueue's
team's, in the month it is billed in (``billing_month``: its hour's, or for a correction of an
hour of a closed month the next open month), after the month's chargeback rows, in a fixed
order (originals, then corrections; hour, cluster, cohort, ClusterQueue, flavor, resource). A
correction is marked as the GPU corrections are: ``charge_class`` ``correction`` in the CSV,
``ChargeClass`` ``Correction`` and a ``Correction:`` description in FOCUS 1.2 and 1.3
(costsvc/reports/focus.py). Charges and credits of an hour and cohort cancel to the
micro-unit, corrections included, so the reports' money still sums to the fleet's cost.

Every text from Kueue's labels (cohort, ClusterQueue, flavor, resource, team) is untrusted:
cells go through :func:`~costsvc.kit.csv_cells.safe_cell`, numeric cells stay numbers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy import Connection, or_, select

from costsvc.db.models import QueueHourRow
from costsvc.kit.csv_cells import safe_cell
from costsvc.kit.money import kg, money, round_micro
from costsvc.kit.times import as_utc, iso_z, parse_month
from costsvc.reports.focus import (
    COLUMNS,
    GPU_HOURS,
    HOURS,
    NUMERIC_COLUMNS,
    SERVICE_CATEGORY,
    SERVICE_NAME,
    SERVICE_SUBCATEGORY,
)
from costsvc.rules.energy import kwh
from costsvc.rules.queues import MIG_RESOURCE

CHARGE = "borrowing-charge"  # a borrower's line: + the money of what it borrowed
CREDIT = "lending-credit"  # a lender's line: - its part of that money
SECONDS_PER_HOUR = 3600


@dataclass(frozen=True, slots=True)
class QueueLine:
    """A borrower's charge or a lender's credit in one hour (money in micro-units of
    ``currency``: + a charge, - a credit; ``seconds``: the resource-seconds borrowed or lent)."""

    hour: datetime
    billing_month: str
    cluster: str
    cohort: str
    cluster_queue: str
    flavor: str
    resource: str
    team: str
    currency: str
    kind: str  # CHARGE | CREDIT
    amount: int
    seconds: int
    correction: bool = False

    @property
    def workload(self) -> str:
        """The CSV's workload cell: ``kueue:<kind>/<cohort>/<ClusterQueue>/<flavor>``."""
        return f"kueue:{self.kind}/{self.cohort}/{self.cluster_queue}/{self.flavor}"

    @property
    def mig_profile(self) -> str:
        r = self.resource
        return r[len(MIG_RESOURCE) :] if r.startswith(MIG_RESOURCE) else ""

    @property
    def quantity(self) -> int:
        """The resource-hours borrowed or lent, in micro-units (exact to the micro-hour)."""
        return round_micro(Decimal(self.seconds) * 1_000_000 / SECONDS_PER_HOUR)


def queue_lines(conn: Connection, month: str, team: str | None = None) -> Iterator[QueueLine]:
    """The month's borrowing charges and lending credits (``team``: its own only)."""
    parse_month(month)  # a YYYY-MM, or ValueError
    t = QueueHourRow
    q = select(
        t.hour,
        t.cluster,
        t.cohort,
        t.cluster_queue,
        t.flavor,
        t.resource,
        t.team,
        t.currency,
        t.charge,
        t.credit,
        t.borrowed_s,
        t.lent_s,
        t.correction,
    ).where(t.billing_month == month, or_(t.charge != 0, t.credit != 0))
    if team is not None:
        q = q.where(t.team == team)
    q = q.order_by(t.correction, t.hour, t.cluster, t.cohort, t.cluster_queue, t.flavor, t.resource)
    for r in conn.execute(q):
        key = (as_utc(r.hour), month, r.cluster, r.cohort, r.cluster_queue, r.flavor)
        key2 = (r.resource, r.team, r.currency)
        if r.charge:
            seconds = int(r.borrowed_s)
            yield QueueLine(*key, *key2, CHARGE, int(r.charge), seconds, bool(r.correction))
        if r.credit:
            seconds = int(r.lent_s)
            yield QueueLine(*key, *key2, CREDIT, -int(r.credit), seconds, bool(r.correction))


def csv_row(line: QueueLine, columns: Sequence[str]) -> list[str]:
    """The line as an ungrouped chargeback CSV row, its cells in ``columns``' order
    (costsvc/reports/monthly.py ``csv_columns``; a column not named here is empty): the money
    in allocated_cost and total_cost; no GPU-hours, energy or carbon (it holds no GPU);
    project, stage, namespace, pod, node, GPU model and container empty."""
    zero = money(0)
    cells = {
        "billing_month": line.billing_month,
        "charge_period_start": iso_z(line.hour),
        "charge_period_end": iso_z(line.hour + timedelta(hours=1)),
        "charge_class": "correction" if line.correction else "regular",
        "cluster": safe_cell(line.cluster),
        "team": safe_cell(line.team),
        "mig_profile": safe_cell(line.mig_profile),
        "cohort": safe_cell(line.cohort),
        "cluster_queue": safe_cell(line.cluster_queue),
        "flavor": safe_cell(line.flavor),
        "currency": line.currency,
        "gpu_hours": zero,
        "allocated_cost": money(line.amount),
        "used_cost": zero,
        "allocated_idle_cost": zero,
        "idle_cost": zero,
        "total_cost": money(line.amount),
        "energy_kwh": kwh(0),
        "idle_energy_kwh": kwh(0),
        "co2e_kg": kg(0),
        "workload": safe_cell(line.workload),
    }
    return [cells.get(c, "") for c in columns]


def _description(line: QueueLine) -> str:
    what = "Borrowing charge" if line.kind == CHARGE else "Lending credit"
    way = "borrowed from" if line.kind == CHARGE else "lent to"
    return (
        f"Kueue {what}: ClusterQueue {line.cluster_queue}, flavor {line.flavor}, "
        f"{line.resource} {way} cohort {line.cohort}"
    )


def focus_cells(
    line: QueueLine, provider: str = "gpu-finops", account: str = "gpu-finops"
) -> dict[str, str]:
    """The line's FOCUS 1.2 cells by column (a column left out is null): ChargeCategory
    ``Adjustment``; Billed/Effective/List/Contracted cost the amount (+ charge, - credit); no
    unit prices and no consumed quantity (FOCUS 1.2: ConsumedQuantity is null unless the
    category is Usage); PricingQuantity the resource-hours borrowed or lent; no SKU (FOCUS 1.2:
    SkuPriceDetails is null where SkuPriceId is). A correction: ChargeClass ``Correction``."""
    amount = money(line.amount)
    month_start, month_end = parse_month(line.billing_month)
    unit = HOURS if line.mig_profile else GPU_HOURS
    return {
        "BilledCost": amount,
        "BillingAccountId": account,
        "BillingAccountName": account,
        "BillingCurrency": line.currency,
        "BillingPeriodEnd": iso_z(month_end),
        "BillingPeriodStart": iso_z(month_start),
        "ChargeCategory": "Adjustment",
        "ChargeClass": "Correction" if line.correction else "",
        "ChargeDescription": ("Correction: " if line.correction else "") + _description(line),
        "ChargeFrequency": "Usage-Based",
        "ChargePeriodEnd": iso_z(line.hour + timedelta(hours=1)),
        "ChargePeriodStart": iso_z(line.hour),
        "ContractedCost": amount,
        "EffectiveCost": amount,
        "InvoiceId": f"{account}/{line.billing_month}",
        "InvoiceIssuerName": provider,
        "ListCost": amount,
        "PricingCurrency": line.currency,
        "PricingCurrencyEffectiveCost": amount,
        "PricingQuantity": money(line.quantity),
        "PricingUnit": unit,
        "ProviderName": provider,
        "PublisherName": provider,
        "ResourceId": f"{line.cluster}/kueue/{line.cluster_queue}",
        "ResourceName": line.cluster_queue,
        "ResourceType": "Kueue ClusterQueue",
        "ServiceCategory": SERVICE_CATEGORY,
        "ServiceName": SERVICE_NAME,
        "ServiceSubcategory": SERVICE_SUBCATEGORY,
        "SubAccountId": line.cluster,
        "SubAccountName": line.cluster,
        "Tags": _json({"team": line.team}),
        "x_Cluster": line.cluster,
        "x_MigProfile": line.mig_profile,
        "x_Team": line.team,
        "x_AllocatedCost": amount,
        "x_UsedCost": money(0),
        "x_WasteCost": money(0),
        "x_IdleCost": money(0),
        "x_EnergyKWh": kwh(0),
        "x_IdleEnergyKWh": kwh(0),
        "x_CarbonKgCO2e": kg(0),
    }


def _json(obj: dict[str, str]) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def focus_row(line: QueueLine) -> list[str]:
    """The FOCUS 1.2 cells of ``line`` in :data:`~costsvc.reports.focus.COLUMNS` order."""
    cells = focus_cells(line)
    return [
        cells.get(c, "") if c in NUMERIC_COLUMNS else safe_cell(cells.get(c, "")) for c in COLUMNS
    ]


def focus13_cells(line: QueueLine) -> dict[str, str]:
    """The line's FOCUS 1.3 cells: the 1.2 cells, ServiceProviderName and HostProviderName,
    and no ``Allocated*`` cell — a stand-alone charge, not a split of an origin charge
    (docs/focus.md)."""
    cells = focus_cells(line)
    cells["ServiceProviderName"] = cells["HostProviderName"] = cells["ProviderName"]
    return cells
