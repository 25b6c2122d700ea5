"""Creating and replacing budgets, for ``/v1/budgets`` and the pages alike: the one body a budget
is written from (its validation), its currency (the cost model's), the write with its audit
entry, and a budget as both answer it. A refusal is a :class:`BudgetRefused` with the status
and message the API answers."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from costsvc.auth.principal import check_team
from costsvc.auth.tokens import Principal
from costsvc.budgets import repository as store
from costsvc.budgets.repository import BudgetExists, BudgetRow, BudgetValues
from costsvc.budgets.state import currency_mismatch
from costsvc.kit.money import money
from costsvc.kit.settings import Settings
from costsvc.rules.cost_model import CostModelError
from costsvc.rules.cost_model_source import in_force
from costsvc.rules.energy import MJ_PER_KWH, kwh
from kube.label_names import LABEL_VALUE, LABEL_VALUE_MAX

# teams and projects are Kubernetes label values (kube/label_names.py), as the pod labels they
# come from; the empty project is the team's own budget
Name = Annotated[str, Field(min_length=1, max_length=LABEL_VALUE_MAX, pattern=f"^{LABEL_VALUE}$")]
Project = Annotated[str, Field(max_length=LABEL_VALUE_MAX, pattern=f"^{LABEL_VALUE}$")]


class BudgetRefused(Exception):
    """A budget the service will not write: the API's status (404, 409, 422) and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class BudgetIn(BaseModel):
    team: Name
    project: Project = ""
    amount: Annotated[Decimal, Field(gt=0, le=Decimal("1e12"), decimal_places=6)]
    # the cost model's currency when left out; any other is refused (409), never compared 1:1
    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")] | None = None
    thresholds: Annotated[list[float], Field(min_length=1, max_length=10)] = [0.8, 1.0]
    # optional: the team's energy per month, kWh (costsvc_budget_energy_used_ratio)
    energy_kwh: Annotated[Decimal, Field(gt=0, le=Decimal("1e9"), decimal_places=6)] | None = None

    @field_validator("thresholds")
    @classmethod
    def _ratios(cls, v: list[float]) -> list[float]:
        if any(not (0 < t <= 10) for t in v):
            raise ValueError("thresholds are ratios of the budget, e.g. 0.8 and 1.0")
        return sorted(set(v))

    def values(self, currency: str) -> BudgetValues:
        micro = int(self.amount.scaleb(6))
        mj = None if self.energy_kwh is None else int(self.energy_kwh * MJ_PER_KWH)
        return BudgetValues(self.team, self.project, micro, currency, self.thresholds, mj)


def budget_in(fields: dict[str, Any]) -> BudgetIn:
    """``fields`` read as the API reads its body; refused (422) with the API's message for each
    wrong field (``amount: Input should be greater than 0``)."""
    try:
        return BudgetIn.model_validate(fields)
    except ValidationError as exc:
        wrong = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:20]]
        raise BudgetRefused(422, "; ".join(wrong)) from None


def budget_out(b: BudgetRow) -> dict[str, Any]:
    """A budget as the API answers it (money and kWh as decimal strings)."""
    return {
        "id": b.id,
        "team": b.team,
        "project": b.project,
        "amount": money(b.amount),
        "currency": b.currency,
        "thresholds": list(b.thresholds),
        "energy_kwh": None if b.energy_mj is None else kwh(b.energy_mj),
    }


def visible_budget(db: Any, budget_id: int, who: Principal) -> BudgetRow:
    """Budget ``budget_id`` as ``who`` may see it: another team's, or none, is a 404."""
    b = store.budget(db, budget_id)
    if b is None:
        raise BudgetRefused(404, f"no budget {budget_id}")
    check_team(who, b.team, missing=f"no budget {budget_id}")  # another team's: none
    return b


def budget_currency(body: BudgetIn, db: Any, settings: Settings) -> str:
    """The budget's currency: the cost model's (costs are priced in it); another is refused
    with 409 naming both."""
    try:
        model = in_force(settings.cost_model, db).model.currency
    except CostModelError:  # no cost model yet: the costs' currency is not known
        model = None
    currency = body.currency or model or "USD"
    if model is not None and (why := currency_mismatch(currency, model)) is not None:
        raise BudgetRefused(409, f"{why}: a budget must be in the cost model's currency")
    return currency


def create(db: Any, body: BudgetIn, who: Principal, now: Any, settings: Settings) -> BudgetRow:
    """A new budget, audited (``budget.create``); 409 when its team/project has one."""
    values = body.values(budget_currency(body, db, settings))
    try:
        new_id = store.create_budget(db, values, now, who.name, body.model_dump(mode="json"))
    except BudgetExists as exc:
        raise BudgetRefused(409, str(exc)) from None
    return visible_budget(db, new_id, who)


def replace(
    db: Any, budget_id: int, body: BudgetIn, who: Principal, now: Any, settings: Settings
) -> BudgetRow:
    """Budget ``budget_id`` replaced by ``body``, audited (``budget.update``, before and
    after); 404 when ``who`` sees no such budget, 409 when another has its team/project."""
    values = body.values(budget_currency(body, db, settings))
    old = visible_budget(db, budget_id, who)
    detail = {"id": budget_id, "before": budget_out(old), "after": body.model_dump(mode="json")}
    try:
        store.update_budget(db, budget_id, values, now, who.name, detail)
    except BudgetExists as exc:
        raise BudgetRefused(409, str(exc)) from None
    return visible_budget(db, budget_id, who)
