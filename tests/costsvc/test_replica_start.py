"""What each cost service pod's init containers run (deploy/helm, deploy/kubernetes): the
schema upgrade, one replica after another on PostgreSQL, and the admin token of a Secret
registered once (`gpu-costsvc token create --from-file`)."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, inspect, text

from costsvc import cli
from costsvc.auth.tokens import digest, principal_of, register_given
from costsvc.db.migrate import LOCK_KEY, upgrade
from tests.costsvc.conftest import fresh_database


def test_upgrade_waits_for_another_replicas_upgrade(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """While another session holds the upgrade lock, an upgrade waits on it and touches
    nothing; once it is released, the upgrade runs to the head."""
    with fresh_database("postgresql", request, tmp_path) as url:
        engine = create_engine(url)
        holder = engine.connect()
        holder.execute(text("SELECT pg_advisory_lock(:k)"), {"k": LOCK_KEY})
        holder.commit()
        failed: list[BaseException] = []

        def upgrade_in_thread() -> None:
            try:
                upgrade(url)
            except BaseException as exc:  # re-raised by the test below
                failed.append(exc)

        other = threading.Thread(target=upgrade_in_thread)
        other.start()
        waiting = text(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND objid = :k"
        )
        with engine.connect() as probe:
            for _ in range(600):  # until the other upgrade is queued on the lock
                if probe.execute(waiting, {"k": LOCK_KEY}).scalar():
                    break
                probe.rollback()
                other.join(0.05)
            else:
                pytest.fail("the upgrade never waited for the lock")
        assert other.is_alive()
        assert "alembic_version" not in inspect(engine).get_table_names()
        holder.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": LOCK_KEY})
        holder.commit()
        holder.close()
        other.join(60)
        assert not other.is_alive() and not failed, failed
        assert "chargeback" in inspect(engine).get_table_names()
        upgrade(url)  # a later replica: at the head already, nothing to do
        engine.dispose()


def test_admin_token_from_a_secret_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The token of the file is registered with its role, once: the next replica's init
    container leaves it as it is; a bad token, a missing file or a taken name fail (exit 2)
    naming why. In-process `gpu-costsvc` (tests/costsvc/test_cli.py runs the real process)."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("COSTSVC_DATABASE_URL", url)
    upgrade(url)

    def gpu_costsvc(*args: str) -> tuple[int, str]:
        code = cli.main(list(args))
        out = capsys.readouterr()
        return code, out.out + out.err

    secret = tmp_path / "token"
    token = "gfo_" + "A1b2C3d4" * 6
    secret.write_text(token + "\n")
    create = ["token", "create", "--name", "bootstrap-admin", "--role", "admin", "--from-file"]
    code, said = gpu_costsvc(*create, str(secret))
    assert code == 0 and "registered" in said and token not in said
    code, said = gpu_costsvc(*create, str(secret))
    assert code == 0 and "live token already" in said
    engine = create_engine(url)
    who = principal_of(engine, digest(token))
    assert who is not None and (who.name, who.role) == ("bootstrap-admin", "admin")
    assert gpu_costsvc("token", "list")[1].splitlines() == ["bootstrap-admin\tadmin\t-\tlive"]

    other = tmp_path / "other"
    other.write_text("gfo_" + "Z9" * 20)
    code, said = gpu_costsvc(*create, str(other))
    assert code == 2 and "'bootstrap-admin' exists" in said
    short = tmp_path / "short"
    short.write_text("abc")
    code, said = gpu_costsvc(*create, str(short))
    assert code == 2 and "32 to 512" in said
    code, said = gpu_costsvc(*create, str(tmp_path / "nope"))
    assert code == 2 and "--from-file" in said
    assert register_given(engine, "bootstrap-admin", "admin", token, "test") is False
    engine.dispose()


def test_the_registered_token_opens_the_api(tmp_path: Path) -> None:
    """The Secret's token is a working admin token: /v1/tokens answers it, and nothing else."""
    from fastapi.testclient import TestClient

    from costsvc.api.app import create_app
    from costsvc.kit.settings import Settings

    url = f"sqlite:///{tmp_path / 'api.db'}"
    upgrade(url)
    engine = create_engine(url)
    token = "gfo_" + "k" * 43
    assert register_given(engine, "bootstrap-admin", "admin", token, "test") is True
    engine.dispose()
    with TestClient(create_app(Settings(database_url=url))) as client:
        ok = client.get("/v1/tokens", headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == httpx.codes.OK, ok.text
        nope = client.get("/v1/tokens", headers={"Authorization": "Bearer gfo_" + "x" * 43})
        assert nope.status_code == httpx.codes.UNAUTHORIZED
