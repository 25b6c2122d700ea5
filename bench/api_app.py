"""The API as bench/costsvc_api.py's uvicorn worker processes build it: the benchmark's
database and its fixed clock (the data is a fixed month), from the environment."""

from __future__ import annotations

import os
from datetime import datetime

from fastapi import FastAPI

from costsvc.api.app import create_app
from costsvc.kit.settings import Settings


def app() -> FastAPI:
    now = datetime.fromisoformat(os.environ["BENCH_NOW"])
    return create_app(Settings(database_url=os.environ["BENCH_DATABASE_URL"]), clock=lambda: now)
