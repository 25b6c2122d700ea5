"""Monthly budgets per team, or per project of a team (project "" = the whole team)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from costsvc.auth.audit import audit
from costsvc.db.models import Budget


class BudgetExists(ValueError):
    """That team/project already has a budget."""


@dataclass(frozen=True, slots=True)
class BudgetRow:
    id: int
    team: str
    project: str
    amount: int  # micro-units per month
    currency: str
    thresholds: list[float]
    energy_mj: int | None = None  # optional energy budget per month


@dataclass(frozen=True, slots=True)
class BudgetValues:
    team: str
    project: str
    amount: int
    currency: str
    thresholds: list[float]
    energy_mj: int | None = None


_COLUMNS = (
    Budget.id,
    Budget.team,
    Budget.project,
    Budget.amount,
    Budget.currency,
    Budget.thresholds,
    Budget.energy_mj,
)


def _rows(conn: Connection, query: Any) -> list[BudgetRow]:
    return [
        BudgetRow(
            r[0], r[1], r[2], int(r[3]), r[4], list(r[5]), None if r[6] is None else int(r[6])
        )
        for r in conn.execute(query)
    ]


def budgets(engine: Engine, team: str | None = None, by_name: bool = True) -> list[BudgetRow]:
    """Every budget (or one team's), by team and project (or as stored)."""
    query = select(*_COLUMNS)
    if by_name:
        query = query.order_by(Budget.team, Budget.project)
    if team is not None:
        query = query.where(Budget.team == team)
    with engine.connect() as conn:
        return _rows(conn, query)


def budget(engine: Engine, budget_id: int) -> BudgetRow | None:
    with engine.connect() as conn:
        found = _rows(conn, select(*_COLUMNS).where(Budget.id == budget_id))
    return found[0] if found else None


def budget_for(conn: Connection, team: str, project: str = "") -> BudgetRow | None:
    query = select(*_COLUMNS).where(Budget.team == team, Budget.project == project)
    found = _rows(conn, query)
    return found[0] if found else None


def create_budget(
    engine: Engine, values: BudgetValues, now: datetime, actor: str, detail: dict[str, Any]
) -> int:
    """A new budget's id; ``detail`` (plus the id) goes to the audit log."""
    row = {**_values(values), "created_at": now, "updated_at": now}
    try:
        with engine.begin() as conn:
            new_id = int(
                conn.execute(insert(Budget).values(**row).returning(Budget.id)).scalar_one()
            )
            audit(
                conn,
                actor,
                "budget.create",
                f"{values.team}/{values.project}",
                {**detail, "id": new_id},
            )
    except IntegrityError:
        raise BudgetExists(f"{values.team}/{values.project or '*'} already has a budget") from None
    return new_id


def update_budget(
    engine: Engine,
    budget_id: int,
    values: BudgetValues,
    now: datetime,
    actor: str,
    detail: dict[str, Any],
) -> None:
    change = update(Budget).where(Budget.id == budget_id).values(**_values(values), updated_at=now)
    try:
        with engine.begin() as conn:
            conn.execute(change)
            audit(conn, actor, "budget.update", f"{values.team}/{values.project}", detail)
    except IntegrityError:
        raise BudgetExists(f"{values.team}/{values.project or '*'} already has a budget") from None


def delete_budget(engine: Engine, old: BudgetRow, actor: str, detail: dict[str, Any]) -> None:
    with engine.begin() as conn:
        conn.execute(delete(Budget).where(Budget.id == old.id))
        audit(conn, actor, "budget.delete", f"{old.team}/{old.project}", detail)


def _values(v: BudgetValues) -> dict[str, Any]:
    return {
        "team": v.team,
        "project": v.project,
        "amount": v.amount,
        "currency": v.currency,
        "thresholds": v.thresholds,
        "energy_mj": v.energy_mj,
    }
