"""The byte-identity dump of the cost service's answers (a refactor changes no
answer). It builds fixed, deterministic histories with the tests' own ground-truth helpers,
serves the app in-process (FastAPI's TestClient, the clock fixed as the tests fix it) and
writes one file per answer — status, the headers listed in :data:`HEADERS`, then the body
bytes — into ``OUT``. Two runs on the same code give identical trees; ``diff -r`` of a run
before a change and one after shows every answer the change moved.

    .venv/bin/python scripts/answers_dump.py --db sqlite OUT/sqlite
    .venv/bin/python scripts/answers_dump.py --db postgresql OUT/postgresql

Histories (each in its own database of the kind asked):

- ``ingested``: tests/costsvc/history.py's Prometheus history (a real prometheus loaded with
  promtool) and tests/costsvc/inference_history.py's, ingested through the ingest path, with
  the Kubernetes owners and labels of tests/costsvc/allocation_checks.py, three budgets,
  and a cost model kept in the database whose label keys add ``squad`` for the team (the
  ``/allocation`` label keys must come from the model in force).
- ``seeded``: tests/costsvc/pages_history.py (October closed, then an October hour repriced:
  corrections; a failed hour; budgets; a rightsizing recommendation and a quota row).

Masking (the only rules; everything else is compared byte for byte):

- times written by the wall clock while building (tokens' ``created_at``, ingest runs'
  ``started_at``/``finished_at``, cost-model versions' ``loaded_at``/``activated_at``,
  budgets' ``created_at``/``updated_at``, audit ``at``) are set to fixed instants in the
  database before serving (scripts/answers_histories.py ``fix_clock_columns``), so answers
  show those;
- a pages session's random id and CSRF token are replaced by ``<session>`` and ``<csrf>``
  wherever they appear (cookie header, page body).

Needs the prometheus and promtool binaries and, for ``--db postgresql``, the PostgreSQL
server binaries (as the tests do). Not run by ``make test``.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402

from costsvc.api.app import create_app  # noqa: E402
from costsvc.kit.settings import Settings  # noqa: E402
from scripts.answers_histories import (  # noqa: E402
    NOV20,
    build_ingested,
    build_seeded,
    databases,
    fix_clock_columns,
    harness_tokens,
    prometheus,
)
from tests.costsvc import history as hist  # noqa: E402
from tests.costsvc import inference_history as inf  # noqa: E402
from tests.costsvc import pages_history as pages  # noqa: E402

HEADERS = (
    "content-type",
    "content-disposition",
    "cache-control",
    "etag",
    "location",
    "www-authenticate",
    "x-content-type-options",
    "vary",
    "set-cookie",
)
BOGUS = "gfo_" + "x" * 40  # a bearer token nobody holds


# --- the questions -----------------------------------------------------------------------


@dataclass
class Ask:
    method: str
    path: str
    who: str | None = "finance"
    params: list[tuple[str, str]] = field(default_factory=list)
    body: Any = None  # JSON
    token: str | None = None  # a literal bearer token (bad tokens)


def q(path: str, who: str | None = "finance", **params: str | list[str]) -> Ask:
    pairs: list[tuple[str, str]] = []
    for k, v in params.items():
        for one in v if isinstance(v, list) else [v]:
            pairs.append((k.replace("__", "."), one))
    return Ask("GET", path, who, pairs)


def v1_questions(teams: list[str], month: str, windows: list[dict[str, str]]) -> list[Ask]:
    out: list[Ask] = []
    for w in windows:
        for group in ("team", "team,project,stage", "namespace,pod", "node,gpu_model,mig_profile"):
            out.append(q("/v1/costs", **w, group_by=group))
        out.append(q("/v1/costs", **w, step="hour"))
        out.append(q("/v1/costs", **w, step="day", group_by="team"))
        out.append(q("/v1/costs", teams[0], **w, group_by="team"))
        out.append(q("/v1/inference", **w, group_by="model"))
        out.append(q("/v1/inference.csv", **w, group_by="team,model"))
    for named in ("today", "yesterday", "week", "month", "lastmonth", "24h", "7d", "30d", "800d"):
        out.append(q("/v1/costs", window=named, group_by="team"))
        out.append(q("/v1/inference", window=named))
    base = windows[0]
    out += [
        q("/v1/costs", **base, team=teams[0]),
        q("/v1/costs", **base, team=[teams[0], teams[1]], group_by="team"),
        q("/v1/costs", **base, namespace="ml", group_by="pod"),
        q("/v1/costs", **base, cluster="c1", group_by="cluster"),
        q("/v1/costs", **base, group_by="workload,container"),
        q("/v1/costs", **base, step="month", group_by="team"),
        q("/v1/costs"),
        q("/v1/inference", **base, group_by="team,engine,role", step="hour"),
        q("/v1/inference", **base, model=inf.LLAMA),
        q("/v1/inference", teams[0], **base),
        q("/v1/reports/chargeback.csv", month=month),
        q("/v1/reports/chargeback.csv", month=month, group_by="team"),
        q("/v1/reports/chargeback.csv", teams[0], month=month),
        q("/v1/reports/focus.csv", month=month),
        q("/v1/reports/focus.csv", teams[0], month=month),
        q("/v1/months"),
        q(f"/v1/months/{month}"),
        q("/v1/months/2026-10"),
        q("/v1/budgets"),
        q("/v1/budgets", teams[0]),
        q("/v1/budgets/1"),
        q("/v1/budgets/1/status"),
        q("/v1/budgets/2/status"),
        q("/v1/budgets/3/status", teams[0]),
        q("/v1/tokens", "admin"),
        q("/v1/audit", "admin"),
        q("/v1/audit", "admin", limit="1"),
        q("/v1/cost-model", "admin"),
        q("/v1/cost-model"),
        q("/v1/ingest/failed-hours", "admin"),
        q("/v1/recommendations"),
        q("/v1/recommendations", all="true"),
        q("/v1/recommendations.csv"),
        q("/v1/recommendations", teams[0]),
        q("/v1/quotas"),
        q("/v1/quotas", teams[0]),
        q("/v1/quotas", resource="nvidia.com/gpu"),
        *(q(f"/v1/teams/{t}/summary") for t in teams),
        q(f"/v1/teams/{teams[0]}/summary", teams[0]),
        q("/healthz", None),
        q("/metrics", "metrics"),
        q("/metrics", "admin"),
        q("/metrics", teams[0]),
    ]
    # refusals: bad windows and parameters, no or bad token, another team, unknown ids
    out += [
        q("/v1/costs", window="fortnight"),
        q("/v1/costs", window="0d"),
        q("/v1/costs", window="801d"),
        q("/v1/costs", window="99999h"),
        q("/v1/costs", window="today", start="2026-11-01T00:00:00Z"),
        q("/v1/costs", end="2026-11-01T00:00:00Z"),
        q("/v1/costs", start="2026-11-01T00:30:00Z"),
        q("/v1/costs", start="2026-11-01T00:00:00"),
        q("/v1/costs", start="0999-11-01T00:00:00Z"),
        q("/v1/costs", start="2026-11-02T00:00:00Z", end="2026-11-01T00:00:00Z"),
        q("/v1/costs", start="2020-01-01T00:00:00Z", end="2026-11-01T00:00:00Z"),
        q("/v1/costs", start="not-a-time"),
        q("/v1/costs", group_by="colour"),
        q("/v1/costs", step="week"),
        q("/v1/costs", team=",".join(f"t{i}" for i in range(101))),
        q("/v1/costs", team="x" * 254),
        q("/v1/inference", window="fortnight"),
        q("/v1/inference", group_by="colour"),
        q("/v1/reports/chargeback.csv", month="2026-13"),
        q("/v1/reports/chargeback.csv"),
        q("/v1/reports/focus.csv", month="1969-12"),
        q("/v1/months/2026-1"),
        q("/v1/budgets/999"),
        q("/v1/budgets/x"),
        q("/v1/tokens", "finance"),
        q("/v1/tokens", teams[0]),
        q("/v1/audit", teams[0]),
        q("/v1/costs", None),
        q("/v1/costs", "metrics"),
        Ask("GET", "/v1/costs", None, token=BOGUS),
        Ask("GET", "/metrics", None, token=BOGUS),
        q("/metrics", None),
        q(f"/v1/teams/{teams[1]}/summary", teams[0]),
        q("/v1/costs", teams[0], team=teams[1]),
        q("/v1/recommendations", teams[0], team=teams[1]),
        q("/v1/nothing-here"),
        Ask("POST", f"/v1/months/{month}/close", "finance"),
        Ask("POST", "/v1/months/2026-13/close", "finance"),
        Ask("POST", f"/v1/months/{month}/close", teams[0]),
        Ask("POST", "/v1/budgets", "finance", body={"team": ""}),
        Ask("PUT", "/v1/cost-model", "admin", body={"versions": []}),
        Ask("DELETE", "/v1/tokens/nobody", "admin"),
    ]
    return out


def allocation_questions(teams: list[str], windows: list[str]) -> list[Ask]:
    out: list[Ask] = []
    for w in windows:
        for agg in ("namespace", "team", "pod", "node", "cluster", "label:app", "controller"):
            out.append(q("/allocation", window=w, aggregate=agg))
        out.append(q("/allocation", window=w, aggregate="namespace", step="1h"))
        out.append(q("/allocation", window=w, aggregate="namespace", accumulate="true"))
        out.append(q("/allocation/compute", window=w, aggregate="team", includeIdle="true"))
        out.append(q("/inferenceCost/total", window=w))
    w = windows[0]
    out += [
        q("/allocation", window=w, aggregate="namespace", step="day", accumulate="false"),
        q("/allocation", window=w, aggregate="namespace", accumulateBy="day"),
        q("/allocation", window=w, aggregate="namespace", accumulateBy="week", step="1h"),
        q("/allocation", window=w, aggregate="team,project", includeIdle="true", shareIdle="true"),
        q("/allocation", window=w, aggregate="node", includeIdle="true", idleByNode="true"),
        q(
            "/allocation",
            window=w,
            aggregate="namespace",
            includeIdle="true",
            includeProportionalAssetResourceCosts="true",
        ),
        q("/allocation", window=w, aggregate=["namespace", "label:app"]),
        q("/allocation", window=w, aggregate="label:team"),
        q("/allocation", window=w, aggregate="label:squad"),
        q("/allocation", window=w, aggregate="namespace", filter='label[squad]:"nlp"'),
        q("/allocation", window=w, aggregate="namespace", filter='namespace:"ml"'),
        q("/allocation", window=w, aggregate="pod", filter='namespace!:"ml"+cluster:"c1"'),
        q("/allocation", window=w, aggregate="pod", filter='label[app]:"search"'),
        q("/allocation", window=w, aggregate="controllerKind"),
        q("/allocation", window=w),
        q("/allocation", teams[0], window=w, aggregate="namespace"),
        q("/allocation", teams[0], window=w, aggregate="namespace", filter='namespace:"ml"'),
        q("/inferenceCost/total", window=w, aggregate="model", costBasis="usage"),
        q("/inferenceCost/total", window=w, aggregate="namespace", accumulate="true"),
        q("/inferenceCost/total", teams[0], window=w),
        # OpenCost's window forms
        *(
            q("/allocation", window=form, aggregate="namespace")
            for form in (
                "today",
                "yesterday",
                "week",
                "lastweek",
                "month",
                "lastmonth",
                "24h",
                "2d",
                "1w",
                "90m",
                "3h offset 1h",
                "1763510400,1763596800",
                "2026-11-10T00:00:00Z,2026-11-16T00:00:00Z",
            )
        ),
        # refusals
        q("/allocation", window="", aggregate="namespace"),
        q("/allocation", window="fortnight", aggregate="namespace"),
        q("/allocation", window="801d", aggregate="namespace"),
        q("/allocation", window="1000000000000,1000000000001"),
        q("/allocation", window="2026-11-16T00:00:00Z,2026-11-10T00:00:00Z"),
        q("/allocation", window=w, aggregate="colour"),
        q("/allocation", window=w, step="30m"),
        q("/allocation", window=w, step="nonsense"),
        q("/allocation", window=w, step="900d"),
        q("/allocation", window=w, accumulate="sometimes"),
        q("/allocation", window=w, includeProportionalAssetResourceCosts="true"),
        q("/allocation", window=w, filter='namespace:"ml'),
        q("/allocation", window="x" * 3000),
        q("/allocation", None, window=w),
        q("/allocation", "metrics", window=w),
        q("/inferenceCost/total", window="fortnight"),
        q("/inferenceCost/total", window=w, costBasis="nonsense"),
    ]
    return out


PAGES = [
    "/",
    "/ui/",
    "/ui/signin",
    "/ui/overview",
    "/ui/fleet",
    "/ui/finance",
    "/ui/finance/close",
    "/ui/reports/chargeback.csv?month=2026-10",
    "/ui/reports/chargeback.csv?month=2026-11",
    "/ui/reports/focus.csv?month=2026-10",
]


# --- asking and writing ------------------------------------------------------------------


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", text)[:120]


class Dumper:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.count = 0

    def write(
        self, name: str, status: int, headers: Any, body: bytes, masks: dict[str, str]
    ) -> None:
        self.count += 1
        lines = [str(status)]
        for h in HEADERS:
            for value in headers.get_list(h) if hasattr(headers, "get_list") else []:
                lines.append(f"{h}: {value}")
        blob = ("\n".join(lines) + "\n\n").encode() + body
        for secret, mask in masks.items():
            blob = blob.replace(secret.encode(), mask.encode())
        (self.out / f"{self.count:04d}-{_slug(name)}").write_bytes(blob)


def ask_all(
    dumper: Dumper, label: str, client: TestClient, tokens: dict[str, str], asks: list[Ask]
) -> None:
    for a in asks:
        headers = {}
        bearer = a.token or (tokens[a.who] if a.who else None)
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        url = a.path + ("?" + urlencode(a.params) if a.params else "")
        r = client.request(a.method, url, headers=headers, json=a.body)
        who = a.who or ("badtoken" if a.token else "anon")
        dumper.write(f"{label}-{a.method}-{who}-{url}", r.status_code, r.headers, r.content, {})


def ask_pages(
    dumper: Dumper, label: str, client: TestClient, tokens: dict[str, str], teams: list[str]
) -> None:
    origin = {"Origin": str(client.base_url)}
    for who in ("finance", teams[0]):
        client.cookies.clear()
        r = client.post(
            "/ui/signin", data={"token": tokens[who]}, headers=origin, follow_redirects=False
        )
        sid = r.cookies.get("gfo_session") or ""
        masks = {sid: "<session>"} if sid else {}
        dumper.write(f"{label}-pages-{who}-signin", r.status_code, r.headers, r.content, masks)
        for path in [*PAGES, *(f"/ui/teams/{t}" for t in teams)]:
            r = client.get(path, follow_redirects=False)
            body = r.content
            found = re.search(rb'name="csrf" value="([^"]+)"', body)
            if found:
                masks[found[1].decode()] = "<csrf>"
            dumper.write(f"{label}-pages-{who}-{path}", r.status_code, r.headers, body, masks)
    client.cookies.clear()
    r = client.get("/ui/overview", follow_redirects=False)
    dumper.write(f"{label}-pages-anon-overview", r.status_code, r.headers, r.content, {})
    r = client.post("/ui/signin", data={"token": "nope"}, headers=origin)
    dumper.write(f"{label}-pages-badtoken-signin", r.status_code, r.headers, r.content, {})
    r = client.post("/ui/signin", data={"token": tokens["finance"]})
    dumper.write(f"{label}-pages-noorigin-signin", r.status_code, r.headers, r.content, {})


def serve_and_ask(
    dumper: Dumper, label: str, url: str, now: datetime, teams: list[str], asks: list[Ask]
) -> None:
    tokens = harness_tokens(url, teams)
    fix_clock_columns(url)
    app = create_app(Settings(database_url=url), clock=lambda: now)
    with TestClient(app) as client:
        ask_all(dumper, label, client, tokens, asks)
        ask_pages(dumper, label, client, tokens, teams)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], required=True)
    parser.add_argument("out", type=Path, help="an empty or new directory")
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise SystemExit(f"{out} is not empty")
    dumper = Dumper(out)
    with tempfile.TemporaryDirectory(prefix="answers-") as tmp:
        work = Path(tmp)
        with (
            prometheus(work / "prom", hist.history(), hist.T0) as prom,
            prometheus(work / "inf", inf.history(), inf.T1) as inf_prom,
            databases(args.db, work, ["ingested", "seeded"]) as urls,
        ):
            build_ingested(urls["ingested"], prom.url, inf_prom.url)
            build_seeded(urls["seeded"])
            iw = [
                {"start": "2026-11-01T00:00:00Z", "end": "2026-12-01T00:00:00Z"},
                {"start": "2026-11-10T05:00:00Z", "end": "2026-11-10T08:00:00Z"},
                {"start": "2026-11-20T14:00:00Z", "end": "2026-11-20T16:00:00Z"},
            ]
            ingested_teams = ["nlp", "a", "chat", "search"]
            asks = v1_questions(ingested_teams, "2026-11", iw)
            asks += allocation_questions(
                ingested_teams,
                [
                    "2026-11-10T00:00:00Z,2026-11-16T00:00:00Z",
                    "2026-11-10T05:00:00Z,2026-11-10T08:00:00Z",
                    "2026-11-20T00:00:00Z,2026-11-21T00:00:00Z",
                    "30d",
                ],
            )
            serve_and_ask(dumper, "ingested", urls["ingested"], NOV20, ingested_teams, asks)
            sw = [
                {"start": "2026-10-01T00:00:00Z", "end": "2026-12-04T00:00:00Z"},
                {"start": "2026-12-01T00:00:00Z", "end": "2026-12-04T00:00:00Z"},
            ]
            seeded_asks = v1_questions(pages.TEAMS, "2026-10", sw)
            seeded_asks += allocation_questions(
                pages.TEAMS, ["2026-10-31T22:00:00Z,2026-12-04T00:00:00Z", "7d"]
            )
            serve_and_ask(dumper, "seeded", urls["seeded"], pages.NOW, pages.TEAMS, seeded_asks)
    print(f"{dumper.count} answers written to {out} ({args.db})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
