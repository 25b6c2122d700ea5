"""A real Prometheus server on loopback for tests."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.conftest import require_binary
from tests.procs import Process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus:
    def __init__(
        self,
        binary: str,
        workdir: Path,
        targets: list[str],
        scrape_interval: str = "1s",
        extra_args: tuple[str, ...] | list[str] = (),
        config_text: str | None = None,
    ) -> None:
        """``config_text``: a whole configuration instead of one job scraping ``targets``."""
        self.port = free_port()
        config = workdir / "prometheus.yml"
        if config_text is None:
            config_text = (
                "global:\n"
                f"  scrape_interval: {scrape_interval}\n"
                f"  scrape_timeout: {scrape_interval}\n"
                "scrape_configs:\n"
                "  - job_name: gpu\n"
                "    static_configs:\n"
                f"      - targets: {json.dumps(targets)}\n"
            )
        config.write_text(config_text)
        self.process = Process(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
                *extra_args,
            ]
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 30.0) -> None:
        self.until(lambda: self._get("/-/ready", raw=True) is not None, timeout, "ready")

    def until(self, check: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            result = check()
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"prometheus: {what} not reached in {timeout}s\n" + self.process.output()
                )
            if self.process.proc.poll() is not None:
                raise AssertionError("prometheus exited:\n" + self.process.output())
            time.sleep(0.2)  # polling interval while waiting for a condition

    def _get(self, path: str, raw: bool = False, **params: str) -> Any:
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                body = resp.read()
        except (urllib.error.URLError, ConnectionError):
            return None
        return body if raw else json.loads(body)

    def get(self, path: str, **params: str) -> Any:
        """The JSON answer of an API path (e.g. ``/api/v1/metadata``); asserts success."""
        answer = self._get(path, **params)
        assert answer is not None and answer["status"] == "success", (path, answer)
        return answer

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = self._get("/api/v1/query", query=expr)
        assert answer is not None and answer["status"] == "success", (expr, answer)
        return list(answer["data"]["result"])

    def label_values(self, label: str) -> list[str]:
        answer = self._get(f"/api/v1/label/{label}/values")
        assert answer is not None and answer["status"] == "success"
        return list(answer["data"])

    def stop(self) -> None:
        self.process.stop()


def promtool_test(tmp_path: Path, tests: dict[str, Any]) -> None:
    """Run one promtool unit test (``input_series``, ``promql_expr_test``…, no rule files)
    with the real ``promtool test rules``; fails with promtool's own words."""
    path = tmp_path / "promql.test.yml"
    path.write_text(json.dumps({"rule_files": [], "tests": [tests]}, indent=1))
    proc = subprocess.run(
        [require_binary("promtool"), "test", "rules", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
