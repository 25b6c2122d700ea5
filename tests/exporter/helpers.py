"""Build an exporter over the fake NVML with a hand-moved clock, serve it on loopback, and read
its exposition as a scraper does: over HTTP."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from exporter.catalogue import COLLECTORS
from exporter.collection import Exporter
from exporter.http import MetricsServer
from exporter.nvml.boundary import Nvml
from exporter.simulate.fake_nvml import FakeNvml
from exporter.simulate.spec import parse
from tests.conftest import ManualClock

OPENMETRICS_ONLY = "application/openmetrics-text;version=1.0.0"


@dataclass
class Rig:
    clock: ManualClock
    fake: FakeNvml
    exporter: Exporter
    server: MetricsServer = field(init=False)

    def __post_init__(self) -> None:
        self.server = MetricsServer("127.0.0.1:0", self.exporter)
        self.server.start()

    def get(self, path: str = "/metrics", **headers: str) -> tuple[int, str]:
        """(status, body) of a GET on the exporter's HTTP server."""
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=10)
        try:
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read().decode()
        finally:
            conn.close()

    def scrape(self) -> dict[str, list[Any]]:
        """The samples /metrics serves now (as OpenMetrics, which the strict parser reads;
        the sample lines are those of the text format)."""
        status, body = self.get(Accept=OPENMETRICS_ONLY)
        assert status == 200
        return samples(body)

    def collect(self) -> dict[str, list[Any]]:
        """One collection, then a scrape."""
        self.exporter.collect_once()
        return self.scrape()

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

    def close(self) -> None:
        self.server.stop()
        self.exporter.close()


_OPEN: list[Rig | Exporter] = []


def close_all() -> None:
    """Close the rigs and exporters of the test that just ran (tests/exporter/conftest.py).
    In the background: an exporter's close waits up to a second for its XID listener to come
    out of NVML's event wait, and the next test need not wait for that."""
    for o in _OPEN:
        threading.Thread(target=o.close, daemon=True).start()
    _OPEN.clear()


def track(exporter: Exporter) -> Exporter:
    """Close this exporter after the test."""
    _OPEN.append(exporter)
    return exporter


def serve(clock: ManualClock, fake: FakeNvml, exporter: Exporter) -> Rig:
    """A rig around an exporter built by the test (closed after it)."""
    r = Rig(clock, fake, exporter)
    _OPEN.append(r)
    return r


def rig(raw_spec: dict[str, Any], clock: ManualClock, **kwargs: Any) -> Rig:
    fake = FakeNvml(parse(raw_spec), now=clock)
    exporter = Exporter(
        Nvml(fake),
        raw_spec.get("hostname", "sim-node"),
        kwargs.pop("collectors", COLLECTORS),
        5.0,
        clock=clock,
        monotonic=clock,
        **kwargs,
    )
    return serve(clock, fake, exporter)


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


def labels_of(parsed: dict[str, list[Any]], name: str, **labels: str) -> dict[str, str] | None:
    """The labels of the one sample of ``name`` whose labels include ``labels``."""
    found = [
        s for s in parsed.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) <= 1, f"{name} {labels}: {len(found)} samples"
    return dict(found[0].labels) if found else None
