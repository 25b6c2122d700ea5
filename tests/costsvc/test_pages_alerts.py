"""The fleet page's alerts: those a real Prometheus evaluates from the project's own rules
(alerts/gpu-finops.rules.yml; only each rule's ``for`` and its group's interval shortened)
over a scraped ``gpu_device_up 0``, firing and pending, with the labels that say where; and a
notice, quickly, where the query API cannot be reached or answers something else."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from costsvc.db.migrate import upgrade
from tests.conftest import require_binary
from tests.costsvc.apiserver import Api, Clock, serve
from tests.costsvc.conftest import fresh_database
from tests.costsvc.pages_history import NOW, TEAMS
from tests.costsvc.test_pages_access import signed_in
from tests.prom import Prometheus

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alerts" / "gpu-finops.rules.yml"
LOST = (
    'gpu_device_up{gpu="3",UUID="GPU-LOST-1",Hostname="node-a",'
    'pci_bus_id="00000000:3B:00.0",modelName="NVIDIA H100 80GB HBM3"} 0\n'
)


class _Serve(BaseHTTPRequestHandler):
    body = b""
    kind = "text/plain"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", self.kind)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def answering(request: pytest.FixtureRequest) -> Iterator[str]:
    """A loopback HTTP server answering every GET with ``request.param`` (bytes, type)."""
    body, kind = request.param
    handler = type("H", (_Serve,), {"body": body, "kind": kind})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _fast_rules(path: Path) -> None:
    """The project's rules, their expressions unchanged, evaluated every second and firing
    after 1 s (GPULost; every other rule keeps its ``for`` and stays pending)."""
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            if rule.get("alert") == "GPULost":
                rule["for"] = "1s"
    path.write_text(yaml.safe_dump(doc))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A real Prometheus scraping a target whose one GPU is lost, with the project's rules."""
    binary = require_binary("prometheus")
    work = tmp_path_factory.mktemp("alerts-prom")
    _fast_rules(work / "rules.yml")
    handler = type("H", (_Serve,), {"body": LOST.encode(), "kind": "text/plain; version=0.0.4"})
    target = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    config = (
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        f"rule_files: [{str(work / 'rules.yml')!r}]\n"
        "scrape_configs:\n  - job_name: gpu-exporter\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{target.server_address[1]}']\n"
    )
    prom = Prometheus(binary, work, [], config_text=config)
    try:
        prom.wait_ready()
        prom.until(
            lambda: any(
                a["labels"]["alertname"] == "GPULost" and a["state"] == "firing"
                for a in prom.get("/api/v1/alerts")["data"]["alerts"]
            ),
            60,
            "GPULost firing",
        )
        yield prom
    finally:
        prom.stop()
        target.shutdown()
        target.server_close()


def _page(tmp_path: Path, prometheus_url: str) -> tuple[str, float]:
    """The fleet page (finance's) of a service reading ``prometheus_url``, and the seconds
    it took."""
    with fresh_database("sqlite", None, tmp_path) as url:  # type: ignore[arg-type]
        upgrade(url)
        with serve(url, Clock(NOW), TEAMS, prometheus_url=prometheus_url) as api:
            return _get(api)


def _get(api: Api) -> tuple[str, float]:
    with signed_in(api, "finance") as client:
        start = time.monotonic()
        r = client.get("/ui/fleet", params={"month": "2026-12"})
        took = time.monotonic() - start
    assert r.status_code == 200, r.text
    return r.text, took


def _alerts(html: str) -> list[list[str]]:
    part = html[html.index('id="alerts"') :]
    body = part[part.index("<tbody>") : part.index("</tbody>")]
    return [
        [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)
    ]


def test_a_firing_alert_is_listed_with_where_and_since(
    prometheus: Prometheus, tmp_path: Path
) -> None:
    html, _ = _page(tmp_path, prometheus.url)
    assert 'id="alerts-trouble"' not in html
    rows = _alerts(html)
    lost = [r for r in rows if r[0] == "GPULost"]
    assert len(lost) == 1, rows
    _, state, severity, where, since, summary = lost[0]
    assert (state, severity) == ("firing", "critical")
    assert "Hostname=node-a" in where and "gpu=3" in where and "UUID=GPU-LOST-1" in where
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", since), since
    assert summary == "GPU 3 on node-a is lost"
    # firing before pending; a rule whose ``for`` has not passed is shown as pending
    states = [r[1] for r in rows]
    assert states == sorted(states, key=lambda s: s != "firing")
    expected = {
        a["labels"]["alertname"]: a["state"]
        for a in prometheus.get("/api/v1/alerts")["data"]["alerts"]
    }
    assert {r[0]: r[1] for r in rows}.items() <= expected.items() | {("GPULost", "firing")}


def test_an_unreachable_query_api_gives_the_notice_quickly(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    html, took = _page(tmp_path, f"http://127.0.0.1:{closed}")
    assert 'id="alerts-trouble"' in html
    assert "could not be reached" in html
    assert took < 10
    assert 'id="alerts"' not in html


@pytest.mark.parametrize(
    "answering",
    [
        (b"<html>not the API</html>", "text/html"),
        (b'{"status": "error", "error": "boom"}', "application/json"),
        (b'{"status": "success", "data": {"alerts": "none"}}', "application/json"),
        (b"x" * (2 * 2**20), "text/plain"),
    ],
    indirect=True,
    ids=["html", "error", "no-list", "too-big"],
)
def test_an_answer_that_is_not_the_alerts_json_gives_the_notice(
    answering: str, tmp_path: Path
) -> None:
    html, took = _page(tmp_path, answering)
    assert 'id="alerts-trouble"' in html
    assert "Alerts unavailable" in html
    assert took < 10
