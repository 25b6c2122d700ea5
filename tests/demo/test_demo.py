"""``make demo`` end to end (issue #23, Build 5), on the one demo of tests/demo/conftest.py:
started with ``make demo ARGS=...`` on other ports, it waits for a busy port, prints a cost
table that reconciles and that the API confirms, budgets (one exceeded, one near its limit),
GPU quotas of real teams (namespace labels), incidents of the last three hours that its
Prometheus has (an XID, throttled clocks, a GPU lost), links that all answer, with no gap
where the recorded history hands over to the live exporters; the README shows this output;
Ctrl-C stops it cleanly. A port that stays busy is named and the demo exits."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from demo.cluster import NAMESPACES, QUOTAS
from demo.history import NODES
from tests.conftest import require_binary
from tests.demo.conftest import READY_WITHIN, ROOT, STEP, Demo, env, free_ports, hold

# the demo is started by the first test of the package (tests/demo/conftest.py) and stopped
# after the last: within their time-outs
pytestmark = pytest.mark.timeout(READY_WITHIN + 120)
MONEY = r"(-?\d+\.\d{6})"
ROW = re.compile(
    rf"^  (\S+)\s+{MONEY}\s+{MONEY}\s+{MONEY}\s+{MONEY}\s+{MONEY}\s+(\d+\.\d\d)\s+(\S+)$"
)
HOURS = re.compile(
    r"GPU cost per team, (\d{4}-\d\d-\d\d \d\d):00 to (\d\d):00 UTC \((\d+) complete"
)
MAX_GAP = 2 * STEP  # the cost service's gap rule: more than two scrape intervals is a gap


def _rows(demo: Demo) -> dict[str, list[Decimal]]:
    return {m[1]: [Decimal(m[i]) for i in range(2, 7)] for m in map(ROW.match, demo.lines) if m}


def _window(demo: Demo) -> tuple[datetime, datetime, int]:
    m = HOURS.search(demo.out)
    assert m, demo.out
    first = datetime.fromisoformat(f"{m[1]}:00+00:00")
    end = first.replace(hour=int(m[2]))
    if end <= first:
        end += timedelta(days=1)
    return first, end, int(m[3])


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_make_demo_passes_its_args_and_waits_for_a_busy_port(demo: Demo) -> None:
    assert f"port {demo.api_port} (the cost-service API) is busy: waiting" in demo.out
    assert f"port {demo.api_port} (the cost-service API) is free" in demo.out
    assert demo.printed("cost API") == f"{demo.api}/docs"
    assert demo.printed("Prometheus").startswith(f"{demo.prometheus}/")
    assert demo.printed("kube-state-metrics") == f"http://127.0.0.1:{demo.labels_port}/metrics"
    [line] = [x for x in demo.lines if x.startswith("  exporters:")]
    assert [int(p) for p in re.findall(r":(\d+)/metrics", line)] == [
        demo.exporter_port + i for i in range(len(NODES))
    ]


def _look_at(demo: Demo) -> str:
    return demo.out[demo.out.index("Look at:") :]


def test_every_printed_link_answers(demo: Demo) -> None:
    """Each URL the demo prints, fetched (the curl examples with the printed token): the
    Prometheus UI links are the ones the installed Prometheus serves."""
    version = subprocess.run(
        ["prometheus", "--version"], capture_output=True, text=True, check=True
    ).stdout
    urls = re.findall(r"(http://[^\s'()]+)", _look_at(demo))
    pages = f"{demo.api}/"
    assert pages in urls  # fetched by test_the_pages_answer
    checked = 0
    with httpx.Client(timeout=60) as signed_in:  # the pages: a session of the printed token
        r = signed_in.post(
            f"{demo.api}/ui/signin", data={"token": demo.token}, headers={"Origin": demo.api}
        )
        assert r.status_code == 303, r.text
        for url in urls:
            if url == pages:
                continue
            auth = {"Authorization": f"Bearer {demo.token}"} if "/v1/" in url else {}
            client = signed_in if url.startswith(f"{demo.api}/ui/") else httpx
            answer = client.get(url, headers=auth, timeout=60)
            assert answer.status_code == 200, (url, answer.status_code, version)
            checked += 1
    assert checked == len(urls) - 1 >= 10
    graph, alerts = demo.printed("Prometheus"), re.search(r"alerts: (\S+)\)", demo.out)
    assert alerts and "Prometheus" in httpx.get(graph, timeout=30).text
    assert "Alerts" in httpx.get(alerts[1], timeout=30).text


def test_the_pages_answer(demo: Demo) -> None:
    assert demo.printed("pages") == f"{demo.api}/"
    answer = httpx.get(f"{demo.api}/", timeout=30, follow_redirects=True)
    assert answer.status_code == 200 and "text/html" in answer.headers["content-type"]


def test_the_cost_table_reconciles_and_is_the_apis(demo: Demo) -> None:
    table = _rows(demo)
    for team, (cost, used, waste, unmeasured, idle) in table.items():
        assert cost == used + waste + unmeasured + idle, team
    assert any(v[3] for v in table.values())  # an unmeasured column that is not all zero
    assert {"__idle__", "__unallocated__"} <= set(table)  # an unlabelled pod
    # the DRA node's teams (one claim shared by chat and docs-ai) and the HAMi node's
    assert {"nlp", "recsys", "chat", "docs-ai", "research", "vision", "search"} <= set(table)
    first, end, n = _window(demo)
    assert n == (end - first).total_seconds() // 3600 >= 1
    answer = demo.get("/v1/costs", start=_iso(first), end=_iso(end), group_by="team")
    keys = ("total_cost", "used_cost", "allocated_idle_cost", "unmeasured_cost", "idle_cost")
    api = {r["group"]["team"]: [Decimal(r[k]) for k in keys] for r in answer["rows"]}
    assert api == table
    total = re.search(rf"total \(USD\)\s+{MONEY}", demo.out)
    assert total and Decimal(total[1]) == sum(v[0] for v in table.values())


def test_every_complete_hour_is_ingested(demo: Demo) -> None:
    first, end, n = _window(demo)
    hour = demo.started.replace(minute=0, second=0, microsecond=0)
    assert end in (hour, hour + timedelta(hours=1))  # the hour the demo started in, or the next
    rows = demo.get("/v1/costs", start=_iso(first), end=_iso(end), step="hour")["rows"]
    assert len({r["start"] for r in rows}) == n


def test_budgets_one_exceeded_one_near_its_limit(demo: Demo) -> None:
    budgets = demo.get("/v1/budgets")
    spent = demo.get("/v1/costs", window="month", group_by="team")["rows"]
    if not spent:  # the first hour of a month: nothing to measure a budget against
        assert budgets == [] and "none yet" in demo.out
        return
    states = [demo.get(f"/v1/budgets/{b['id']}/status") for b in budgets]
    used = sorted(Decimal(s["used_ratio"]) for s in states)
    assert len(used) == 2 and Decimal("0.8") <= used[0] < 1 <= used[1], states
    near = next(s for s in states if Decimal(s["used_ratio"]) < 1)
    assert near["crossed"] == [0.8]
    for s in states:
        state = "exceeded" if Decimal(s["used_ratio"]) >= 1 else "near its limit"
        line = next(x for x in demo.lines if x.startswith(f"  {s['team']} ") and " of " in x)
        assert f"{s['month_to_date']:>11} of {s['amount']:>9} USD" in line and state in line
    energy = [s["energy"] for s in states if s["energy"]]
    assert energy and Decimal(energy[0]["used_ratio"]) > 0  # the energy budget panel's


def test_quotas_belong_to_the_namespaces_teams(demo: Demo) -> None:
    rows = [q for q in demo.get("/v1/quotas")["rows"] if q["hard"] is not None]
    want = {
        (ns, r.removeprefix("requests."), Decimal(v))
        for ns, _, hard in QUOTAS
        for r, v in hard.items()
    }
    assert {(q["namespace"], q["resource"], Decimal(q["hard"])) for q in rows} == want
    for q in rows:
        assert q["team"] == NAMESPACES[q["namespace"]].get("team", "__unallocated__"), q
        assert q["source"] == "kube-state-metrics"
    assert {q["team"] for q in rows} - {"__unallocated__"}
    # and so in the cost service's series, as Prometheus scrapes them
    series = demo.await_query('costsvc_quota_hard_units{team!="__unallocated__"}', 90)
    assert {s["metric"]["team"] for s in series} == {q["team"] for q in rows} - {"__unallocated__"}


def _incident_times(demo: Demo) -> list[tuple[datetime, str]]:
    start = demo.out.index("Incidents")
    found = []
    for hms, what in re.findall(r"^  (\d\d:\d\d:\d\d)  (.+)$", demo.out[start:], re.M):
        t = datetime.combine(demo.started.date(), datetime.strptime(hms, "%H:%M:%S").time())
        t = t.replace(tzinfo=demo.started.tzinfo)
        if t > demo.started + timedelta(hours=1):  # before midnight, the demo after it
            t -= timedelta(days=1)
        found.append((t, what))
    return found


def test_an_xid_throttling_and_a_lost_gpu_in_the_last_three_hours(demo: Demo) -> None:
    incidents = _incident_times(demo)
    assert len(incidents) == 4, demo.out
    for t, what in incidents:
        assert demo.started - timedelta(hours=3) < t < demo.started + timedelta(minutes=5), what
    before = {"time": (demo.started - timedelta(hours=3)).timestamp()}
    xid = 'gpu_xid_errors_total{xid="31"}'
    assert demo.query(xid, **before) == []
    assert demo.query(f"max_over_time({xid}[3h]) >= 1")
    power = 'gpu_clock_event_reason_active{reason="sw_power_cap", modelName="NVIDIA L4"}'
    assert [s["value"][1] for s in demo.query(power, **before)] == ["0", "0"]
    assert [s["value"][1] for s in demo.query(power)] == ["1", "1"]  # still on
    thermal = 'gpu_clock_event_reason_active{reason="hw_thermal_slowdown"}'
    assert len(demo.query(f"max_over_time({thermal}[3h]) == 1")) == 8
    assert demo.query(f"{thermal} == 1") == [] and demo.query(f"{thermal} == 1", **before) == []
    # the T4 falls off the bus once the live exporters know it: it keeps its identity
    lost = demo.await_query("gpu_device_up == 0", 180)
    assert [(s["metric"]["Hostname"], s["metric"]["modelName"]) for s in lost] == [
        ("gpu-node-mixed-01", "Tesla T4")
    ]
    assert lost[0]["metric"]["UUID"].startswith("GPU-")
    assert demo.query('gpu_device_up{modelName="Tesla T4"} == 1', **before)


def test_no_gap_where_history_hands_over_to_the_live_exporters(demo: Demo) -> None:
    """Every target's samples (history, then live scrapes) around the handover are one series,
    never further apart than the cost service's gap rule allows."""
    m = re.search(r"samples of history until (\d\d:\d\d:\d\d)", demo.out)
    assert m, demo.out
    handover = datetime.combine(demo.started.date(), datetime.strptime(m[1], "%H:%M:%S").time())
    handover = handover.replace(tzinfo=demo.started.tzinfo)
    # a live scrape of every target since Prometheus started again over the history (the
    # first after the handover may come before or after it)
    info = httpx.get(f"{demo.prometheus}/api/v1/status/runtimeinfo", timeout=30).json()
    restart = datetime.fromisoformat(info["data"]["startTime"].replace("Z", "+00:00"))
    assert handover < restart
    targets = 'up{job=~"gpu-exporter|kube-state-metrics"}'
    deadline = time.monotonic() + 2 * STEP
    while True:
        live = int(datetime.now(UTC).timestamp() - restart.timestamp())
        scraped = demo.query(f"{targets}[{live}s]")
        if len(scraped) == len(NODES) + 1 or time.monotonic() > deadline:
            break
        time.sleep(1)  # polling interval while waiting for scrapes
    assert len(scraped) == len(NODES) + 1, scraped
    since = datetime.now(UTC).timestamp() - handover.timestamp() + 900  # 15 min of history
    for sel in (
        targets,
        "gpu_allocation_share",
        "kube_pod_labels",
        'gpu_device_up{modelName!="Tesla T4"}',
    ):
        series = demo.query(f"{sel}[{int(since)}s]")
        assert series, sel
        assert len(series) == len(demo.query(sel)), f"{sel}: history and live are not one series"
        for s in series:
            times = [float(t) for t, _ in s["values"]]
            assert times[0] < handover.timestamp() - 600 and times[-1] > restart.timestamp()
            gaps = [b - a for a, b in itertools.pairwise(times)]
            assert max(gaps) <= MAX_GAP, (sel, s["metric"], max(gaps))


