"""Many clusters through a real distributed store.

Two Prometheus servers — clusters ``east`` and ``west``, each with the external label
``cluster`` — scrape one simulated exporter each and remote-write through ``vmagent`` into
VictoriaMetrics (Debian's ``victoria-metrics`` package, which ships ``vmagent``). The cost
service ingests both clusters from VictoriaMetrics, where every series carries its ``cluster``
label, and the money must equal what it computes from each Prometheus directly (where the
series carry none and the cluster is the configured name), line by line and byte for byte in
the CSV.

The data is scraped live (Prometheus remote-writes only samples newer than its own start: a
history backfilled into its blocks is never sent), so the hour ingested is the current one,
partly elapsed — the comparison is of the same samples through two query paths.
"""

from __future__ import annotations

import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import create_engine, select

from costsvc.db.migrate import upgrade
from costsvc.db.models import Chargeback, GpuPresence
from costsvc.ingest.gauges.exporter import READS
from costsvc.ingest.prom import PrometheusReader
from costsvc.ingest.serial import ingest_hours
from costsvc.kit.times import month_of
from costsvc.reports.monthly import chargeback_csv
from costsvc.rules.chargeback import KEY, MONEY
from costsvc.rules.cost_model import load
from tests.conftest import require_binary
from tests.procs import ROOT, Process, start_exporter
from tests.prom import Prometheus, free_port

CLUSTERS = {"east": "fleet-h100x8.yaml", "west": "fleet-shared.yaml"}
MODEL = load(ROOT / "examples" / "cost-model.yaml")
SCRAPES = 20  # seconds of live data per cluster (1 s scrapes)
# every series the ingest reads, and the info series it reads with last_over_time
SERIES = [name for name, _ in READS] + ["gpu_mig_instance_info"]


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return str(resp.read().decode())
    except OSError:
        return None


def _until(check: Any, timeout: float, what: str, *procs: Process) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        for p in procs:
            assert p.proc.poll() is None, f"{what}: a process exited:\n{p.output()}"
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.2)  # polling interval while waiting for a condition


class Store:
    """VictoriaMetrics single-node with vmagent in front of it, on loopback."""

    def __init__(self, work: Path) -> None:
        vm_bin, agent_bin = require_binary("victoria-metrics"), require_binary("vmagent")
        self.port, self.agent_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.write_url = f"http://127.0.0.1:{self.agent_port}/api/v1/write"
        self.vm = Process(
            [
                vm_bin,
                f"-httpListenAddr=127.0.0.1:{self.port}",
                f"-storageDataPath={work / 'vm'}",
                "-retentionPeriod=100y",
                "-search.latencyOffset=0s",  # answer with the newest samples at once
                "-search.disableCache",
                "-loggerLevel=ERROR",
            ]
        )
        self.agent = Process(
            [
                agent_bin,
                f"-httpListenAddr=127.0.0.1:{self.agent_port}",
                f"-remoteWrite.url={self.url}/api/v1/write",
                f"-remoteWrite.tmpDataPath={work / 'vmagent'}",
                "-remoteWrite.flushInterval=500ms",
                "-loggerLevel=ERROR",
            ]
        )
        for port, proc in ((self.port, self.vm), (self.agent_port, self.agent)):
            _until(lambda p=port: _get(f"http://127.0.0.1:{p}/health"), 30, "health", proc)

    def stop(self) -> None:
        self.agent.stop()
        self.vm.stop()


def _prometheus(binary: str, work: Path, cluster: str, target: int, write_url: str) -> Prometheus:
    config = {
        "global": {
            "scrape_interval": "1s",
            "scrape_timeout": "1s",
            "external_labels": {"cluster": cluster},
        },
        "scrape_configs": [
            {"job_name": "gpu-exporter", "static_configs": [{"targets": [f"127.0.0.1:{target}"]}]}
        ],
        "remote_write": [{"url": write_url, "queue_config": {"batch_send_deadline": "500ms"}}],
    }
    work.mkdir()
    prom = Prometheus(
        binary,
        work,
        [],
        config_text=yaml.safe_dump(config),
        extra_args=["--storage.tsdb.retention.time=100y"],
    )
    prom.wait_ready()
    return prom


