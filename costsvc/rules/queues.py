"""Quota against use per Kueue ClusterQueue, flavor and resource in one hour, borrowing
attributed to the lenders, and the money of the borrowing policy. Pure (docs/queues.md).

Every quantity is whole **resource-seconds** of one hour: a ClusterQueue with a nominal quota
of 4 ``nvidia.com/gpu`` all hour has 14,400; 3 GPUs used for the whole hour is 10,800 (a MIG
resource, ``nvidia.com/mig-<profile>``, counts its instances the same way). For each
ClusterQueue, flavor and resource in the hour:

- ``within`` = min(used, nominal): used within its own quota;
- ``borrowed`` = used - within: used beyond it, taken from its cohort;
- ``unused`` = nominal - within, of which ``lent`` is what the cohort's borrowers took and
  ``idle`` the rest: nominal = within + lent + idle, always.

The lending rule: in each (cohort, flavor, resource), the borrowers' total borrowed
resource-seconds are attributed to the ClusterQueues with unused nominal quota in proportion to
it (largest remainder, :func:`costsvc.kit.money.split`, ties to the first in name order), never
more than a lender's unused quota; what no lender's unused quota covers (a parent cohort's
quota, a queue whose figures are missing) is lent by nobody and shown as the cohort's
``unlent`` borrowing. A ClusterQueue in no cohort cannot borrow: its use beyond nominal is
still shown as borrowed, lent by nobody.

The money (the cost model's ``queues.borrowing``, effective-dated): ``none`` moves nothing;
``credit_lenders`` charges each borrower its borrowed resource-seconds at the price in force
of its flavor's GPU (times its share of the GPU for a MIG resource, times the premium),
rounded once to the micro-unit, and credits the same total to the lenders by their lent
resource-seconds (largest remainder). So in every hour and cohort the charges equal the
credits exactly, and the fleet's total is the GPUs' cost, unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from costsvc.kit.money import round_micro, split, to_micro
from costsvc.rules.cost_model import CostModel, MissingPrices
from costsvc.rules.mig import billed_share, geometry, profile_slices

SECONDS_PER_HOUR = 3600
NO_COHORT = ""  # Kueue's ``cohort`` label of a ClusterQueue in none
# the NVIDIA device plugin's MIG resources under its "mixed" strategy: nvidia.com/mig-<profile>
# (NVIDIA/k8s-device-plugin internal/rm/rm.go; docs/queues.md)
MIG_RESOURCE = "nvidia.com/mig-"


@dataclass(frozen=True)
class QueueUse:
    """What Kueue said of one ClusterQueue, flavor and resource over an hour, in
    resource-seconds, and the team that owns the ClusterQueue."""

    cohort: str
    cluster_queue: str
    flavor: str
    resource: str
    nominal: int
    used: int
    team: str


@dataclass(frozen=True)
class QueueHour:
    """One ClusterQueue's (flavor, resource) figures in an hour: resource-seconds, and the
    money of the borrowing policy in micro-units (``charge`` to a borrower, ``credit`` to a
    lender)."""

    use: QueueUse
    within: int
    borrowed: int
    lent: int
    idle: int
    charge: int = 0
    credit: int = 0
    policy: str = "none"
    price: int | None = None  # micro-units per resource-hour in force (None: no price)
    premium_ppm: int = 0  # credit_lenders' premium in millionths (0 under none)

    @property
    def group(self) -> tuple[str, str, str]:
        return (self.use.cohort, self.use.flavor, self.use.resource)


def quota_hour(uses: Iterable[QueueUse]) -> list[QueueHour]:
    """The hour's figures of each ClusterQueue, flavor and resource, with the lending rule
    applied per (cohort, flavor, resource); in (cohort, flavor, resource, ClusterQueue) order."""
    ordered = sorted(uses, key=lambda u: (u.cohort, u.flavor, u.resource, u.cluster_queue))
    out: list[QueueHour] = []
    for group in _groups(ordered):
        rows = [_own(u) for u in group]
        if group[0].cohort != NO_COHORT:
            rows = _lend(rows)
        out.extend(rows)
    return out


def unlent(rows: Sequence[QueueHour]) -> int:
    """Borrowed resource-seconds of ``rows`` that no lender's unused quota covered."""
    return sum(r.borrowed for r in rows) - sum(r.lent for r in rows)


