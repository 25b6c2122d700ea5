"""The query API as federated engines need it: tenant headers and bearer tokens (Mimir,
VictoriaMetrics cluster behind an auth proxy), fixed query parameters (Thanos Query's
``partial_response=false`` and ``max_source_resolution=0s``), and answers with warnings (Thanos
Query's partial responses) never billed.

A recording reverse proxy on loopback stands in front of the real Prometheus of the ground-truth
history: the answers are Prometheus's own; the proxy only records what the cost service sent and,
when asked, adds the ``warnings`` list of a partial answer (the form Thanos Query and Prometheus
share: ``{"status": "success", "data": …, "warnings": [...]}``, Prometheus HTTP API docs).
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy import create_engine, func, select

from costsvc.db.migrate import upgrade
from costsvc.db.models import Chargeback
from costsvc.db.runs import watermark
from costsvc.ingest.prom import PrometheusReader
from costsvc.ingest.run import ingest
from costsvc.kit.settings import Settings
from tests.costsvc.history import HOUR, MODEL
from tests.costsvc.history_checks import assert_every_hour_adds_up, by_team
from tests.costsvc.test_cli import run
from tests.prom import Prometheus


class RecordingProxy:
    def __init__(self, upstream: str) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, list[str]]]] = []
        self.warnings: list[str] = []
        self.nan_after: float | None = None  # answer samples after this time as NaN
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer(urlsplit(self.path).query)

            def do_POST(self) -> None:  # a form body (query_range, long selectors)
                self._answer(self.rfile.read(int(self.headers["Content-Length"])).decode())

            def _answer(self, query: str) -> None:
                url = urlsplit(self.path)
                proxy.requests.append(
                    ({k.lower(): v for k, v in self.headers.items()}, parse_qs(query))
                )
                resp = httpx.post(
                    f"{upstream}{url.path}",
                    content=query,
                    headers={"Content-Type": "application/x-www-form-urlencoded"},
                    timeout=30,
                )
                body: Any = resp.json()
                if proxy.warnings:
                    body["warnings"] = proxy.warnings
                # staleness markers come in raw range-selector answers only (a range
                # function's answer has none: costsvc/ingest/gauges/steady.py)
                if proxy.nan_after is not None and url.path == "/api/v1/query":
                    for series in body["data"]["result"]:
                        for sample in series.get("values", []):
                            if sample[0] > proxy.nan_after:
                                sample[1] = "NaN"
                data = json.dumps(body).encode()
                self.send_response(resp.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def proxy(prometheus: Prometheus) -> Iterator[RecordingProxy]:
    p = RecordingProxy(prometheus.url)
    yield p
    p.close()


THANOS = {"partial_response": "false", "max_source_resolution": "0s", "dedup": "true"}


def test_headers_and_parameters_go_with_every_query(
    proxy: RecordingProxy, prometheus: Prometheus, db_url: str, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    settings = Settings(
        prometheus_url=proxy.url,
        prometheus_headers={"X-Scope-OrgID": "gpu-fleet"},
        prometheus_params=THANOS,
        prometheus_bearer_token_file=token,
    )
    upgrade(db_url)
    engine = create_engine(db_url)
    reader = PrometheusReader(
        settings.prometheus_url,
        headers=settings.prometheus_request_headers(),
        params=settings.prometheus_params,
    )
    try:
        report = ingest(engine, reader, MODEL, "c1", [HOUR])
    finally:
        reader.close()
        engine.dispose()
    assert report.done == [HOUR] and not report.failed
    assert len(proxy.requests) > 3
    for headers, params in proxy.requests:
        assert headers["x-scope-orgid"] == "gpu-fleet"
        assert headers["authorization"] == "Bearer s3cret"
        assert {k: params[k] for k in THANOS} == {k: [v] for k, v in THANOS.items()}
        assert len(params["query"]) == 1
        # an instant, or the range of a query_range (the fast reads' summaries)
        assert len(params.get("time", [])) == 1 or len(params["step"]) == 1

    # the money is what the same hour gives straight from Prometheus
    through_proxy = by_team(db_url)
    direct_url = f"sqlite:///{tmp_path / 'direct.db'}"
    upgrade(direct_url)
    direct = create_engine(direct_url)
    plain = PrometheusReader(prometheus.url)
    try:
        assert ingest(direct, plain, MODEL, "c1", [HOUR]).done == [HOUR]
    finally:
        plain.close()
        direct.dispose()
    assert through_proxy == by_team(direct_url) and through_proxy


def test_a_partial_answer_is_never_billed_and_the_hour_is_retried(
    proxy: RecordingProxy, db_url: str
) -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    reader = PrometheusReader(proxy.url, params=THANOS)
    proxy.warnings = ["No StoreAPIs matched for this query"]
    try:
        report = ingest(engine, reader, MODEL, "c1", [HOUR])
        assert report.done == [] and "incomplete answer" in report.failed[HOUR]
        assert "No StoreAPIs matched" in report.failed[HOUR]
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(Chargeback)).scalar() == 0
        assert watermark(engine, "c1") is None
        proxy.warnings = []
        assert ingest(engine, reader, MODEL, "c1", [HOUR]).done == [HOUR]
    finally:
        reader.close()
        engine.dispose()


def test_nan_samples_are_no_reading(proxy: RecordingProxy, db_url: str) -> None:
    """Staleness markers as VictoriaMetrics answers them: the time after them is a gap."""
    reader = PrometheusReader(proxy.url)
    at, seconds = HOUR + timedelta(hours=1), 3600
    half_way = HOUR.timestamp() + 1800
    whole = reader.raw("DCGM_FI_DEV_GPU_UTIL", at, seconds)
    proxy.nan_after = half_way
    half = reader.raw("DCGM_FI_DEV_GPU_UTIL", at, seconds)
    assert whole and [s.labels for s in half] == [s.labels for s in whole]
    for h, w in zip(half, whole, strict=True):
        assert h.samples == [x for x in w.samples if x[0] <= half_way]
        assert 0 < len(h.samples) < len(w.samples)
    upgrade(db_url)
    engine = create_engine(db_url)
    try:
        report = ingest(engine, reader, MODEL, "c1", [HOUR])
    finally:
        reader.close()
        engine.dispose()
    assert report.done == [HOUR] and not report.failed
    assert assert_every_hour_adds_up(db_url) == 1


def _ingest_with_env(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``gpu-costsvc ingest`` with the example cost model, a fresh SQLite file and ``env``."""
    model = Path(__file__).parents[2] / "examples" / "cost-model.yaml"
    return run(
        "ingest",
        env={
            "COSTSVC_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}",
            "COSTSVC_COST_MODEL": str(model),
            **env,
        },
    )


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"COSTSVC_PROMETHEUS_HEADERS": '{"X Scope": "a"}'}, "COSTSVC_PROMETHEUS_HEADERS"),
        (
            {"COSTSVC_PROMETHEUS_HEADERS": '{"X-Scope-OrgID": "a\\r\\nX-Admin: 1"}'},
            "COSTSVC_PROMETHEUS_HEADERS",
        ),
        ({"COSTSVC_PROMETHEUS_PARAMS": '{"query": "up"}'}, "COSTSVC_PROMETHEUS_PARAMS"),
        ({"COSTSVC_PROMETHEUS_PARAMS": "not json"}, "COSTSVC_PROMETHEUS_PARAMS"),
        ({"COSTSVC_PROMETHEUS_URL": "localhost:9090"}, "COSTSVC_PROMETHEUS_URL"),
        ({"COSTSVC_INGEST_READS": "fastest"}, "COSTSVC_INGEST_READS"),
        ({"COSTSVC_INGEST_READS": "integrals"}, "COSTSVC_INGEST_READS"),
        ({"COSTSVC_INGEST_WORKERS": "0"}, "COSTSVC_INGEST_WORKERS"),
        ({"COSTSVC_INGEST_WORKERS": "many"}, "COSTSVC_INGEST_WORKERS"),
        (
            {"COSTSVC_PROMETHEUS_BEARER_TOKEN_FILE": "/nonexistent/token"},
            "COSTSVC_PROMETHEUS_BEARER_TOKEN_FILE",
        ),
    ],
)
def test_bad_query_api_settings_fail_at_start_naming_the_variable(
    env: dict[str, str], says: str, tmp_path: Path
) -> None:
    done = _ingest_with_env(env, tmp_path)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("value", ["fast", "raw", "integrals"])
