"""Build an exporter over the fake NVML with a hand-moved clock, and read its exposition."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from exporter.catalogue import COLLECTORS
from exporter.collection import Exporter
from exporter.nvml.boundary import Nvml
from exporter.simulate.fake_nvml import FakeNvml
from exporter.simulate.spec import parse
from tests.conftest import ManualClock


@dataclass
class Rig:
    clock: ManualClock
    fake: FakeNvml
    exporter: Exporter

    def collect(self) -> dict[str, list[Any]]:
        self.exporter.collect_once()
        return samples(self.exporter.exposition.body("openmetrics").decode())

    def collect_until(
        self, check: Callable[[dict[str, list[Any]]], bool], timeout: float = 10.0
    ) -> dict[str, list[Any]]:
        """Collect (the clock standing still) until ``check`` holds on the exposition: for what
        arrives from a background thread, such as XID events."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.collect()
            if check(m):
                return m
            assert time.monotonic() < deadline, "condition not reached"
            time.sleep(0.02)  # polling interval while a background thread catches up


_OPEN: list[Exporter] = []


def close_all() -> None:
    """Close the exporters of the test that just ran (tests/exporter/conftest.py)."""
    while _OPEN:
        _OPEN.pop().close()


def track(exporter: Exporter) -> Exporter:
    """Close this exporter after the test."""
    _OPEN.append(exporter)
    return exporter


def rig(raw_spec: dict[str, Any], clock: ManualClock, **kwargs: Any) -> Rig:
    fake = FakeNvml(parse(raw_spec), now=clock)
    exporter = track(
        Exporter(
            Nvml(fake),
            raw_spec.get("hostname", "sim-node"),
            kwargs.pop("collectors", COLLECTORS),
            5.0,
            clock=clock,
            monotonic=clock,
            **kwargs,
        )
    )
    return Rig(clock, fake, exporter)


def samples(text: str) -> dict[str, list[Any]]:
    """Sample name -> samples, parsed by prometheus_client's strict OpenMetrics parser.

    (Its text-format parser renames every counter sample to NAME_total, which would hide
    exactly the DCGM names these tests check.)"""
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def value(parsed: dict[str, list[Any]], name: str, **labels: str) -> float | None:
    """The one sample of ``name`` whose labels include ``labels``; None if absent."""
    found = [
        s for s in parsed.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) <= 1, f"{name} {labels}: {len(found)} samples"
    return found[0].value if found else None
