"""``gpu-costsvc`` command line (a skeleton until the cost-engine issue lands)."""

from __future__ import annotations

import argparse
import sys

from costsvc import __version__

COMMANDS = ("serve", "ingest", "db", "report", "close")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-costsvc", description="GPU chargeback service.")
    parser.add_argument("--version", action="version", version=f"gpu-costsvc {__version__}")
    parser.add_argument("command", choices=COMMANDS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    print(f"gpu-costsvc: '{args.command}' is not implemented yet", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
