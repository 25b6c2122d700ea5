"""What the ingest benches share: the fleet's GPU model and cost model, and the per-phase
timing of an ingest (costsvc/ingest/run.py: collect, attribute, write)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

H100 = "NVIDIA H100 80GB HBM3"
PHASES = {"collect": "collect_hour", "attribute": "attribute_hour", "write": "store_hour"}


def fleet_document(effective_from: str) -> dict[str, Any]:
    """The benches' cost model as a document (what a cost-model file holds): H100s at 2.50 an
    hour with 70 W idle, carbon at 380 g/kWh and PUE 1.3, both in force from
    ``effective_from`` (ISO 8601)."""
    return {
        "policies": {"shared_gpu_policy": "usage"},
        "versions": [
            {
                "effective_from": effective_from,
                "prices": [{"model": H100, "hourly": "2.50", "idle_watts": "70"}],
            }
        ],
        "carbon": [{"effective_from": effective_from, "grams_per_kwh": "380", "pue": "1.3"}],
    }


def fleet_model(effective_from: str) -> Any:
    """The benches' cost model (:func:`fleet_document`), parsed."""
    from costsvc.rules.cost_model import parse

    return parse(fleet_document(effective_from))


@contextmanager
def timed_phases() -> Iterator[dict[str, list[tuple[float, float]]]]:
    """While the block runs, each call of an ingest phase in this process is timed: per phase,
    its calls' (wall, process CPU) seconds, in order. Only an in-process ingest is seen (not
    the hours of worker processes)."""
    import costsvc.ingest.serial as run

    found: dict[str, list[tuple[float, float]]] = {key: [] for key in PHASES}
    original = {name: getattr(run, name) for name in PHASES.values()}

    def timed(key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*a: Any, **k: Any) -> Any:
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **k)
            finally:
                found[key].append((time.perf_counter() - t0, time.process_time() - c0))

        return wrapper

    for key, name in PHASES.items():
        setattr(run, name, timed(key, original[name]))
    try:
        yield found
    finally:
        for name, fn in original.items():
            setattr(run, name, fn)


def walls(calls: list[tuple[float, float]]) -> list[float]:
    """The wall seconds of a phase's calls."""
    return [wall for wall, _ in calls]
