"""The demo's running parts: processes and servers stopped in reverse order, the ports they
listen on, waiting for an HTTP endpoint to answer, and the demo's own ``/metrics`` servers."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s; nothing when it has ended."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _run_logged(main: Callable[[list[str]], int], argv: list[str], log: Path) -> None:
    with log.open("ab") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    sys.exit(main(argv))


class Stack:
    """Processes and servers to stop on the way out, last started first."""

    def __init__(self) -> None:
        self.stops: list[Callable[[], None]] = []

    def process(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        self.stops.append(lambda: stop_process(proc))
        return proc

    def fork(self, main: Callable[[list[str]], int], argv: list[str], log: Path) -> None:
        """``main(argv)`` in a forked child (a program's entry point, without a new
        interpreter importing it all again), its output to ``log``."""
        child = multiprocessing.get_context("fork").Process(
            target=_run_logged, args=(main, argv, log), daemon=True
        )
        child.start()

        def stop() -> None:
            child.terminate()  # SIGTERM, as stop_process
            child.join(10)
            if child.is_alive():
                child.kill()
                child.join()

        self.stops.append(stop)

    def close(self) -> None:
        for stop in reversed(self.stops):
            stop()


class MetricsServer:
    """An HTTP server on 127.0.0.1:``port``, in a thread of its own: a GET of a path (its
    query left out) answers ``answer(path)`` as Prometheus' text format, or 404 where that
    is None."""

    def __init__(self, port: int, answer: Callable[[str], str | None]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                text = answer(self.path.split("?")[0])
                if text is None:
                    self.send_error(404)
                    return
                body = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Prometheus:
    """``prometheus`` on 127.0.0.1:``port`` with ``config`` over ``data``; stopped and started
    again to load blocks written meanwhile (it looks for new blocks only once a minute)."""

    def __init__(self, stack: Stack, config: Path, data: Path, port: int, log: Path) -> None:
        self.stack, self.log, self.url = stack, log, f"http://127.0.0.1:{port}"
        self.argv = [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=10y",
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = self.stack.process(self.argv, self.log)

    def ready(self, seconds: float = 60) -> None:
        assert self.proc is not None
        wait_http(f"{self.url}/-/ready", seconds, self.proc)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)


class PortBusy(RuntimeError):
    """A port the demo needs is held by something else (the message names it)."""


def port_free(port: int) -> bool:
    """Whether a server can listen on 127.0.0.1:``port`` now. SO_REUSEADDR, as the servers
    set it: a port left in TIME_WAIT by a demo just stopped is free."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def claim_port(
    port: int, what: str, wait: float, say: Callable[[str], None], flag: str = ""
) -> int:
    """``port``, once it is free: when it is busy, say so and wait up to ``wait`` seconds for
    it; still busy, raise PortBusy naming it. Never another port in silence."""
    if port_free(port):
        return port
    hint = f", or choose another with {flag}" if flag else ""
    if wait <= 0:
        raise PortBusy(f"port {port} ({what}) was taken while the demo started{hint}")
    say(f"  port {port} ({what}) is busy: waiting up to {wait:g} s for it to be free ...")
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        time.sleep(0.5)  # polling interval while waiting for the port
        if port_free(port):
            say(f"  port {port} ({what}) is free")
            return port
    raise PortBusy(
        f"port {port} ({what}) is still busy after {wait:g} s: stop what listens on it{hint}"
    )


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
