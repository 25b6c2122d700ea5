"""Reprice ingested hours from their stored facts when the cost model prices them differently.

Every ``gpu_hours`` row keeps the price it was charged at. When the cost model changes — a new
version from a date forward, or one back-dated into hours already ingested — the hours whose
price the model now gives differently are exactly the ones it covers (:func:`stale_hours`), and
:func:`reprice` recomputes them from ``gpu_hours`` and ``usage_facts`` — no Prometheus needed,
so hours past its retention are repriced too. Owners stay as they were charged (the labels in
force at that hour, resolved when the hour was ingested), and so do the pods' controllers. The
hour's chargeback and GPU rows are replaced in one transaction, under the same lock as
ingestion.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import Engine

from costsvc.db import runs
from costsvc.db.hour_facts import (
    Controllers,
    Owners,
    charged_energy_rates,
    charged_prices,
    restore_hour,
)
from costsvc.inference.repository import charged_weights
from costsvc.inference.split import Priced, Served, price_hour
from costsvc.ingest.serial import RETRYABLE, Report, record_failure
from costsvc.kit.money import to_micro
from costsvc.queues.repository import QueueRows, charged_terms
from costsvc.rules.attribution import HourFacts, attribute_hour
from costsvc.rules.cost_model import CostModel, MissingPrices
from costsvc.rules.lines import HourResult
from costsvc.rules.queues import QueueHour, price_queues, terms

log = logging.getLogger(__name__)


def stale_hours(engine: Engine, model: CostModel) -> list[datetime]:
    """Ingested hours with a GPU whose price under ``model`` differs from the price it was
    charged at (or that ``model`` no longer prices: repricing them reports the error)."""
    stale = set()
    for hour, gpu_model, pool, charged in charged_prices(engine):
        try:
            now: int | None = model.prices_for(hour, [(gpu_model, pool)])[(gpu_model, pool)]
        except MissingPrices:
            now = None
        if now != charged:
            stale.add(hour)
    for hour, cluster, gpu_model, pool, kwh_price, carbon in charged_energy_rates(engine):
        # a measured-energy price or a carbon intensity (or PUE) now given differently
        price = model.price_at(hour, gpu_model, pool)
        now_kwh = price.micro_per_kwh() if price is not None else None
        if now_kwh != kwh_price or model.carbon_at(hour, cluster, pool) != carbon:
            stale.add(hour)
    for hour, served_model, weight_ppm in charged_weights(engine):
        # an output:input weight now given differently (it splits the served tokens' cost)
        if to_micro(model.output_weight_at(hour, served_model)) != weight_ppm:
            stale.add(hour)
    for hour, flavor, resource, policy, premium, unit in charged_terms(engine):
        # a borrowing policy, premium or flavor price now given differently
        if terms(model, hour, flavor, resource) != (policy, premium, unit):
            stale.add(hour)
    return sorted(stale)


def reprice(engine: Engine, model: CostModel, cluster: str, hours: list[datetime]) -> Report:
    """Recompute these hours' money from their stored facts with ``model``. Hours are
    independent: one that fails (say, a model without a price) does not stop the others."""
    report = Report()
    model_id = runs.record_cost_model(engine, model)

    def price(facts: HourFacts, owners: Owners, controllers: Controllers) -> HourResult:
        return attribute_hour(
            facts.start,
            facts.gpus,
            facts.holdings,
            lambda *pod: owners.get(pod),
            model,
            lambda *pod: controllers.get(pod),
            facts.tags_of,  # the queue and owner provenance as charged
        )

    def infer(result: HourResult, served: list[Served], owners: Owners) -> list[Priced]:
        return price_hour(served, result, model, lambda *pod: owners.get(pod))

    for hour in hours:
        run_id = runs.start_run(engine, cluster, hour, "reprice", model_id)

        def requeue(stored: dict[str, list[QueueHour]], at: datetime = hour) -> QueueRows:
            return {c: price_queues(rows, model, at) for c, rows in stored.items()}

        try:
            restore_hour(engine, cluster, hour, run_id, price, model.currency, infer, requeue)
        except RETRYABLE as exc:
            record_failure(engine, run_id, hour, exc, report)
            continue
        except Exception as exc:  # unexpected: recorded, the other hours go on
            log.exception("reprice of %s failed", hour.isoformat())
            record_failure(engine, run_id, hour, exc, report, f"{type(exc).__name__}: ")
            continue
        except BaseException as exc:
            runs.finish_run(engine, run_id, "failed", f"{type(exc).__name__}: {exc}")
            raise
        report.done.append(hour)
    return report
