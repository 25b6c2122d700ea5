"""Where the cost model lives (costsvc/rules/cost_model_source.py): the operator's file is never
rewritten (a PUT is a clear 409, also when the file is read-only; its bytes, comments and mode
stay), or versions kept in the database, put in force by the API or ``gpu-costsvc cost-model
import``, each audited, and used by ``gpu-costsvc ingest``. SQLite and PostgreSQL, real HTTP."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import yaml
from sqlalchemy import create_engine, select

from costsvc.auth.audit import recent
from costsvc.db.cost_models import activate
from costsvc.db.migrate import upgrade
from costsvc.db.models import GpuPresence
from costsvc.rules.chargeback import UNALLOCATED
from costsvc.rules.cost_model import parse
from tests.costsvc.apiserver import NOV20, Api, Clock, serve
from tests.costsvc.history import H100, HOUR, MODEL, model
from tests.costsvc.pages_history import MODEL as PAGES_MODEL
from tests.costsvc.pages_history import NOW as PAGES_NOW
from tests.costsvc.pages_history import TEAMS as PAGES_TEAMS
from tests.costsvc.pages_history import seed
from tests.prom import Prometheus

OPERATOR_FILE = f"""# prices agreed with finance, 2026-10 — do not edit without a ticket
policies:
  idle_policy: separate   # idle GPUs on their own line
versions:
  - effective_from: "2026-11-01T00:00:00Z"
    prices:
      - model: "{H100}"
        hourly: "2.50"   # on-demand list price
