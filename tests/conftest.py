"""Shared test helpers. Real components are found here; in CI a missing one fails the run."""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import settings

# CI runs the same examples every time; locally each run explores new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI", "").lower() == "true":
    settings.load_profile("ci")


def require_binary(name: str) -> str:
    """Path of a system program the tests need. Under CI=true a missing one is a failure."""
    path = shutil.which(name)
    if path:
        return path
    why = f"{name} not found on PATH (`make test` installs it: scripts/ensure-system-deps.sh)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(why)
    pytest.skip(why)


class ManualClock:
    """A clock the test moves by hand: ``now()`` is wall time in seconds."""

    def __init__(self, start: float = 1_790_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
