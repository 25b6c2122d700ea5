from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from sqlalchemy import create_engine, inspect

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "costsvc.cli", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


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
    for args, says in (
        (["report"], "--month"),
        (["report", "--month", "2026-13"], "--month"),
        (["report", "--month", "2026-11", "--group-by", "colour"], "colour"),
        (["close", "--month", "26-11"], "--month"),
        (["token", "create"], "--name"),
        (["token", "create", "--name", "x", "--role", "team"], "--team"),
        (["serve"], "COSTSVC_COST_MODEL"),
    ):
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
    assert done.stderr.strip().endswith(
        "versions: List should have at least 1 item after validation, not 0"
    )


def test_serve_with_worker_processes_answers_and_stops_on_sigint(tmp_path: Path) -> None:
    from costsvc.auth.tokens import create_token
    from costsvc.db.migrate import upgrade
    from tests.procs import Process
    from tests.prom import free_port

    url = f"sqlite:///{tmp_path / 'w.db'}"
    upgrade(url)
    engine = create_engine(url)
    token = create_token(engine, "ops", "admin", None, "test")
    engine.dispose()
    port = free_port()
    proc = Process(
        [sys.executable, "-m", "costsvc.cli", "serve", "--no-ingest", "--workers", "2"],
        env={"COSTSVC_DATABASE_URL": url, "COSTSVC_LISTEN_ADDRESS": f"127.0.0.1:{port}"},
    )
    try:
        proc.wait_for(r"Started parent process", 30)
        started = proc.wait_for(r"Application startup complete", 30)
        assert started
        auth = {"Authorization": f"Bearer {token}"}
        deadline = time.monotonic() + 30
        while True:  # both workers share the socket: ask until one answers
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/v1/costs", headers=auth, timeout=5)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert r.status_code == 200 and r.json()["rows"] == []

        def workers() -> set[str]:
            return set(re.findall(r"Started server process \[(\d+)\]", proc.output()))

        deadline = time.monotonic() + 30
        while len(workers()) < 2 and time.monotonic() < deadline:  # the second may start later
            time.sleep(0.1)
        assert len(workers()) == 2, proc.output()
        proc.proc.send_signal(signal.SIGINT)
        assert proc.proc.wait(30) == 0, proc.output()
    finally:
        proc.stop()


def test_token_file_for_a_scraper_is_made_once_and_the_last_admin_stays(tmp_path: Path) -> None:
    """`token create --output` (the compose stack's Prometheus token) writes the token to a
    file only its owner reads (0600) and does nothing while that token is live; `token
    revoke` refuses the last admin token."""
    env = {"COSTSVC_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}"}
    assert run("db", "upgrade", env=env).returncode == 0
    out = tmp_path / "token"
    made = run(
        "token", "create", "--name", "prom", "--role", "metrics", "--output", str(out), env=env
    )
    assert made.returncode == 0, made.stderr
    token = out.read_text().strip()
    assert token.startswith("gfo_") and token not in made.stdout
    assert out.stat().st_mode & 0o777 == 0o600  # whatever the umask (run's: the default)
    again = run(
        "token", "create", "--name", "prom", "--role", "metrics", "--output", str(out), env=env
    )
    assert again.returncode == 0, again.stderr
    assert out.read_text().strip() == token  # kept: still live
    assert run("token", "revoke", "--name", "prom", env=env).returncode == 0
    # revoked: a new token is needed, and the name is taken by the revoked one
    renamed = run(
        "token", "create", "--name", "prom2", "--role", "metrics", "--output", str(out), env=env
    )
    assert renamed.returncode == 0 and out.read_text().strip() != token
    assert run("token", "create", "--name", "ops", "--role", "admin", env=env).returncode == 0
    last = run("token", "revoke", "--name", "ops", env=env)
    assert last.returncode == 2 and "last live admin" in last.stderr
    bad = run("token", "create", "--name", "ops/ci", "--role", "admin", env=env)
    assert bad.returncode == 2 and "token name" in bad.stderr


def test_a_token_file_is_0600_under_any_umask_and_owned_as_asked(tmp_path: Path) -> None:
    env = {"COSTSVC_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}"}
    assert run("db", "upgrade", env=env).returncode == 0
    out = tmp_path / "token"
    me = f"{os.getuid()}:{os.getgid()}"
    old = os.umask(0)  # the child inherits it: a file made with the umask's mode is 0666
    try:
        made = run(
            "token",
            "create",
            "--name",
            "p",
            "--role",
            "metrics",
            "--output",
            str(out),
            "--owner",
            me,
            env=env,
        )
    finally:
        os.umask(old)
    assert made.returncode == 0, made.stderr
    st = out.stat()
    assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o600, os.getuid(), os.getgid())
    assert not list(tmp_path.glob(".token*"))  # no temporary file left
    bad = run(
        "token",
        "create",
        "--name",
        "q",
        "--role",
        "metrics",
        "--output",
        f"{out}2",
        "--owner",
        "nobody",
        env=env,
    )
    assert bad.returncode == 2 and "--owner 'nobody'" in bad.stderr
    assert "q\t" not in run("token", "list", env=env).stdout  # refused before anything is made