def _groups(ordered: list[QueueUse]) -> list[list[QueueUse]]:
    groups: dict[tuple[str, str, str], list[QueueUse]] = {}
    for u in ordered:
        groups.setdefault((u.cohort, u.flavor, u.resource), []).append(u)
    return list(groups.values())


def _own(u: QueueUse) -> QueueHour:
    within = min(u.used, u.nominal)
    return QueueHour(u, within, u.used - within, 0, u.nominal - within)


def _lend(rows: list[QueueHour]) -> list[QueueHour]:
    """The group's borrowing attributed to its lenders by their unused quota."""
    unused = [r.idle for r in rows]
    covered = min(sum(r.borrowed for r in rows), sum(unused))
    if not covered:
        return rows
    lent = split(covered, unused)
    return [replace(r, lent=n, idle=r.idle - n) for r, n in zip(rows, lent, strict=True)]


def credit_lenders(
    rows: Sequence[QueueHour], micro_per_resource_hour: int | Fraction, premium: Decimal
) -> list[QueueHour]:
    """``rows`` of one (cohort, flavor, resource) with the ``credit_lenders`` money: each
    borrower charged its borrowed resource-seconds x the price per resource-hour x
    ``premium`` (rounded once, half to even), the charges' total credited to the lenders by
    their lent resource-seconds. With no lender (nothing lent) nothing is charged: the
    money would have nobody to go to."""
    if not any(r.lent for r in rows):
        return list(rows)
    rate = Fraction(micro_per_resource_hour) * Fraction(premium) / SECONDS_PER_HOUR
    lent_total = sum(r.lent for r in rows)
    borrowed_total = sum(r.borrowed for r in rows)
    # only the lent part of the borrowing is charged: the rest had no lender to credit
    billable = split(lent_total, [r.borrowed for r in rows]) if borrowed_total else []
    charges = [round_micro(_exact(rate * b)) for b in billable]
    credits = split(sum(charges), [r.lent for r in rows])
    return [replace(r, charge=c, credit=k) for r, c, k in zip(rows, charges, credits, strict=True)]


def _exact(value: Fraction) -> Decimal:
    """A ratio as a Decimal: one division (the one place an amount is made inexact, below the
    micro-unit's rounding)."""
    return Decimal(value.numerator) / Decimal(value.denominator)


def by_group(rows: Sequence[QueueHour]) -> dict[tuple[str, str, str], list[QueueHour]]:
    """``rows`` per (cohort, flavor, resource), in their order."""
    out: dict[tuple[str, str, str], list[QueueHour]] = {}
    for r in rows:
        out.setdefault(r.group, []).append(r)
    return out


def price_queues(rows: Sequence[QueueHour], model: CostModel, at: datetime) -> list[QueueHour]:
    """``rows`` of the hour ``at`` with the money of the borrowing policy in force at it (the
    cost model's ``queues.borrowing``) and the terms it was priced on (:func:`terms`).
    Raises :class:`MissingPrices` naming each flavor with borrowing whose price
    ``credit_lenders`` needs and the cost model does not give."""
    policy = model.queues.borrowing_at(at)
    out: list[QueueHour] = []
    missing = []
    for (_, flavor, resource), found in by_group(rows).items():
        price = resource_price(model, at, flavor, resource)
        name, premium, unit = terms(model, at, flavor, resource)
        group = [
            replace(r, charge=0, credit=0, policy=name, price=unit, premium_ppm=premium)
            for r in found
        ]
        if name == "credit_lenders" and any(r.lent for r in group):
            if price is None:
                missing.append(f"flavor {flavor} ({resource})")
                continue
            group = credit_lenders(group, price, policy.premium)
        out.extend(group)
    if missing:
        raise MissingPrices(missing)
    return out


