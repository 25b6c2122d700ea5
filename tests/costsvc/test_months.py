"""Month close: a closed month's reports are byte-identical on every export (SHA-256 recorded
and served); late data and back-dated prices become correction rows in the next open month;
the invariant holds over originals + corrections. Over HTTP and the CLI, SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import hashlib
import io
import os
import subprocess
import sys
from datetime import UTC, datetime

from sqlalchemy import create_engine, func, select

from costsvc.db.models import Chargeback
from tests.costsvc.apiserver import Clock, serve
from tests.costsvc.history import HOUR, HOUR2, MODEL, ingest_with, model
from tests.costsvc.history_checks import assert_every_hour_adds_up
from tests.prom import Prometheus

DEC2 = datetime(2026, 12, 2, 9, tzinfo=UTC)


def test_close_freezes_the_month_and_late_data_becomes_corrections(
    prometheus: Prometheus, db_url: str
) -> None:
    ingest_with(prometheus.url, db_url, MODEL, [HOUR])
    with serve(db_url, Clock(DEC2)) as api:
        fin = api.auth("finance")
        assert api.http.post("/v1/months/2026-12/close", headers=fin).status_code == 409
        # only 05:00 of November was ingested: the hours after it are missing, named
        refused = api.http.post("/v1/months/2026-11/close", headers=fin)
        assert refused.status_code == 409
        assert "c1 2026-11-10T06:00:00Z..2026-11-30T23:00:00Z (498 hours)" in refused.text
        assert not api.get("/v1/months/2026-11", "finance").json()["closed"]
        r = api.http.post("/v1/months/2026-11/close", params={"force": "true"}, headers=fin)
        assert r.status_code == 200, r.text
        entry = api.get("/v1/audit", "admin").json()[0]
        assert entry["action"] == "month.close" and entry["detail"]["forced"] is True
        assert entry["detail"]["skipped"] == [
            {
                "cluster": "c1",
                "state": "missing",
                "first": "2026-11-10T06:00:00Z",
                "last": "2026-11-30T23:00:00Z",
                "hours": 498,
            }
        ]
        state = r.json()
        assert state["closed"] and state["closed_by"] == "finance"
        again = api.http.post("/v1/months/2026-11/close", headers=fin)
        assert again.status_code == 409 and "already closed" in again.text

        def export(kind: str, month: str = "2026-11") -> tuple[bytes, str | None]:
            resp = api.http.get(f"/v1/reports/{kind}.csv", params={"month": month}, headers=fin)
            assert resp.status_code == 200
            return resp.content, resp.headers.get("x-content-sha256")

        csv1, csv_sha = export("chargeback")
        focus1, focus_sha = export("focus")
        assert hashlib.sha256(csv1).hexdigest() == csv_sha == state["chargeback_csv_sha256"]
        assert hashlib.sha256(focus1).hexdigest() == focus_sha == state["focus_csv_sha256"]

        # late data for November (an hour never ingested) and a back-dated price for 05:00
        ingest_with(prometheus.url, db_url, MODEL, [HOUR2])
        ingest_with(prometheus.url, db_url, model("3.00"), [HOUR])
        assert export("chargeback") == (csv1, csv_sha)  # byte-identical, every export
        assert export("focus") == (focus1, focus_sha)
        assert api.get("/v1/months/2026-11", "finance").json() == state

        dec_csv = export("chargeback", "2026-12")[0].decode()
        rows = list(csv.DictReader(io.StringIO(dec_csv)))
        assert rows and {x["charge_class"] for x in rows} == {"correction"}
        assert {x["charge_period_start"][:7] for x in rows} == {"2026-11"}
        by_hour: dict[str, int] = {}
        for x in rows:
            by_hour[x["charge_period_start"]] = by_hour.get(x["charge_period_start"], 0) + int(
                x["total_cost"].replace(".", "")
            )
        # 05:00 was 3 GPUs x 2.50 and is now 3 x 3.00: +1.50; 06:00 arrives whole
        assert by_hour["2026-11-10T05:00:00Z"] == 1_500_000
        focus_dec = list(csv.DictReader(io.StringIO(export("focus", "2026-12")[0].decode())))
        assert {x["ChargeClass"] for x in focus_dec} == {"Correction"}
        assert len(focus_dec) == len(rows)
    # originals + corrections = each hour's current fleet cost, to the micro-unit
    assert assert_every_hour_adds_up(db_url) == 2
    engine = create_engine(db_url)
    with engine.connect() as conn:
        months = dict(
            conn.execute(
                select(Chargeback.billing_month, func.count()).group_by(Chargeback.billing_month)
            ).all()
        )
    engine.dispose()
    assert set(months) == {"2026-11", "2026-12"}

    # the CLI gives the same bytes as the API for the closed month
    env = {**os.environ, "COSTSVC_DATABASE_URL": db_url}
    out = subprocess.run(
        [sys.executable, "-m", "costsvc.cli", "report", "--month", "2026-11"],
        env=env,
        capture_output=True,
        check=True,
    )
    assert out.stdout == csv1
    cli = [sys.executable, "-m", "costsvc.cli", "close", "--month", "2026-10", "--as", "ops"]
    # October has not one hour ingested: refused, unless forced with a reason
    empty = subprocess.run(cli, env=env, capture_output=True, text=True, check=False)
    assert empty.returncode == 3 and "2026-10 is empty" in empty.stderr, empty.stderr
    cli += ["--force", "--reason", "before the cluster was installed"]
    done = subprocess.run(cli, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "closed 2026-10" in done.stdout, done.stderr
    again = subprocess.run(cli, env=env, capture_output=True, text=True, check=False)
    assert again.returncode == 2 and "already closed" in again.stderr
