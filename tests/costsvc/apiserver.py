"""The cost-service API served by a real uvicorn on loopback, in a thread, for tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from sqlalchemy import create_engine

from costsvc.api.app import create_app
from costsvc.api.server import config as server_config
from costsvc.auth.tokens import create_token
from costsvc.kit.settings import Settings
from tests.prom import free_port


class Clock:
    """What the API takes as now; tests set it."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class Api:
    def __init__(
        self, base: str, db_url: str, clock: Clock, tokens: dict[str, str], app: Any = None
    ) -> None:
        self.base, self.db_url, self.clock, self.tokens = base, db_url, clock, tokens
        self.app = app  # the FastAPI app served
        self.http = httpx.Client(base_url=base, timeout=30)

    def get(self, path: str, who: str | None = "finance", **params: Any) -> httpx.Response:
        return self.http.get(path, params=params, headers=self.auth(who))

    def auth(self, who: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}


@contextmanager
def serve(
    db_url: str,
    clock: Clock,
    teams: list[str] = (),  # type: ignore[assignment]
    cost_model: Path | None = None,
    prefix: str = "",
    **settings_: Any,
) -> Iterator[Api]:
    """Tokens: ``admin``, ``finance``, ``metrics`` and ``team:<name>`` for each of ``teams``;
    their names start with ``prefix`` (a second server on the same database);
    ``settings_``: more ``Settings`` fields."""
    engine = create_engine(db_url)
    tokens = {
        "admin": create_token(engine, f"{prefix}admin", "admin", None, "test"),
        "finance": create_token(engine, f"{prefix}finance", "finance", None, "test"),
        "metrics": create_token(engine, f"{prefix}prometheus", "metrics", None, "test"),
    }
    for team in teams:
        tokens[f"team:{team}"] = create_token(engine, f"{prefix}team-{team}", "team", team, "test")
    engine.dispose()
    settings = Settings(database_url=db_url, cost_model=cost_model, **settings_)
    port = free_port()
    app = create_app(settings, clock=clock)
    config = server_config(app, settings, "127.0.0.1", port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:  # a condition, not a guess: uvicorn sets it once listening
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    api = Api(f"http://127.0.0.1:{port}", db_url, clock, tokens, app)
    try:
        yield api
    finally:
        api.http.close()
        server.should_exit = True
        thread.join(10)


NOV20 = datetime(2026, 11, 20, 12, tzinfo=UTC)
