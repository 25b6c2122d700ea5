"""Exporters built by a test are closed after it: their reader threads and XID listener stop."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.exporter import helpers


@pytest.fixture(autouse=True)
def _close_rigs() -> Iterator[None]:
    yield
    helpers.close_all()