def _counts(query: Any, selector: str, at: float) -> dict[str, int]:
    """Samples per series name of ``selector`` within the last two hours before ``at``."""
    out = {}
    for name in SERIES:
        result = query(f"sum(count_over_time({name}{selector}[2h] @ {at:.3f}))")
        out[name] = int(float(result[0]["value"][1])) if result else 0
    return out


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Both clusters scraped live for SCRAPES seconds, and every sample in VictoriaMetrics."""
    binary = require_binary("prometheus")
    work = tmp_path_factory.mktemp("victoria")
    with ExitStack() as stack:
        store = Store(work)
        stack.callback(store.stop)
        exporters, proms = [], {}
        start = datetime.now(UTC)
        for cluster, spec in CLUSTERS.items():
            proc, port = start_exporter(
                "--simulate", str(ROOT / "examples" / spec), "--collect-interval", "1s"
            )
            stack.callback(proc.stop)
            exporters.append(proc)
            proms[cluster] = _prometheus(binary, work / cluster, cluster, port, store.write_url)
            stack.callback(proms[cluster].stop)
        for prom in proms.values():
            prom.until(
                lambda p=prom: p.query(f"min(count_over_time(gpu_device_up[1h])) >= {SCRAPES}"),
                SCRAPES + 30,
                f"{SCRAPES} scrapes",
            )
        for proc in exporters:  # no new samples from here on
            proc.stop()
        stop = datetime.now(UTC)
        at = stop.timestamp() + 1

        def vm_query(expr: str) -> list[dict[str, Any]]:
            body = _get(f"{store.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
            return list(yaml.safe_load(body)["data"]["result"]) if body else []

        seen: set[str] = set()
        for cluster, prom in proms.items():
            expected = _counts(prom.query, "", at)
            seen |= {name for name, n in expected.items() if n}
            _until(
                lambda c=cluster, e=expected: _counts(vm_query, f'{{cluster="{c}"}}', at) == e,
                60,
                f"{cluster}: every sample through vmagent into VictoriaMetrics",
                store.vm,
                store.agent,
            )
        assert seen == set(SERIES)  # every series the ingest reads, in one cluster or both
        yield {"start": start, "stop": stop, "proms": proms, "store": store}


def _ingested(
    path: Path, sources: list[tuple[str, str]], hours: list[datetime]
) -> tuple[str, list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Ingest ``hours`` from each (URL, configured cluster) into a fresh SQLite database; its
    month's CSV, chargeback rows and GPU rows."""
    url = f"sqlite:///{path}"
    upgrade(url)
    engine = create_engine(url)
    try:
        for prom_url, cluster in sources:
            reader = PrometheusReader(prom_url)
            try:
                # the hours scraped live, the running one included, on purpose: the serial
                # loop takes what it is given (ingest() takes complete hours only)
                report = ingest_hours(engine, reader, MODEL, cluster, hours)
            finally:
                reader.close()
            assert report.done == hours, report.failed
        c, g = Chargeback, GpuPresence
        key = [getattr(c, k) for k in KEY]
        with engine.connect() as conn:
            lines = conn.execute(
                select(c.hour, *key, *(getattr(c, m) for m in MONEY)).order_by(c.hour, *key)
            ).all()
            gpus = conn.execute(
                select(g.hour, g.cluster, g.node, g.gpu_uuid, g.present_us, g.cost).order_by(
                    g.hour, g.cluster, g.gpu_uuid
                )
            ).all()
        csv = "".join(chargeback_csv(engine, month_of(hours[0])))
    finally:
        engine.dispose()
    return csv, [tuple(r) for r in lines], [tuple(r) for r in gpus]


@pytest.mark.prometheus
def test_two_clusters_through_vmagent_and_victoriametrics_cost_what_each_prometheus_does(
    scraped: dict[str, Any], tmp_path: Path
) -> None:
    hour = scraped["start"].replace(minute=0, second=0, microsecond=0)
    hours = [hour]
    while hours[-1] + timedelta(hours=1) <= scraped["stop"]:
        hours.append(hours[-1] + timedelta(hours=1))
    proms = scraped["proms"]
    direct = _ingested(tmp_path / "direct.db", [(p.url, c) for c, p in proms.items()], hours)
    # one configured name for the whole store: every series says its own cluster
    through = _ingested(tmp_path / "vm.db", [(scraped["store"].url, "unlabelled")], hours)
    csv, lines, gpus = through
    assert {line[1] for line in lines} == set(CLUSTERS)  # both clusters, none "unlabelled"
    assert {g[1] for g in gpus} == set(CLUSTERS)
    assert len(gpus) >= 8 + 3  # the 8 x H100 node and the shared node's GPUs
    assert sum(line[1 + len(KEY) + MONEY.index("allocated")] for line in lines) > 0
    assert gpus == direct[2]
    assert lines == direct[1]
    assert csv == direct[0]
