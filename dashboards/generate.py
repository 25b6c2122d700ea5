#!/usr/bin/env python3
"""Generate the Grafana dashboards in this folder with grafana-foundation-sdk.

    python dashboards/generate.py                 # write the five dashboards
    python dashboards/generate.py --check         # exit 1 when a committed file differs

The dashboards are built in fleet.py, mig.py, workloads.py, finops.py and rightsizing.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if __name__ == "__main__":  # run as a script: import `dashboards` from the repository root
    sys.path[0] = str(HERE.parent)

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from dashboards.finops import finops
from dashboards.fleet import fleet
from dashboards.mig import mig
from dashboards.rightsizing import rightsizing
from dashboards.workloads import workloads


def build() -> dict[str, Dashboard]:
    """File name -> dashboard."""
    return {
        "gpu-fleet.json": fleet(),
        "gpu-mig.json": mig(),
        "gpu-workloads.json": workloads(),
        "gpu-finops.json": finops(),
        "gpu-rightsizing.json": rightsizing(),
    }


def render(dashboard: Dashboard) -> str:
    """The dashboard's JSON, keys sorted as Grafana exports them."""
    text = json.dumps(dashboard, cls=JSONEncoder, indent=2, sort_keys=True, ensure_ascii=False)
    return text + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare, write nothing")
    ap.add_argument("--out", type=Path, default=HERE, help="output folder")
    args = ap.parse_args(argv)
    stale = []
    for name, dashboard in build().items():
        path = args.out / name
        text = render(dashboard)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print("out of date: " + ", ".join(stale) + " (run python dashboards/generate.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