"""


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("COSTSVC_")}
    return subprocess.run(
        [sys.executable, "-m", "costsvc.cli", *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_file_managed_cost_model_is_never_rewritten(db_url: str, tmp_path: Path) -> None:
    upgrade(db_url)
    (tmp_path / "config").mkdir()
    path = tmp_path / "config" / "cost-model.yaml"
    path.write_text(OPERATOR_FILE)
    path.chmod(0o444)  # read-only, as a ConfigMap mount or a root-owned /app is
    before = path.read_bytes(), stat.S_IMODE(path.stat().st_mode)
    with serve(db_url, Clock(NOV20), cost_model=path) as api:
        got = api.get("/v1/cost-model", "finance").json()
        assert (got["source"], got["path"], got["sha256"]) == ("file", str(path), MODEL.sha256())
        doc = model("3.00").document()
        r = api.http.put("/v1/cost-model", json=doc, headers=api.auth("admin"))
        assert r.status_code == 409, r.text
        assert "managed by the file" in r.text and str(path) in r.text
        path.chmod(0o644)  # writable or not: the answer is the same, and nothing is written
        r = api.http.put("/v1/cost-model", json=doc, headers=api.auth("admin"))
        assert r.status_code == 409, r.text
        path.chmod(0o444)
        assert api.get("/v1/cost-model", "finance").json()["sha256"] == MODEL.sha256()
        assert [
            e for e in api.get("/v1/audit", "admin").json() if "cost_model" in e["action"]
        ] == []
    assert (path.read_bytes(), stat.S_IMODE(path.stat().st_mode)) == before
    assert [p.name for p in path.parent.iterdir()] == ["cost-model.yaml"]  # no temp files
    # importing into the database is refused too while the file is the cost model
    env = {"COSTSVC_DATABASE_URL": db_url, "COSTSVC_COST_MODEL": str(path)}
    done = cli("cost-model", "import", str(path), env=env)
    assert done.returncode == 2 and "managed by the file" in done.stderr, done.stderr


def test_cost_model_versions_in_the_database(
    prometheus: Prometheus, db_url: str, tmp_path: Path
) -> None:
    upgrade(db_url)
    with serve(db_url, Clock(NOV20)) as api:
        admin = api.auth("admin")
        empty = api.get("/v1/cost-model", "finance").json()
        assert (empty["source"], empty["sha256"]) == (None, None)
        broken = model().document()
        broken["versions"][0]["prices"][0]["hourly"] = "0"
        r = api.http.put("/v1/cost-model", json=broken, headers=admin)
        assert r.status_code == 400 and "prices" in r.text
        r = api.http.put("/v1/cost-model", json=model("3.00").document(), headers=admin)
        assert r.status_code == 200, r.text
        first = r.json()
        assert (first["source"], first["activated_by"]) == ("database", "admin")
        assert first["sha256"] == model("3.00").sha256()
        assert api.get("/v1/cost-model", "finance").json() == first
        entry = api.get("/v1/audit", "admin").json()[0]
        assert (entry["action"], entry["target"], entry["detail"]) == (
            "cost_model.replace",
            "database",
            {"before_sha256": None, "after_sha256": first["sha256"], "via": "api"},
        )
    # the operator's YAML imported by a command, audited with what it replaced
    path = tmp_path / "cost-model.yaml"
    path.write_text(OPERATOR_FILE)
    env = {"COSTSVC_DATABASE_URL": db_url, "COSTSVC_PROMETHEUS_URL": prometheus.url}
    done = cli("cost-model", "import", str(path), "--as", "ops", env=env)
    assert done.returncode == 0, done.stderr
    shown = cli("cost-model", "show", env=env)
    assert shown.returncode == 0 and f"sha256 {MODEL.sha256()}" in shown.stdout
    assert "from the database" in shown.stdout
    # ingest prices with the database's model: 2.50 per GPU-hour, not the 3.00 before it
    done = cli(
        "ingest", "--start", "2026-11-10T05:00:00Z", "--end", "2026-11-10T06:00:00Z", env=env
    )
    assert done.returncode == 0, done.stderr
    engine = create_engine(db_url)
    with engine.connect() as conn:
        prices = set(conn.execute(select(GpuPresence.price).where(GpuPresence.hour == HOUR)))
    assert prices == {(2_500_000,)}
    entry = recent(engine, 1)[0]
    engine.dispose()
    assert (entry.actor, entry.action, entry.detail) == (
        "ops",
        "cost_model.replace",
        {"before_sha256": first["sha256"], "after_sha256": MODEL.sha256(), "via": "cli"},
    )


def _labelled(team_keys: list[str]) -> dict[str, object]:
    """The pages' history's cost model, its team label keys ``team_keys``."""
    return {**PAGES_MODEL.document(), "labels": {"team": team_keys}}


def test_allocation_label_keys_are_the_cost_model_in_force(db_url: str, tmp_path: Path) -> None:
    """``/allocation``'s owner label keys come from the cost model in force: the one kept in the
    database when no file is configured (never the file's alone, which would ignore a
    database-kept model's keys), the file when one is."""
    seed(db_url)  # teams a, b, nlp as chargeback columns; no pod label history at all
    engine = create_engine(db_url)
    try:
        activate(engine, parse(_labelled(["squad"])), "test", "cli")
    finally:
        engine.dispose()
    window = "2026-10-31T22:00:00Z,2026-12-04T00:00:00Z"

    def names(api: Api, aggregate: str) -> set[str]:
        r = api.get("/allocation", window=window, aggregate=aggregate)
        assert r.status_code == 200, r.text
        return {name for s in r.json()["data"] for name in s}

    with serve(db_url, Clock(PAGES_NOW), PAGES_TEAMS) as api:
        teams = names(api, "team")
        assert {"a", "b", "nlp"} <= teams
        # the database's key fills the team column; a label no pod has is nobody's
        assert names(api, "label:squad") == teams
        assert names(api, "label:crew") == {UNALLOCATED}
    path = tmp_path / "cost-model.yaml"
    path.write_text(yaml.safe_dump(_labelled(["crew"])))
    with serve(db_url, Clock(PAGES_NOW), PAGES_TEAMS, cost_model=path, prefix="f-") as api:
        assert names(api, "label:crew") == teams  # the file is the model in force
        assert names(api, "label:squad") == {UNALLOCATED}
