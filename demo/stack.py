"""The demo's running parts: processes and servers stopped in reverse order, free ports, and
waiting for an HTTP endpoint to answer."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx


class Stack:
    """Processes and servers to stop on the way out, last started first."""

    def __init__(self) -> None:
        self.stops: list[Callable[[], None]] = []

    def process(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

        def stop() -> None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()

        self.stops.append(stop)
        return proc

    def close(self) -> None:
        for stop in reversed(self.stops):
            stop()


def pick_port(preferred: int) -> int:
    """``preferred`` if it is free on 127.0.0.1, else any free port."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, seconds: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {seconds:g} s")