def test_the_readme_shows_the_real_output(demo: Demo) -> None:
    """The README's sample is this output, numbers and names aside: every line the demo
    prints has its like there (its tables by their teams), and its claims are true."""
    readme = (ROOT / "README.md").read_text()
    text = readme[readme.index("```\ngpu-finops demo:") + 4 :]
    sample = text[: text.index("```")].splitlines()

    def shape(line: str) -> str:
        line = line.rsplit("\r", 1)[-1]  # as a terminal shows a line of progress
        line = re.sub(r"gfo_\S+", "TOKEN", line)
        line = re.sub(r"(/tmp/|http://127\.0\.0\.1:)\S+", "X", line)
        line = re.sub(r"\s+", " ", re.sub(r"\d+", "9", line))
        return re.sub(r"^(\s*)[a-z][\w-]*(?= )", r"\1TEAM", line).strip()

    shapes = {shape(x) for x in sample}
    skip = ("  port ", "make ", "scripts/", "PATH=", "  none yet")
    advice = re.compile(r"^  \S+\s+\S+/\w+/\S+\s")  # a savings row: other workloads, another day
    missing = [
        x
        for x in demo.lines
        if x.strip() and not x.startswith(skip) and not advice.match(x) and shape(x) not in shapes
    ]
    assert not missing, missing
    assert set(_rows(demo)) <= {m[1] for m in map(ROW.match, sample) if m}
    assert f"{len(NODES)} simulated GPU nodes" in readme
    assert f"exporters 9400–{9400 + len(NODES) - 1}" in readme
    assert "ready in 23 s" not in readme and "3-node" not in readme


