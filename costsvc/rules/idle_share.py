"""Idle shared at read time (``/v1/costs?idle=weighted|even``, the explorer): the cost of
capacity nobody held (the ``__idle__`` lines an answer would show) moved onto the rows that
held GPUs, exactly to the micro-unit. Pure.

The rule, per **scope** — a step's bucket, a currency and a cluster (OpenCost's default idle
scope, core/pkg/opencost/allocation.go ``computeIdleCoeffs``):

- the pool is the sum of the scope's idle lines, every amount of them (idle cost, GPU-hours,
  of it unavailable, idle energy and CO2e);
- ``weighted``: it goes to the scope's other rows in proportion to their allocated cost
  (OpenCost's ``ShareWeighted``; a negative allocation, a credit, weighs 0);
  ``even``: equally to each of them;
- each amount is split by largest remainder (costsvc/kit/money.py ``split``), so Σ over a
  scope is unchanged: Σ rows after = Σ rows before, per amount, to the micro-unit;
- a scope with no row but its idle keeps its idle where it was.

``separate`` (the default) moves nothing: the rows as stored. Under a ``weighted`` or
``even`` idle policy of the cost model (costsvc/rules/lines.py) the stored lines already carry
the available idle; what is left in ``__idle__`` (lost GPUs' time) is what this rule moves.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from costsvc.kit.money import split

CHOICES = ("separate", "weighted", "even")


@dataclass(slots=True)
class Held:
    """A row of a scope: the scope, whether it is idle, its amounts (``allocated`` first;
    shares are added to them in place) and the caller's key of the row."""

    scope: Hashable
    idle: bool
    amounts: list[int]
    key: Any = None


def share(rows: Sequence[Held], how: str) -> list[Held]:
    """``rows`` with each scope's idle moved onto its other rows by ``how`` (one of
    :data:`CHOICES`); the idle rows that gave theirs away are dropped. The order of the
    rows kept is theirs."""
    if how not in CHOICES:
        raise ValueError(f"idle {how!r}: use any of {', '.join(CHOICES)}")
    if how == "separate":
        return list(rows)
    scopes: dict[Hashable, tuple[list[int], list[Held]]] = {}
    for r in rows:
        pool, takers = scopes.setdefault(r.scope, ([0] * len(r.amounts), []))
        if r.idle:
            for i, v in enumerate(r.amounts):
                pool[i] += v
        else:
            takers.append(r)
    given: set[Hashable] = set()
    for scope, (pool, takers) in scopes.items():
        if not takers:
            continue
        given.add(scope)
        weights = [max(t.amounts[0], 0) if how == "weighted" else 1 for t in takers]
        for i, total in enumerate(pool):
            for t, part in zip(takers, split(total, weights), strict=True):
                t.amounts[i] += part
    return [r for r in rows if not (r.idle and r.scope in given)]
