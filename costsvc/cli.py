"""``gpu-costsvc``: the cost service's command line.

Settings come from ``COSTSVC_*`` environment variables (see costsvc/settings.py). Implemented so
far: ``db upgrade`` / ``db downgrade``. ``ingest``, ``serve``, ``report`` and ``close`` come
with the ingestion and API work and say so instead of pretending.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from pydantic import ValidationError

from costsvc import __version__

PROG = "gpu-costsvc"


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="GPU chargeback: hourly cost per team from Prometheus.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    db = sub.add_parser("db", help="database schema (Alembic)")
    db.add_argument("action", choices=["upgrade", "downgrade"])
    db.add_argument("revision", nargs="?", default=None, help="default: head / base")
    for name in ("ingest", "serve", "report", "close"):
        sub.add_parser(name, help="not implemented yet")
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
        from costsvc.settings import Settings

        try:
            settings = Settings()
        except ValidationError as exc:
            err = exc.errors()[0]
            field = "COSTSVC_" + str(err["loc"][0]).upper()
            raise UsageError(f"{field}: {err['msg']}") from None
        if args.command == "db":
            from costsvc.db.migrate import downgrade, upgrade

            if args.action == "upgrade":
                upgrade(settings.database_url, args.revision or "head")
            else:
                downgrade(settings.database_url, args.revision or "base")
            return 0
        print(f"{PROG}: error: '{args.command}' is not implemented yet", file=sys.stderr)
        return 1
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