MONTH = re.compile(
    r"^Last month, (\d{4}-\d\d) \((\d+) hours\), to close on the finance page: (\S+)$", re.M
)
MONTH_WITHIN = 240  # seconds for the past month's ingest, in the background (~1 min alone)


def test_the_previous_month_is_whole_and_closes(demo: Demo) -> None:
    """The previous calendar month (UTC), made by the same simulated nodes through Prometheus
    and ingested by the cost service in the background: every hour of it read from the
    exporters' integrals, so the finance page has it ready to close, and closing it through the
    API succeeds (its reports' hashes recorded)."""
    m = MONTH.search(demo.out)
    assert m, demo.out
    month, hours, url = m[1], int(m[2]), m[3]
    this_month = demo.started.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    start = (this_month - timedelta(days=1)).replace(day=1)
    assert month == f"{start:%Y-%m}"
    assert url == f"{demo.api}/ui/finance/close?month={month}"
    assert hours == (this_month - start) / timedelta(hours=1) >= 24 * 28
    assert "scraped by Prometheus every 60 min" in demo.out  # it says how it was made

    from sqlalchemy import text

    from costsvc.db.engine import make_engine
    from costsvc.months.billing import month_state
    from costsvc.months.close import ingested_hours

    engine = make_engine(f"sqlite:///{Path(demo.printed('files')) / 'gpu-costsvc.db'}")
    try:
        deadline = time.monotonic() + MONTH_WITHIN
        while ingested_hours(engine, month) != (hours, hours):
            assert time.monotonic() < deadline, ingested_hours(engine, month)
            time.sleep(2)  # polling interval while the demo ingests the month
        assert month_state(engine, month, datetime.now(UTC)).state == "closable"
        with engine.connect() as conn:
            reads = conn.execute(
                text("SELECT DISTINCT reads FROM gpu_hours WHERE hour >= :a AND hour < :b"),
                {"a": f"{start:%Y-%m-%d %H:%M:%S}", "b": f"{this_month:%Y-%m-%d %H:%M:%S}"},
            ).all()
        assert [r[0] for r in reads] == ["integrals"]  # every GPU-hour from the counters
    finally:
        engine.dispose()
    span = {"start": _iso(start), "end": _iso(start + timedelta(hours=hours))}
    teams = {r["group"]["team"] for r in demo.get("/v1/costs", **span, group_by="team")["rows"]}
    assert set(_rows(demo)) - {"__idle__"} <= teams  # the same fleet, the same teams
    closed = httpx.post(
        f"{demo.api}/v1/months/{month}/close",
        headers={"Authorization": f"Bearer {demo.token}"},
        timeout=60,
    )
    assert closed.status_code == 200, closed.text
    assert closed.json()["closed"] and closed.json()["chargeback_csv_sha256"]


