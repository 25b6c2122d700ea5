"""The administrator's commands: ``db`` (the schema), ``report`` (a month as CSV or FOCUS),
``close`` (freeze a month), ``cost-model`` (import, show) and ``token`` (create, revoke, list
API tokens)."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from costsvc.commands.common import PROG, UsageError
from costsvc.kit.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy import Engine


def db_command(settings: Settings, action: str, revision: str | None) -> int:
    """``db upgrade`` / ``db downgrade`` (default: head / base)."""
    from costsvc.db.migrate import downgrade, upgrade

    if action == "upgrade":
        upgrade(settings.database_url, revision or "head")
    else:
        downgrade(settings.database_url, revision or "base")
    return 0


def report_command(
    settings: Settings,
    month: str,
    fmt: str,
    out: str | None,
    group_by: str | None,
    focus_version: str = "1.2",
) -> int:
    from costsvc.db.engine import make_engine
    from costsvc.kit.lists import comma_list
    from costsvc.kit.times import parse_month
    from costsvc.reports.focus13_reads import focus13_csv
    from costsvc.reports.monthly import chargeback_csv, focus_csv

    try:
        parse_month(month)
    except ValueError as exc:
        raise UsageError(f"--month: {exc}") from None
    groups = comma_list(group_by)
    if groups and fmt != "csv":
        raise UsageError("--group-by applies to --format csv only")
    engine = make_engine(settings.database_url)
    try:
        if fmt == "csv":
            pieces = chargeback_csv(engine, month, groups)
        elif focus_version == "1.3":
            pieces = focus13_csv(engine, month)
        else:
            pieces = focus_csv(engine, month)
        try:
            first = next(pieces)
        except ValueError as exc:
            raise UsageError(f"--group-by: {exc}") from None
        if out is None or out == "-":
            sys.stdout.write(first)
            for piece in pieces:
                sys.stdout.write(piece)
        else:
            tmp = f"{out}.part"
            with open(tmp, "w", encoding="utf-8", newline="") as f:
                f.write(first)
                for piece in pieces:
                    f.write(piece)
            os.replace(tmp, out)
            print(f"{PROG}: wrote {out}", file=sys.stderr)
    finally:
        engine.dispose()
    return 0


def close_command(
    settings: Settings, month: str, actor: str, force: bool = False, reason: str = ""
) -> int:
    from costsvc.db.engine import make_engine
    from costsvc.months.close import MonthEmpty, MonthError, MonthIncomplete, close_month

    engine = make_engine(settings.database_url)
    try:
        closed = close_month(engine, month, actor, datetime.now(UTC), force, reason)
    except (MonthIncomplete, MonthEmpty) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 3
    except MonthError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:
        raise UsageError(f"--month: {exc}") from None
    finally:
        engine.dispose()
    print(
        f"{PROG}: closed {closed.month}; chargeback.csv sha256 {closed.csv_sha256}, "
        f"focus.csv sha256 {closed.focus_sha256}"
    )
    return 0


def cost_model_command(settings: Settings, action: str, file: str | None, actor: str) -> int:
    """``import FILE``: validate it and put it in force in the database (audited); ``show``:
    the cost model in force, where it lives, as YAML."""
    import yaml

    from costsvc.db.engine import make_engine
    from costsvc.rules.cost_model import CostModelError, load
    from costsvc.rules.cost_model_source import in_force, replace

    if action == "import" and not file:
        raise UsageError("cost-model import needs the FILE to import")
    engine = make_engine(settings.database_url)
    try:
        if action == "import":
            assert file is not None
            try:
                document = load(file).document()  # YAML errors name the line, fields the field
                model = replace(settings.cost_model, engine, document, actor, "cli", file)
            except CostModelError as exc:
                raise UsageError(str(exc)) from None
            print(f"{PROG}: cost model {model.sha256()[:12]} in force (kept in the database)")
            return 0
        found = in_force(settings.cost_model, engine)
        where = f"file {found.path}" if found.path else "the database"
        print(f"# the cost model in force, from {where}, sha256 {found.model.sha256()}")
        sys.stdout.write(yaml.safe_dump(found.model.document(), sort_keys=False))
        return 0
    except CostModelError as exc:
        raise UsageError(str(exc)) from None
    finally:
        engine.dispose()


def owner_of(text: str | None) -> tuple[int, int] | None:
    """``--owner UID:GID`` (numbers), or None."""
    if not text:
        return None
    uid, sep, gid = text.partition(":")
    if not (sep and uid.isdigit() and gid.isdigit()):
        raise UsageError(f"--owner {text!r}: expected UID:GID, two numbers, e.g. 65534:65534")
    return int(uid), int(gid)


def write_secret(path: Path, text: str, owner: tuple[int, int] | None) -> None:
    """``text`` into ``path``, mode 0600 whatever the umask, owned by ``owner`` (the user
    that reads it: a scraper running as another user) where given; written to a temporary
    file beside it and renamed, so a reader never sees half a token."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        if owner is not None:
            os.fchown(fd, *owner)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def token_command(settings: Settings, args: argparse.Namespace) -> int:
    from costsvc.auth.tokens import (
        LastAdmin,
        create_token,
        digest,
        principal_of,
        revoke_token,
        tokens,
    )
    from costsvc.db.engine import make_engine

    if args.action in ("create", "revoke") and not args.name:
        raise UsageError(f"token {args.action} needs --name")
    if args.ensure and not (args.action == "create" and args.from_file):
        raise UsageError("--ensure is for token create --from-file")
    engine = make_engine(settings.database_url)
    try:
        if args.action == "create" and args.from_file:
            return token_from_file(engine, args)
        if args.action == "create":
            out = Path(args.output) if args.output else None
            owner = owner_of(args.owner)  # before anything is made
            if out is not None and out.is_file():
                held = out.read_text().strip()
                if held and principal_of(engine, digest(held)) is not None:
                    print(f"{PROG}: {out} holds a live token", file=sys.stderr)
                    return 0
            try:
                token = create_token(engine, args.name, args.role, args.team, "cli")
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            if out is None:
                print(token)  # shown once: only its hash is stored
            else:
                write_secret(out, token + "\n", owner)
        elif args.action == "revoke":
            try:
                revoked = revoke_token(engine, args.name, "cli")
            except LastAdmin as exc:
                raise UsageError(str(exc)) from None
            if not revoked:
                raise UsageError(f"no live token named {args.name!r}")
        else:
            for t in tokens(engine):
                state = "revoked" if t.revoked_at else "live"
                print(f"{t.name}\t{t.role}\t{t.team or '-'}\t{state}")
    finally:
        engine.dispose()
    return 0


