"""``make demo``: the exporter on a simulated 8 x H100 node, no GPU or server needed.

(The cost service joins the demo once it exists; see the README.)
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from exporter import cli

ROOT = Path(__file__).resolve().parents[1]


def _port(preferred: int = 9400) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    spec = ROOT / "examples" / "fleet-h100x8.yaml"
    port = _port()
    print(
        f"gpu-exporter demo: simulating {spec.relative_to(ROOT)} (8 x H100 80GB HBM3)\n"
        f"  metrics:  http://127.0.0.1:{port}/metrics\n"
        f"  try:      curl -s http://127.0.0.1:{port}/metrics | grep DCGM_FI_DEV_GPU_TEMP\n"
        "  stop:     Ctrl-C\n",
        flush=True,
    )
    return cli.main(
        ["--simulate", str(spec), "--web.listen-address", f"127.0.0.1:{port}", *sys.argv[1:]]
    )


if __name__ == "__main__":
    raise SystemExit(main())
