"""Run a program under test as a real process and wait for what it prints (no fixed sleeps)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What uvicorn prints once its socket is bound (uvicorn/server.py logs "Application startup
# complete" after the lifespan startup but BEFORE it binds, so a client that starts on that line
# can be refused under load).
LISTENING = r"Uvicorn running on"


class Process:
    def __init__(
        self, args: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT
    ) -> None:
        full_env = {**os.environ, **(env or {})}
        self.proc = subprocess.Popen(
            args,
            cwd=cwd,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
        )
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            seen = 0
            while True:
                for line in self.lines[seen:]:
                    if m := regex.search(line):
                        return m
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(
                        f"no line matching {pattern!r}; output so far:\n" + "\n".join(self.lines)
                    )
                self._cond.wait(min(left, 0.5))

    def output(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def exporter_args(*args: str) -> list[str]:
    return [sys.executable, "-m", "exporter.cli", *args]


def start_exporter(*args: str, env: dict[str, str] | None = None) -> tuple[Process, int]:
    """Start gpu-exporter on a free loopback port; returns the process and its port."""
    proc = Process(exporter_args("--web.listen-address", "127.0.0.1:0", *args), env=env)
    try:
        port = int(proc.wait_for(r"serving metrics on \S+ \(port (\d+)\)").group(1))
    except BaseException:
        proc.stop()
        raise
    return proc, port
