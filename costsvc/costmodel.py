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

from costsvc.money import to_micro

HOURS_PER_MONTH = Decimal("730")  # 8760 / 12, the usual amortisation month

Positive = Annotated[Decimal, Field(gt=0)]
Fraction = Annotated[Decimal, Field(ge=0, lt=1)]


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
    purchase_price: Positive
    depreciation_months: Annotated[int, Field(gt=0)]
    power_watts: Annotated[Decimal, Field(ge=0)] = Decimal(0)
    kwh_price: Annotated[Decimal, Field(ge=0)] = Decimal(0)
    overhead_factor: Annotated[Decimal, Field(ge=1)] = Decimal(1)

    def hourly(self) -> Decimal:
        capital = self.purchase_price / (self.depreciation_months * HOURS_PER_MONTH)
        energy = self.power_watts / 1000 * self.kwh_price
        return (capital + energy) * self.overhead_factor


class Price(_Model):
    model: Annotated[str, Field(min_length=1)]  # matched against modelName; * allowed
    node_pool: str | None = None
    pricing: Literal["on_demand", "reserved", "spot"] = "on_demand"
    hourly: Positive | None = None
    discount: Fraction = Decimal(0)
    amortised: Amortised | None = None

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
                raise ValueError(f"prices[{i}] ({p.model}): the price rounds to 0")
        return self


class Policies(_Model):
    mig_share_basis: Literal["compute", "memory"] = "compute"
    # DRA and fractional holdings (HAMi, memory-profile vGPU; anything not MIG): priced by
    # gpu_allocation_share (compute), gpu_allocation_memory_share (memory) or the larger
    fractional_share_basis: Literal["compute", "memory", "max"] = "compute"
    shared_gpu_policy: Literal["equal", "usage"] = "equal"
    idle_policy: Literal["separate", "weighted", "even"] = "separate"


class LabelKeys(_Model):
    team: list[str] = ["team"]
    project: list[str] = ["project"]
    stage: list[str] = ["stage"]
    namespace_fallback: bool = True


class CostModel(_Model):
    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")] = "USD"
    policies: Policies = Policies()
    labels: LabelKeys = LabelKeys()
    versions: Annotated[list[Version], Field(min_length=1)]

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
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
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
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise CostModelError(f"{path}:{line}: not valid YAML") from None
    return parse(raw, str(path))


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
