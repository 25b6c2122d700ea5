"""The fleet page's lost GPUs with their last XID, read from a real Prometheus holding
``DCGM_FI_DEV_XID_ERRORS`` as dcgm-exporter 4.x and our exporter write it (the code in the
value and in ``err_code``, its text in ``err_msg``; a new code is a new series): the GPUs the
stored hours say are lost (pages_history.py's GPU-B1, and GPU-C0 lost in one more hour here)
show the XID of their series seen last in the month up to now; a GPU whose last XID is 0 shows
none; an XID of another cluster or from before the month is not theirs; and a query API that
cannot be reached gives a one-line notice on a page that still answers 200."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from sqlalchemy import create_engine

from costsvc.db import runs
from costsvc.db.hour_facts import store_hour
from costsvc.fleet.xids import Xid, parse, query
from costsvc.rules.attribution import attribute_hour
from tests.costsvc.apiserver import Clock, serve
from tests.costsvc.conftest import fresh_database, prometheus_over
from tests.costsvc.pages_history import CLUSTER, MODEL, NOW, TEAMS, facts, owner, seed
from tests.costsvc.test_pages_access import signed_in
from tests.costsvc.test_pages_fleet import table
from tests.prom import Prometheus

EXTRA = datetime(2026, 12, 3, 8, tzinfo=UTC)  # GPU-C0 lost 10 minutes of this hour too
DEC1 = int(datetime(2026, 12, 1, tzinfo=UTC).timestamp())
XID_AT = int(datetime(2026, 12, 3, 8, 10, tzinfo=UTC).timestamp())  # GPU-B1 falls off the bus
END = int(NOW.timestamp()) - 600  # the last sample, ten minutes before the page's now


def _series(labels: str, code: int, message: str, start: int, end: int) -> list[str]:
    """One series' samples every minute in [start, end)."""
    text = f'DCGM_FI_DEV_XID_ERRORS{{{labels},err_code="{code}",err_msg="{message}"}}'
    return [f"{text} {code} {t}" for t in range(start, end, 60)]


def _history() -> str:
    b1 = 'gpu="1",UUID="GPU-B1",Hostname="node-b"'  # no cluster label: COSTSVC_CLUSTER's
    c0 = 'gpu="0",UUID="GPU-C0",Hostname="node-c",cluster="c1"'
    lines = [
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
        *_series(b1, 0, "No Error", DEC1, XID_AT),
        *_series(b1, 79, "GPU has fallen off the bus", XID_AT, END),
        # the same UUID in another cluster: not c1's GPU-B1
        *_series(b1 + ',cluster="c2"', 48, "Double Bit ECC Error", DEC1, END),
        # GPU-C0: an XID on the 1st, none since its exporter restarted an hour later
        *_series(c0, 13, "Graphics Engine Exception", DEC1, DEC1 + 3600),
        *_series(c0, 0, "No Error", DEC1 + 3600, END),
        "# EOF",
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    work = tmp_path_factory.mktemp("xids-prom")
    (work / "history.om").write_text(_history())
    yield from prometheus_over(work, END - 60)


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """pages_history.py's history, and one more hour in which GPU-C0 is lost too."""
    with fresh_database("sqlite", None, tmp_path_factory.mktemp("xids-db")) as url:  # type: ignore[arg-type]
        seed(url)
        engine = create_engine(url)
        try:
            f = facts(EXTRA)
            f.gpus = [
                dataclasses.replace(g, lost_seconds=Decimal(600)) if g.gpu_uuid == "GPU-C0" else g
                for g in f.gpus
            ]
            run_id = runs.start_run(
                engine, CLUSTER, EXTRA, "ingest", runs.record_cost_model(engine, MODEL)
            )
            result = attribute_hour(EXTRA, f.gpus, f.holdings, owner, MODEL)
            store_hour(engine, CLUSTER, f, result, MODEL.currency, run_id)
        finally:
            engine.dispose()
        yield url


def _lost(db_url: str, prometheus_url: str, prefix: str) -> tuple[str, list[list[str]]]:
    """The fleet page of December (finance's) and its lost GPUs' rows (``prefix``: the
    tokens' names, one per server on the database)."""
    settings = {"prometheus_url": prometheus_url, "cluster": CLUSTER}
    with (
        serve(db_url, Clock(NOW), TEAMS, prefix=prefix, **settings) as api,
        signed_in(api, "finance") as client,
    ):
        r = client.get("/ui/fleet", params={"month": "2026-12"})
    assert r.status_code == 200, r.text
    return r.text, table(r.text, "lost")


def test_a_lost_gpu_shows_its_last_xid(db_url: str, prometheus: Prometheus) -> None:
    html, rows = _lost(db_url, prometheus.url, "up-")
    assert 'id="xids-trouble"' not in html
    assert "XID (last)" in html
    by_gpu = {r[0]: r for r in rows}
    assert set(by_gpu) == {"GPU-B1", "GPU-C0"}
    b1, c0 = by_gpu["GPU-B1"], by_gpu["GPU-C0"]
    assert b1[1:3] == ["c1", "node-b"] and b1[5] == "2026-12-03 08:00"
    # its series seen last: 79 (not the 0 before it, nor c2's 48)
    assert b1[-1] == "79 GPU has fallen off the bus"
    # its series seen last says 0 (the 13 was before its exporter restarted): none
    assert c0[-1] == "—"


def test_an_unreachable_query_api_gives_the_notice(db_url: str) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    html, rows = _lost(db_url, f"http://127.0.0.1:{closed}", "down-")
    assert 'id="xids-trouble"' in html
    notice = html[html.index('id="xids-trouble"') :].split("</p>")[0]
    assert "XIDs unavailable" in notice and "could not be reached" in notice
    assert [r[0] for r in rows] == ["GPU-B1", "GPU-C0"]
    assert {r[-1] for r in rows} == {"—"}


def _vector(*series: tuple[dict[str, str], str]) -> dict[str, object]:
    return {
        "resultType": "vector",
        "result": [{"metric": m, "value": [1.0, v]} for m, v in series],
    }


def test_the_series_seen_last_wins_and_the_answer_is_bounded() -> None:
    gpu = {"UUID": "GPU-1", "err_msg": "x" * 500}
    data = _vector(
        ({**gpu, "err_code": "79", "costsvc_xid_part": "code"}, "79"),
        ({**gpu, "err_code": "79", "costsvc_xid_part": "seen"}, "200"),
        ({**gpu, "err_code": "0", "costsvc_xid_part": "code"}, "0"),
        ({**gpu, "err_code": "0", "costsvc_xid_part": "seen"}, "100"),
        ({"UUID": "GPU-OTHER", "costsvc_xid_part": "code"}, "31"),  # not asked about
    )
    got = parse(data, "c1", {"GPU-1"})
    assert list(got) == [("c1", "GPU-1")]
    assert got[("c1", "GPU-1")].code == 79
    assert len(got[("c1", "GPU-1")].message) <= 81
    # the same time: a non-zero code over 0
    tied = _vector(
        ({"UUID": "GPU-1", "costsvc_xid_part": "code"}, "0"),
        ({"UUID": "GPU-1", "GPU_I_ID": "1", "costsvc_xid_part": "code"}, "48"),
    )
    assert parse(tied, "c1", {"GPU-1"}) == {("c1", "GPU-1"): Xid(48, "")}
    # a UUID's dot is matched as a dot
    assert 'UUID=~"MIG-1\\\\.2|GPU-1"' in query(["MIG-1.2", "GPU-1"], 60)
