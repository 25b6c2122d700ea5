"""The cost model: what a GPU-hour costs, from when, and how cost is shared. Pure; no I/O but
:func:`load`.

A model has effective-dated **versions**; the version in force at an hour is the latest whose
``effective_from`` is at or before that hour, so a price change from a date forward — or a
back-dated one — reprices exactly the hours it covers. Prices are matched against the GPU's
``modelName`` (exact, or a ``*`` glob) and optionally its node pool; the most specific match
wins. A price is either a list price per GPU-hour with a pricing kind (on-demand, reserved,
spot) and a discount, or amortised from purchase price, depreciation, power draw, energy price
and an overhead factor (docs/cost-model.md). A GPU model with no price, or
a price of zero, is an error naming every such model — never a silent $0.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from costsvc.kit.money import MICRO, to_micro
from costsvc.kit.quoting import cut

HOURS_PER_MONTH = Decimal("730")  # 8760 / 12, the usual amortisation month

# Bounds (docs/cost-model.md, docs/security.md): money at most six decimals (micro-units); a
# price per GPU-hour below 10^9 in any currency (the dearest GPU in the weakest currency is
# ~10^7), so an hour's money, in int64 micro-units, never overflows
MAX_HOURLY = 10**9  # a GPU-hour's price, list or amortised, is below this
MAX_PURCHASE = 10**12  # a GPU's purchase price
MAX_KWH_PRICE = 10**6  # a kWh's price
MAX_WATTS = 100_000  # a GPU's power draw
MAX_MONTHS = 1200  # depreciation: a hundred years
MAX_OVERHEAD = 100
MAX_NAME = 253  # a GPU model, node pool or cluster pattern (a Kubernetes label value at most)
Money = Annotated[Decimal, Field(decimal_places=6)]
Positive = Annotated[Decimal, Field(gt=0, decimal_places=6)]
Fraction = Annotated[Decimal, Field(ge=0, lt=1, decimal_places=6)]
Watts = Annotated[Decimal, Field(ge=0, le=MAX_WATTS, decimal_places=3)]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME)]


class CostModelError(ValueError):
    """A cost model that cannot be used; the message names the file, the place and the reason."""


class MissingPrices(LookupError):
    """GPU models in the data that the cost model does not price."""

    def __init__(self, models: list[str]) -> None:
        self.models = sorted(set(models))
        super().__init__("no price for GPU model(s): " + ", ".join(self.models))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Amortised(_Model):
    purchase_price: Annotated[Decimal, Field(gt=0, lt=MAX_PURCHASE, decimal_places=6)]
    depreciation_months: Annotated[int, Field(gt=0, le=MAX_MONTHS)]
    power_watts: Watts = Decimal(0)
    kwh_price: Annotated[Decimal, Field(ge=0, lt=MAX_KWH_PRICE, decimal_places=6)] = Decimal(0)
    overhead_factor: Annotated[Decimal, Field(ge=1, le=MAX_OVERHEAD, decimal_places=6)] = Decimal(1)
    # nameplate: the power part of the price is power_watts x kWh price every hour; measured:
    # it is the energy the GPU actually drew that hour x kWh price (costsvc/rules/energy.py)
    power_from: Literal["nameplate", "measured"] = "nameplate"

    @model_validator(mode="after")
    def _measured_needs_price(self) -> Amortised:
        if self.power_from == "measured" and not self.kwh_price:
            raise ValueError("power_from measured needs a kwh_price")
        return self

    def hourly(self) -> Decimal:
        """The price per GPU-hour; without the power part when it is measured."""
        capital = self.purchase_price / (self.depreciation_months * HOURS_PER_MONTH)
        energy = self.power_watts / 1000 * self.kwh_price
        if self.power_from == "measured":
            energy = Decimal(0)
        return (capital + energy) * self.overhead_factor

    def kwh(self) -> Decimal:
        """The price of each kWh the GPU drew (measured power), overhead included."""
        if self.power_from != "measured":
            return Decimal(0)
        return self.kwh_price * self.overhead_factor


class Price(_Model):
    model: Name  # matched against modelName; * allowed
    node_pool: Annotated[str, Field(max_length=MAX_NAME)] | None = None
    pricing: Literal["on_demand", "reserved", "spot"] = "on_demand"
    hourly: Annotated[Decimal, Field(gt=0, lt=MAX_HOURLY, decimal_places=6)] | None = None
    discount: Fraction = Decimal(0)
    amortised: Amortised | None = None
    idle_watts: Watts | None = None  # the GPU's idle power draw

    @model_validator(mode="after")
    def _one_source(self) -> Price:
        if (self.hourly is None) == (self.amortised is None):
            raise ValueError("give either hourly or amortised")
        if self.amortised is not None and self.discount:
            raise ValueError("a discount applies to a list price (hourly), not to amortised")
        return self

    def micro_per_hour(self) -> int:
        if self.amortised is not None:
            return to_micro(self.amortised.hourly())
        assert self.hourly is not None
        return to_micro(self.hourly * (1 - self.discount))

    def micro_per_kwh(self) -> int:
        """Micro-units per measured kWh (amortised, ``power_from: measured``), else 0."""
        return to_micro(self.amortised.kwh()) if self.amortised is not None else 0

    def specificity(self, model: str) -> tuple[int, int]:
        return (self.model == model, self.node_pool is not None)


class Version(_Model):
    effective_from: datetime
    prices: Annotated[list[Price], Field(min_length=1)]

    @model_validator(mode="after")
    def _aware_and_positive(self) -> Version:
        if self.effective_from.tzinfo is None:
            raise ValueError("effective_from needs a time zone, e.g. 2026-11-01T00:00:00Z")
        at = self.effective_from.astimezone(UTC)
        if (at.minute, at.second, at.microsecond) != (0, 0, 0):
            raise ValueError("effective_from must be on a whole hour (UTC): prices apply per hour")
        for i, p in enumerate(self.prices):
            if p.micro_per_hour() <= 0:
                raise ValueError(f"prices[{i}] ({cut(p.model)}): the price rounds to 0")
            if p.micro_per_hour() >= MAX_HOURLY * MICRO:
                raise ValueError(
                    f"prices[{i}] ({cut(p.model)}): the price per GPU-hour must be below "
                    f"{MAX_HOURLY}"
                )
        return self


class Carbon(_Model):
    """Grid carbon intensity for a cluster (``*`` glob) and optionally a node pool, in force
    from ``effective_from`` until the next entry for the same place; ``pue``: the site's
    power usage effectiveness (facility energy / IT energy)."""

    effective_from: datetime
    cluster: Name = "*"
    node_pool: Annotated[str, Field(max_length=MAX_NAME)] | None = None
    grams_per_kwh: Annotated[Decimal, Field(ge=0, le=10_000, decimal_places=3)]
    pue: Annotated[Decimal, Field(ge=1, le=10, decimal_places=3)] = Decimal(1)

    @model_validator(mode="after")
    def _on_the_hour(self) -> Carbon:
        _check_hour(self.effective_from)
        return self

    def ug_per_kwh(self) -> int:
        """Micro-grams of CO2e per kWh the GPU drew: intensity x PUE, exact."""
        return to_micro(self.grams_per_kwh * self.pue)

    def specificity(self, cluster: str) -> tuple[int, int]:
        """An exact cluster over a glob over ``*``; a node-pool entry over a pool-less one."""
        return (
            2 if self.cluster == cluster else int(self.cluster != "*"),
            self.node_pool is not None,
        )


def _check_hour(at: datetime) -> None:
    if at.tzinfo is None:
        raise ValueError("effective_from needs a time zone, e.g. 2026-11-01T00:00:00Z")
    at = at.astimezone(UTC)
    if (at.minute, at.second, at.microsecond) != (0, 0, 0):
        raise ValueError("effective_from must be on a whole hour (UTC): prices apply per hour")


# the output:input weight where the cost model gives none: OpenCost's
# ``defaultOutputTokenCostMultiplier`` (opencost/opencost pkg/inferencecost/types.go), so the
# two tools agree out of the box (docs/inference.md)
DEFAULT_OUTPUT_WEIGHT = Decimal("2.5")


class InferenceWeight(_Model):
    """How much a served output token costs against an input token, for the models whose
    served name (vLLM/SGLang ``model_name``) matches ``model`` (``*`` glob), in force from
    ``effective_from`` until the next entry for the same models — the split rule's fallback
    where a pod has no prefill/decode time histograms (costsvc/inference/split.py)."""

    effective_from: datetime
    model: Annotated[str, Field(min_length=1, max_length=253)] = "*"
    output_weight: Annotated[Decimal, Field(gt=0, le=1000, decimal_places=6)]

    @model_validator(mode="after")
    def _on_the_hour(self) -> InferenceWeight:
        _check_hour(self.effective_from)
        return self

    def specificity(self, model: str) -> tuple[int, int]:
        """An exact name over a glob over ``*``."""
        return (self.model == model, self.model != "*")


class Policies(_Model):
    mig_share_basis: Literal["compute", "memory"] = "compute"
    # DRA and fractional holdings (HAMi, memory-profile vGPU; anything not MIG): priced by
    # gpu_allocation_share (compute), gpu_allocation_memory_share (memory) or the larger
    fractional_share_basis: Literal["compute", "memory", "max"] = "compute"
    shared_gpu_policy: Literal["equal", "usage"] = "equal"
    idle_policy: Literal["separate", "weighted", "even"] = "separate"


LabelKey = Annotated[str, Field(min_length=1, max_length=317)]  # prefix (253) / name (63)
LabelKeyList = Annotated[list[LabelKey], Field(max_length=20)]


class LabelKeys(_Model):
    team: LabelKeyList = ["team"]
    project: LabelKeyList = ["project"]
    stage: LabelKeyList = ["stage"]
    namespace_fallback: bool = True
    # a serving pod's role in disaggregated serving (llm-d: prefill, decode; docs/inference.md)
    role: list[str] = ["llm-d.ai/role"]


class QueueOwners(_Model):
    """Where the owner rule takes a Kueue-submitted pod's team from (docs/queues.md):
    ``off``; ``local_queue_label``: the ``label`` Kueue puts on its LocalQueue series (a
    custom metric label, ``custom_<name>``); ``cluster_queue_label``: that label on the
    LocalQueue's ClusterQueue (the link from the Kubernetes API); ``local_queue_namespace``:
    the team labels of the LocalQueue's namespace. ``precedence``: ``pod_first`` (the pod's
    own team label, then the queue's, then the namespace's) or ``queue_first`` (the queue's
    over the pod's own)."""

    team_from: Literal[
        "off", "local_queue_label", "cluster_queue_label", "local_queue_namespace"
    ] = "off"
    precedence: Literal["pod_first", "queue_first"] = "pod_first"
    # Kueue's ControllerMetricsCustomLabel: "custom_" + its name (kubernetes-sigs/kueue
    # apis/config/v1beta2/configuration_types.go, pkg/metrics/custom_labels.go)
    label: Annotated[str, Field(pattern=r"^custom_[a-zA-Z][a-zA-Z0-9_]{0,62}$")] = "custom_team"


class Borrowing(_Model):
    """The borrowing policy in force from ``effective_from`` (costsvc/rules/queues.py)."""

    effective_from: datetime
    policy: Literal["none", "credit_lenders"] = "none"
    premium: Annotated[Decimal, Field(ge=0, le=10, decimal_places=6)] = Decimal(1)

    @model_validator(mode="after")
    def _on_the_hour(self) -> Borrowing:
        _check_hour(self.effective_from)
        return self


NO_BORROWING = Borrowing(effective_from=datetime(1970, 1, 1, tzinfo=UTC))


class Queues(_Model):
    """Kueue's queues as tenants (docs/queues.md): the owner rule's queue step, each
    ResourceFlavor's GPU model (its price), the borrowing policy over time."""

    owners: QueueOwners = QueueOwners()
    flavors: Annotated[dict[Name, Name], Field(max_length=1000)] = {}
    borrowing: list[Borrowing] = []

    def borrowing_at(self, at: datetime) -> Borrowing:
        """The policy in force at ``at`` (the latest entry from at or before it); ``none``
        when no entry is in force."""
        found = [b for b in self.borrowing if b.effective_from <= at]
        best = max(found, key=lambda b: b.effective_from, default=None)
        return best if best is not None else NO_BORROWING


class CostModel(_Model):
    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")] = "USD"
    policies: Policies = Policies()
    labels: LabelKeys = LabelKeys()
    versions: Annotated[list[Version], Field(min_length=1)]
    carbon: list[Carbon] = []
    inference: list[InferenceWeight] = []
    queues: Queues = Queues()

    @model_validator(mode="after")
    def _distinct_dates(self) -> CostModel:
        starts = [v.effective_from for v in self.versions]
        if len(set(starts)) != len(starts):
            raise ValueError("two versions have the same effective_from")
        return self

    def _ordered(self) -> list[Version]:
        return sorted(self.versions, key=lambda v: v.effective_from)

    def version_at(self, at: datetime) -> Version | None:
        ordered = self._ordered()
        i = bisect.bisect_right([v.effective_from for v in ordered], at)
        return ordered[i - 1] if i else None

    def price_at(self, at: datetime, model: str, node_pool: str | None = None) -> Price | None:
        version = self.version_at(at)
        if version is None:
            return None
        matches = [
            p
            for p in version.prices
            if fnmatchcase(model, p.model) and (p.node_pool is None or p.node_pool == node_pool)
        ]
        return max(matches, key=lambda p: p.specificity(model), default=None)

    def prices_for(
        self, at: datetime, pairs: Iterable[tuple[str, str | None]]
    ) -> dict[tuple[str, str | None], int]:
        """Price per GPU-hour of each ``(model, node pool)`` at ``at``; raises
        :class:`MissingPrices` naming every model the version in force does not price."""
        out: dict[tuple[str, str | None], int] = {}
        missing = []
        for model, pool in pairs:
            price = self.price_at(at, model, pool)
            if price is None:
                missing.append(model if pool is None else f"{model} (node pool {pool})")
            else:
                out[(model, pool)] = price.micro_per_hour()
        if missing:
            raise MissingPrices(missing)
        return out

    def carbon_at(self, at: datetime, cluster: str, node_pool: str | None = None) -> int:
        """CO2e per kWh (micro-grams, PUE included) at ``at`` for a GPU of this cluster and
        node pool: the most specific matching entry, the latest in force; 0 when none is."""
        found = [
            c
            for c in self.carbon
            if c.effective_from <= at
            and fnmatchcase(cluster, c.cluster)
            and (c.node_pool is None or c.node_pool == node_pool)
        ]
        best = max(found, key=lambda c: (c.specificity(cluster), c.effective_from), default=None)
        return best.ug_per_kwh() if best is not None else 0

    def output_weight_at(self, at: datetime, model: str) -> Decimal:
        """The output:input weight in force at ``at`` for the served model ``model``: the
        most specific matching entry, the latest in force; :data:`DEFAULT_OUTPUT_WEIGHT` when
        none is."""
        found = [
            w for w in self.inference if w.effective_from <= at and fnmatchcase(model, w.model)
        ]
        best = max(found, key=lambda w: (w.specificity(model), w.effective_from), default=None)
        return best.output_weight if best is not None else DEFAULT_OUTPUT_WEIGHT

    def document(self) -> dict[str, Any]:
        """The model as plain JSON data (what is stored with the hours it priced)."""
        return self.model_dump(mode="json")

    def sha256(self) -> str:
        canonical = json.dumps(self.document(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def parse(raw: Any, source: str = "<cost model>") -> CostModel:
    if not isinstance(raw, dict):
        raise CostModelError(f"{source}: the top level must be a mapping")
    try:
        return CostModel.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        # a key of the document is input: quoted as every input is (costsvc/kit/quoting.py)
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{cut(str(p))}" for p in err["loc"])
        more = len(exc.errors()) - 1
        tail = f" (and {more} more)" if more else ""
        raise CostModelError(
            f"{source}: {where.lstrip('.') or '(top level)'}: {err['msg']}{tail}"
        ) from None


def load(path: str | Path) -> CostModel:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CostModelError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise CostModelError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise CostModelError(f"{path}:{line}: not valid YAML") from None
    return parse(raw, str(path))
