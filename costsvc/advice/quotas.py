"""GPU quota against GPUs held and used, and what unused quota costs. Pure.

Per namespace and GPU resource: the ResourceQuota's hard limit and use (``requests.`` names
are quotas on the resource of the same name without the prefix: ``requests.nvidia.com/gpu``
limits ``nvidia.com/gpu``), the mean units of that resource the namespace's pods held over the
window (a whole GPU, a MIG instance or a shared replica is one unit) and the mean of them
that were in use (activity above the idle line). From these: quota utilisation
(held / hard), held-but-idle units, and per month the cost of quota nobody held
((hard - held)+ x unit price x 730) and of units held idle ((held - active) x unit price x
730); the unit price is the cost model's price of what one unit of the resource is (its
share of a GPU x the GPU's price), in micro-units per unit-hour. A team is the sum of its
namespaces.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from costsvc.kit.money import round_micro
from costsvc.rules.cost_model import HOURS_PER_MONTH

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|Ki|Mi|Gi)?$")
_SUFFIX = {
    None: Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(1000),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "Ki": Decimal(1024),
    "Mi": Decimal(1 << 20),
    "Gi": Decimal(1 << 30),
}


MAX_TEXT = 64  # characters of a quantity as written (the column that keeps it)
MAX_UNITS = Decimal(100_000)  # GPUs or GPU slices one quota may limit


def quantity(text: str | None) -> Decimal | None:
    """A Kubernetes quantity as the API writes it (``4``, ``500m``, ``2k``); None if it is
    not one, or not one within bounds (longer than :data:`MAX_TEXT` characters, more than
    :data:`MAX_UNITS` units: read as no limit, as it is in effect)."""
    if text is None or len(text) > MAX_TEXT:
        return None
    m = _QUANTITY.match(text.strip())
    if m is None:
        return None
    value = Decimal(m[1]) * _SUFFIX[m[2]]
    return value if value <= MAX_UNITS else None


def held_resource(quota_resource: str) -> str:
    """The extended resource a quota resource name limits."""
    for prefix in ("requests.", "limits."):
        if quota_resource.startswith(prefix):
            return quota_resource[len(prefix) :]
    return quota_resource


@dataclass(frozen=True, slots=True)
class QuotaFigures:
    namespace: str
    resource: str  # the extended resource (nvidia.com/gpu, nvidia.com/mig-1g.10gb, ...)
    hard: Decimal | None  # None: no quota on it
    used: Decimal | None  # as the quota controller counts it now
    held: Decimal  # mean units held over the window
    active: Decimal  # mean units held and in use
    unit_price: int | None  # micro-units per unit-hour

    @property
    def idle(self) -> Decimal:
        return max(self.held - self.active, Decimal(0))

    @property
    def utilisation(self) -> Decimal | None:
        return self.held / self.hard if self.hard else None

    @property
    def unused_monthly(self) -> int | None:
        if self.hard is None or self.unit_price is None:
            return None
        return round_micro(
            max(self.hard - self.held, Decimal(0)) * self.unit_price * HOURS_PER_MONTH
        )

    @property
    def idle_monthly(self) -> int | None:
        if self.unit_price is None:
            return None
        return round_micro(self.idle * self.unit_price * HOURS_PER_MONTH)


def figures(
    limits: Iterable[tuple[str, str, str, str | None]],
    held: Mapping[tuple[str, str], Decimal],
    active: Mapping[tuple[str, str], Decimal],
    unit_prices: Mapping[str, int],
) -> list[QuotaFigures]:
    """``limits``: (namespace, quota resource, hard, used) of every quota (two quotas of a
    namespace on one resource: the tighter limit counts, as the API enforces both);
    ``held``/``active``: mean units by (namespace, resource). Every namespace with a quota
    or a GPU held gets one row per resource."""
    hard: dict[tuple[str, str], tuple[Decimal, Decimal | None]] = {}
    for namespace, resource, h, u in limits:
        key = (namespace, held_resource(resource))
        value = quantity(h)
        if value is None:
            continue
        if key not in hard or value < hard[key][0]:
            hard[key] = (value, quantity(u))
    out = []
    for key in sorted(set(hard) | set(held)):
        limit = hard.get(key)
        out.append(
            QuotaFigures(
                namespace=key[0],
                resource=key[1],
                hard=limit[0] if limit else None,
                used=limit[1] if limit else None,
                held=held.get(key, Decimal(0)),
                active=min(active.get(key, Decimal(0)), held.get(key, Decimal(0))),
                unit_price=unit_prices.get(key[1]),
            )
        )
    return out
