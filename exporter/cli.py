"""``gpu-exporter``: parse the flags, build the exporter, serve /metrics until a signal.

A bad flag, value, spec file or web configuration file exits 2 with one line that names it
(:mod:`exporter.flags`, :mod:`exporter.webconfig`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from types import FrameType

from exporter.build import build
from exporter.flags import LOG_LEVELS, PROG, Settings, UsageError, parse_settings
from exporter.http import MetricsServer
from exporter.webconfig import WebConfigError, WebGate


def main(argv: list[str] | None = None) -> int:
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv, dict(os.environ))
        return run(settings)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2


def run(settings: Settings) -> int:
    logging.basicConfig(
        level=LOG_LEVELS[settings.log_level],
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    log = logging.getLogger(PROG)
    gate = None
    if settings.web_config_file is not None:
        try:
            gate = WebGate.open(settings.web_config_file)
        except WebConfigError as exc:
            raise UsageError(f"--web.config.file {settings.web_config_file}: {exc}") from None
    built = build(settings)
    exporter = built.exporter
    try:
        server = MetricsServer(settings.listen_address, exporter, gate)
    except OSError as exc:
        print(
            f"{PROG}: cannot listen on {settings.listen_address}: {exc.strerror}", file=sys.stderr
        )
        return 1

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    collector = threading.Thread(target=exporter.run, args=(stop,), name="collect", daemon=True)
    collector.start()
    # Open the port once the first collection is published (or after 5 s at most), so the
    # first scrape already has the GPUs; scrapes never wait on collections after that.
    exporter.first_collection.wait(timeout=min(5.0, max(settings.collect_interval, 1.0)))
    server.start()
    simulating = f", simulating {settings.simulate}" if settings.simulate else ""
    log.info(
        "serving metrics on %s (port %d), collecting every %gs%s",
        server.url,
        server.port,
        settings.collect_interval,
        simulating,
    )
    while not stop.wait(0.5):
        pass
    server.stop()
    collector.join(timeout=1.5)
    built.stop()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