def terms(
    model: CostModel, at: datetime, flavor: str, resource: str
) -> tuple[str, int, int | None]:
    """What an hour's rows of ``flavor`` and ``resource`` are priced on, as stored with them:
    the policy in force, its premium in millionths (0 under ``none``) and the price per
    resource-hour rounded to the micro-unit (None: none; :func:`resource_price`). A reprice
    compares them with the cost model's now (costsvc/ingest/reprice.py)."""
    policy = model.queues.borrowing_at(at)
    price = resource_price(model, at, flavor, resource)
    unit = None if price is None else round_micro(_exact(price))
    premium = to_micro(policy.premium) if policy.policy == "credit_lenders" else 0
    return policy.policy, premium, unit


def resource_price(model: CostModel, at: datetime, flavor: str, resource: str) -> Fraction | None:
    """The price in force of one unit of ``resource`` of ``flavor`` for an hour, in
    micro-units: the price of the flavor's GPU model (``queues.flavors``), times a MIG
    resource's billed share of its GPU (costsvc/rules/mig.py, the cost model's MIG basis);
    None when the flavor has no GPU model, the model no price or the profile is unknown."""
    gpu_model = model.queues.flavors.get(flavor)
    price = model.price_at(at, gpu_model) if gpu_model is not None else None
    if gpu_model is None or price is None:
        return None
    per_gpu = Fraction(price.micro_per_hour())
    if not resource.startswith(MIG_RESOURCE):
        return per_gpu
    slices = profile_slices(gpu_model, resource[len(MIG_RESOURCE) :])
    gpu = geometry(gpu_model)
    if slices is None or gpu is None:
        return None
    return per_gpu * Fraction(billed_share(*slices, gpu, model.policies.mig_share_basis))


PodQueue = tuple[str, str, str, str]  # LocalQueue, ClusterQueue, cohort, flavor ("" unknown)


class PodQueues:
    """The queue of a pod's line in one hour (docs/queues.md, "The queue of a pod"): its
    LocalQueue (the pod's queue label), the LocalQueue's ClusterQueue (``links``, from the
    Kubernetes API; "" where unknown), that ClusterQueue's cohort in the hour (Kueue's series),
    and the flavor of the line's GPUs: of the ClusterQueue's flavors with the line's resource
    (``nvidia.com/mig-<profile>`` for a MIG line, a whole-GPU resource otherwise), the only
    one, else the only one whose GPU model (``queues.flavors``) is the line's; else ""."""

    def __init__(
        self,
        uses: Mapping[str, Sequence[QueueUse]],
        links: Mapping[tuple[str, str, str], str],
        flavors: Mapping[str, str],
    ) -> None:
        self._links = links
        self._flavors = flavors
        self._uses: dict[tuple[str, str], list[QueueUse]] = {}
        for cluster, found in uses.items():
            for u in found:
                self._uses.setdefault((cluster, u.cluster_queue), []).append(u)

    def __call__(
        self, cluster: str, namespace: str, queue: str, gpu_model: str, mig_profile: str
    ) -> PodQueue:
        if not queue:
            return ("", "", "", "")
        cluster_queue = self._links.get((cluster, namespace, queue), "")
        uses = self._uses.get((cluster, cluster_queue), []) if cluster_queue else []
        if not uses:
            return (queue, cluster_queue, "", "")
        mig = MIG_RESOURCE + mig_profile if mig_profile else None
        fits = sorted(
            {
                u.flavor
                for u in uses
                if (u.resource == mig if mig else not u.resource.startswith(MIG_RESOURCE))
            }
        )
        if len(fits) > 1:
            fits = [f for f in fits if self._flavors.get(f) == gpu_model]
        return (queue, cluster_queue, uses[0].cohort, fits[0] if len(fits) == 1 else "")
