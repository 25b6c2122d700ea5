from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import create_engine, inspect

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "costsvc.cli", *args], cwd=ROOT,
                          env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip


def test_db_upgrade_from_the_environment(db_url: str) -> None:
    done = run("db", "upgrade", env={"COSTSVC_DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    engine = create_engine(db_url)
    assert "chargeback" in inspect(engine).get_table_names()
    engine.dispose()


def test_bad_setting_names_the_variable() -> None:
    done = run("db", "upgrade", env={"COSTSVC_DATABASE_URL": "mysql://x"})
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "gpu-costsvc: error: COSTSVC_DATABASE_URL: Value error, use a sqlite:// or "
        "postgresql+psycopg:// URL"
    )


def test_bad_report_close_and_token_arguments_fail_naming_them(tmp_path: Path) -> None:
    env = {"COSTSVC_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"}
    for args, says in ((["report"], "--month"), (["report", "--month", "2026-13"], "--month"),
                       (["report", "--month", "2026-11", "--group-by", "colour"], "colour"),
                       (["close", "--month", "26-11"], "--month"),
                       (["token", "create"], "--name"),
                       (["token", "create", "--name", "x", "--role", "team"], "--team"),
                       (["serve"], "COSTSVC_COST_MODEL")):  # fmt: skip
        done = run(*args, env=env)
        assert done.returncode == 2, (args, done.stderr)
        assert says in done.stderr, (args, done.stderr)


def test_ingest_needs_a_cost_model(tmp_path: Path) -> None:
    env = {"COSTSVC_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}", "COSTSVC_COST_MODEL": ""}
    done = run("ingest", env={k: v for k, v in env.items() if v})
    assert done.returncode == 2
    assert "COSTSVC_COST_MODEL" in done.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("versions: []\n")
    done = run("ingest", env={**env, "COSTSVC_COST_MODEL": str(bad)})
    assert done.returncode == 2
    assert done.stderr.strip().endswith("versions: List should have at least 1 item after "
                                        "validation, not 0")  # fmt: skip
