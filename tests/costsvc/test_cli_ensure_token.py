"""`gpu-costsvc token create --from-file --ensure` (the chart's admin-token init container,
deploy/helm): idempotent for the same token, a clear refusal (exit 4) for another one under
the same name, and `--on-conflict warn` a warning with exit 0 (no crash-looping pod); on
SQLite and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENSURE = ("token", "create", "--name", "bootstrap-admin", "--role", "admin", "--from-file")


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


def _create(env: dict[str, str], file: Path, *more: str) -> tuple[int, str]:
    done = run(*ENSURE, str(file), "--ensure", *more, env=env)
    return done.returncode, done.stderr


def test_the_same_token_twice_is_accepted_another_refused(db_url: str, tmp_path: Path) -> None:
    env = {"COSTSVC_DATABASE_URL": db_url}
    assert run("db", "upgrade", env=env).returncode == 0
    secret = tmp_path / "token"
    secret.write_text("gfo_" + "a" * 43 + "\n")
    first = _create(env, secret)
    assert first[0] == 0 and "registered (bootstrap-admin)" in first[1], first
    again = _create(env, secret)
    assert again[0] == 0 and "is a live token already" in again[1], again

    secret.write_text("gfo_" + "b" * 43)  # the Secret made anew
    code, said = _create(env, secret)
    assert code == 4, said
    assert "error:" in said and "'bootstrap-admin' holds another live admin token" in said
    assert "register the new one under another --name" in said
    code, said = _create(env, secret, "--on-conflict", "warn")
    assert code == 0 and "warning:" in said and "the registered token stays in force" in said
    listed = run("token", "list", env=env).stdout.splitlines()
    assert listed == ["bootstrap-admin\tadmin\t-\tlive"]  # the first one, still

    # the first token under another name is no match either
    secret.write_text("gfo_" + "a" * 43)
    other = run(*ENSURE[:3], "other", *ENSURE[4:], str(secret), "--ensure", env=env)
    assert other.returncode == 4 and "is live as 'bootstrap-admin'" in other.stderr
    bad = run("token", "create", "--name", "x", "--role", "admin", "--ensure", env=env)
    assert bad.returncode == 2 and "--ensure is for token create --from-file" in bad.stderr