def test_a_port_that_stays_busy_is_named_and_the_demo_exits() -> None:
    require_binary("prometheus")
    require_binary("promtool")
    base = free_ports(8)
    prom_port = base + 1
    ports = ["--api-port", str(base), "--prometheus-port", str(prom_port)]
    ports += ["--labels-port", str(base + 2), "--exporter-port", str(base + 3)]
    held = hold(prom_port)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "demo", *ports, "--port-wait", "1"],
            cwd=ROOT,
            env=env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        held.close()
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        f"make demo: port {prom_port} (Prometheus) is still busy after 1 s: stop what listens "
        "on it, or choose another with --prometheus-port"
    ) in done.stdout
    assert "simulated GPU nodes" not in done.stdout  # found before the simulation
    assert Path(ROOT / "Makefile").read_text().count("python -m demo $(ARGS)") == 1


def test_the_opencost_ui_drills_down_by_controller_to_pods(demo: Demo) -> None:
    """The demo's kube-state-metrics publishes kube_pod_owner and its ReplicaSets' and Jobs'
    owners (demo/cluster.py): the ingested hours know each pod's controller, and the OpenCost
    UI's drill-down (aggregate=controller, then a controller's pods) reaches the pods."""
    first, end, _ = _window(demo)
    window = f"{_iso(first)},{_iso(end)}"
    sets = demo.get("/allocation", window=window, aggregate="controller", accumulate="true")
    names = set(sets["data"][0])
    assert {"deployment:chat", "statefulset:ranker", "job:embed-batch"} <= names, names
    pods = demo.get(
        "/allocation",
        window=window,
        aggregate="pod",
        accumulate="true",
        filter='controllerKind:"deployment"+controllerName:"chat"',
    )
    assert {k for k in pods["data"][0] if not k.startswith("__")} == {"chat-a", "chat-b"}