def test_the_removed_reads_setting_fails_at_start_saying_why(value: str, tmp_path: Path) -> None:
    """How an hour is read is the data's to decide: a deployment that still sets the removed
    setting, to any of its old values, is told it is gone and why, in one line."""
    done = _ingest_with_env({"COSTSVC_INGEST_READS": value}, tmp_path)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if "COSTSVC_INGEST_READS" in line]
    assert len(lines) == 1 and "removed" in lines[0] and "integrals" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("compress", [False, True])
def test_answers_come_uncompressed_unless_asked(
    proxy: RecordingProxy, db_url: str, compress: bool
) -> None:
    """gzip costs the engine and the service CPU on every answer: by default the reader asks
    for none (``Accept-Encoding: identity``); COSTSVC_PROMETHEUS_COMPRESSION asks for it, in
    the serial reader and in the ones a parallel ingest's workers rebuild from its spec."""
    from costsvc.cli import _reader

    reader = _reader(Settings(prometheus_url=proxy.url, prometheus_compression=compress))
    rebuilt = PrometheusReader.from_spec(reader.spec())
    upgrade(db_url)
    engine = create_engine(db_url)
    try:
        assert ingest(engine, reader, MODEL, "c1", [HOUR]).done == [HOUR]
        rebuilt.instant("up", HOUR)
    finally:
        reader.close()
        rebuilt.close()
        engine.dispose()
    sent = {headers.get("accept-encoding", "") for headers, _ in proxy.requests}
    assert len(proxy.requests) > 3
    if compress:  # httpx's own list: gzip, deflate (and br, zstd where installed)
        assert all("gzip" in each for each in sent), sent
    else:
        assert sent == {"identity"}, sent
