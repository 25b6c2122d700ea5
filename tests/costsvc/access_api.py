"""The cost service the access tests ask (tests/costsvc/test_api_access.py,
tests/costsvc/test_pages_access.py): the ground truth's hours served, every role's and team's
token, and budgets."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import yaml

from tests.costsvc.apiserver import NOV20, Api, Clock, serve
from tests.costsvc.history import ELEVENTH, HOUR, HOUR3, MODEL, ingest_with
from tests.prom import Prometheus

TEAMS = ["a", "b", "nlp"]


@contextmanager
def access_api(prometheus: Prometheus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """Three hours of history.py's ground truth ingested into SQLite and served with a token
    per role and per team of :data:`TEAMS`, a budget for every team made by the admin."""
    work = tmp_path_factory.mktemp("access")
    url = f"sqlite:///{work / 'access.db'}"
    ingest_with(prometheus.url, url, MODEL, [HOUR, HOUR3, ELEVENTH])
    model = work / "cost-model.yaml"
    model.write_text(yaml.safe_dump(MODEL.document()))
    with serve(url, Clock(NOV20), TEAMS, cost_model=model) as running:
        running.http.headers.clear()
        # budgets for every team, made by the admin
        for team in TEAMS:
            r = running.http.post(
                "/v1/budgets", json={"team": team, "amount": "100"}, headers=running.auth("admin")
            )
            assert r.status_code == 201, r.text
        yield running
