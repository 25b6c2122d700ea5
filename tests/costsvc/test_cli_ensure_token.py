"""`gpu-costsvc token create --from-file --ensure` (the chart's token init containers,
deploy/helm): idempotent for the same token, a clear refusal (exit 4) for another one under
the same name, and `--on-conflict warn` a warning with exit 0 (no crash-looping pod); on
SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from costsvc import cli
from costsvc.db.migrate import upgrade

ENSURE = ("token", "create", "--name", "bootstrap-admin", "--role", "admin", "--from-file")


def test_the_same_token_twice_is_accepted_another_refused(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("COSTSVC_DATABASE_URL", db_url)
    upgrade(db_url)

    def gpu_costsvc(*args: str) -> tuple[int, str]:
        code = cli.main(list(args))
        out = capsys.readouterr()
        return code, out.out + out.err

    secret = tmp_path / "token"
    secret.write_text("gfo_" + "a" * 43 + "\n")
    code, said = gpu_costsvc(*ENSURE, str(secret), "--ensure")
    assert code == 0 and "registered (bootstrap-admin)" in said, said
    code, said = gpu_costsvc(*ENSURE, str(secret), "--ensure")
    assert code == 0 and "is a live token already" in said, said

    secret.write_text("gfo_" + "b" * 43)  # the Secret made anew
    code, said = gpu_costsvc(*ENSURE, str(secret), "--ensure")
    assert code == 4, said
    assert "error:" in said and "'bootstrap-admin' holds another live admin token" in said
    assert "register the new one under another --name" in said
    code, said = gpu_costsvc(*ENSURE, str(secret), "--ensure", "--on-conflict", "warn")
    assert code == 0 and "warning:" in said and "the registered token stays in force" in said
    assert gpu_costsvc("token", "list")[1].splitlines() == ["bootstrap-admin\tadmin\t-\tlive"]

    # the first token under another name (or role) is no match either
    secret.write_text("gfo_" + "a" * 43)
    code, said = gpu_costsvc(*ENSURE[:3], "other", *ENSURE[4:], str(secret), "--ensure")
    assert code == 4 and "is live as 'bootstrap-admin'" in said, said
    code, said = gpu_costsvc(*ENSURE[:5], "metrics", "--from-file", str(secret), "--ensure")
    assert code == 4 and "(admin role)" in said, said
    # a revoked token's name is taken for good
    assert gpu_costsvc("token", "create", "--name", "ops", "--role", "admin")[0] == 0
    assert gpu_costsvc("token", "revoke", "--name", "bootstrap-admin")[0] == 0
    code, said = gpu_costsvc(*ENSURE, str(secret), "--ensure")
    assert code == 4 and "holds a revoked token" in said, said
    # bad input stays a usage error (2)
    secret.write_text("short")
    code, said = gpu_costsvc(*ENSURE[:3], "new", *ENSURE[4:], str(secret), "--ensure")
    assert code == 2 and "32 to 512" in said, said
    code, said = gpu_costsvc("token", "create", "--name", "x", "--role", "admin", "--ensure")
    assert code == 2 and "--ensure is for token create --from-file" in said, said
