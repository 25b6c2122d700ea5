"""The scrape path: serves the latest rendering, never calls NVML, never waits on a collection."""

from __future__ import annotations

import gzip
import http.client
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from exporter.catalogue import COLLECTORS
from exporter.collection import Exporter
from exporter.http import MetricsServer, choose_variant, parse_listen_address
from exporter.nvml.boundary import Nvml
from exporter.render.exposition import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE
from exporter.simulate.fake_nvml import FakeNvml
from exporter.simulate.handles import FakeHandle
from exporter.simulate.spec import parse

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
OPENMETRICS_ONLY = "application/openmetrics-text;version=1.0.0"
SPEC = {
    "hostname": "n1",
    "gpus": [{"count": 2, "model": "H100", "memory_total_mib": 81559, "nvlink": {"links": 2}}],
}


class StallingNvml(FakeNvml):
    """A fake whose utilisation call can be made to hang, like a wedged driver."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stall = threading.Event()
        self.stalled = threading.Event()
        self.release = threading.Event()

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> Any:
        if self.stall.is_set():
            self.stalled.set()
            self.release.wait(10)
        return super().nvmlDeviceGetUtilizationRates(handle)


@pytest.fixture
def served() -> Iterator[tuple[Exporter, StallingNvml, MetricsServer]]:
    fake = StallingNvml(parse(SPEC))
    exporter = Exporter(Nvml(fake), "n1", COLLECTORS, 0.05)
    server = MetricsServer("127.0.0.1:0", exporter)
    server.start()
    try:
        yield exporter, fake, server
    finally:
        fake.release.set()
        server.stop()


def get(port: int, path: str = "/metrics", **headers: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def test_content_negotiation(served: tuple[Exporter, StallingNvml, MetricsServer]) -> None:
    exporter, _, server = served
    exporter.collect_once()
    status, headers, body = get(server.port)
    assert status == 200
    assert headers["content-type"] == TEXT_CONTENT_TYPE
    assert body == exporter.exposition.body("text")
    assert b"DCGM_FI_DEV_GPU_TEMP{" in body

    # Prometheus lists OpenMetrics first and text 0.0.4 after it: it gets text, where the DCGM
    # counters are typed counter under dcgm-exporter's names (docs/metrics.md, Formats)
    status, headers, body = get(
        server.port, Accept=PROMETHEUS_ACCEPT, **{"Accept-Encoding": "gzip"}
    )
    assert status == 200
    assert headers["content-type"] == TEXT_CONTENT_TYPE
    assert headers["content-encoding"] == "gzip"
    assert gzip.decompress(body) == exporter.exposition.body("text")
    assert b"# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in gzip.decompress(body)

    # a scraper that takes OpenMetrics only still gets it
    status, headers, body = get(server.port, Accept=OPENMETRICS_ONLY)
    assert headers["content-type"] == OPENMETRICS_CONTENT_TYPE
    assert body.endswith(b"# EOF\n")
    assert b"# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION unknown\n" in body


def test_a_scrape_never_calls_nvml(served: tuple[Exporter, StallingNvml, MetricsServer]) -> None:
    exporter, fake, server = served
    exporter.collect_once()
    before = fake.calls
    for accept in ("", PROMETHEUS_ACCEPT):
        for _ in range(10):
            assert get(server.port, Accept=accept)[0] == 200
    assert fake.calls == before


def test_a_scrape_does_not_wait_for_a_stuck_nvml_call(
    served: tuple[Exporter, StallingNvml, MetricsServer],
) -> None:
    exporter, fake, server = served
    exporter.collect_once()
    stop = threading.Event()
    loop = threading.Thread(target=exporter.run, args=(stop,), daemon=True)
    fake.stall.set()
    loop.start()
    try:
        assert fake.stalled.wait(5), "the collection never reached NVML"
        started = time.monotonic()
        status, _, body = get(server.port)  # a GPU read is stuck inside NVML right now
        assert time.monotonic() - started < 1.0
        assert status == 200
        assert b"gpu_device_up{" in body and b"gpu_exporter_collections_total" in body
    finally:
        stop.set()
        fake.release.set()
        loop.join(5)


def test_health_reflects_collection_freshness(
    served: tuple[Exporter, StallingNvml, MetricsServer],
) -> None:
    exporter, _, server = served
    assert get(server.port, "/health")[0] == 503  # nothing collected yet
    exporter.collect_once()
    assert get(server.port, "/health")[0] == 200
    assert get(server.port, "/nope")[0] == 404
    assert b"/metrics" in get(server.port, "/")[2]


@pytest.mark.parametrize(
    ("accept", "encoding", "variant"),
    [
        ("", "", "text"),
        ("text/plain", "gzip, deflate", "text+gzip"),
        (PROMETHEUS_ACCEPT, "", "text"),
        (PROMETHEUS_ACCEPT, "gzip", "text+gzip"),
        (OPENMETRICS_ONLY, "", "openmetrics"),
        (OPENMETRICS_ONLY + ";q=0.9", "gzip", "openmetrics+gzip"),
        ("application/openmetrics-text, text/plain;q=0", "", "openmetrics"),
        ("application/openmetrics-text, */*;q=0.1", "", "text"),
        ("APPLICATION/OPENMETRICS-TEXT; Q=1, TEXT/PLAIN; q=0", "", "openmetrics"),
    ],
)
def test_choose_variant(accept: str, encoding: str, variant: str) -> None:
    assert choose_variant(accept, encoding) == variant


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":9400", ("0.0.0.0", 9400)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:9400", ("::1", 9400)),
    ],
)
def test_parse_listen_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen_address(text)[:2] == expected


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ("9400", "not host:port"),
        ("host:port", "not a number"),
        (":70000", "out of range"),
        ("::1:9400", "in brackets"),
    ],
)
def test_parse_listen_address_rejects(bad: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        parse_listen_address(bad)