TOKEN_CONFLICT = 4  # token create --ensure: the name holds another token


def token_from_file(engine: Engine, args: argparse.Namespace) -> int:
    """``token create --from-file``: the token of a file (an admin token from a Kubernetes
    Secret, deploy/helm), registered once; its hash only is stored. With ``--ensure``: exit 0
    when ``--name`` is that token already, 4 when it holds another (``--on-conflict warn``:
    a warning and 0, so that a pod's init container does not crash-loop)."""
    from costsvc.auth.tokens import TokenConflict, ensure_given, register_given

    if args.output or args.team:
        raise UsageError("--from-file takes neither --output nor --team")
    try:
        token = Path(args.from_file).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--from-file {args.from_file}: {exc}") from None
    try:
        if args.ensure:
            added = ensure_given(engine, args.name, args.role, token, "cli")
        else:
            added = register_given(engine, args.name, args.role, token, "cli")
    except ValueError as exc:
        raise UsageError(f"--from-file {args.from_file}: {exc}") from None
    except TokenConflict as exc:
        warn = args.on_conflict == "warn"
        print(
            f"{PROG}: {'warning' if warn else 'error'}: --from-file {args.from_file}: {exc}. "
            f"The file's token is not the one registered as {args.name!r} (was its Secret "
            "made anew, e.g. by `helm template` or a rotation?): put the registered token back "
            "in the file, or register the new one under another --name"
            + ("; the registered token stays in force" if warn else ""),
            file=sys.stderr,
        )
        return 0 if warn else TOKEN_CONFLICT
    state = "registered" if added else "is a live token already"
    print(f"{PROG}: the token of {args.from_file} {state} ({args.name})", file=sys.stderr)
    return 0
