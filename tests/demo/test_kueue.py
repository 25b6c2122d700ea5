"""The demo's Kueue stand-in (demo/kueue.py) publishes Kueue's own series, served on the
kube-state-metrics stand-in's target, and its queues are what it says: in cohort training one
borrows and one lends, in cohort research one sits idle. Fast: no demo is started."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from costsvc.ingest.kueue import NOMINAL, USAGE
from costsvc.rules.queues import QueueUse, quota_hour
from demo.cluster import scrape
from demo.history import NODES
from exporter.simulate.spec import load

ROOT = Path(__file__).resolve().parents[2]
FLEETS = [load(ROOT / "examples" / name) for name in NODES]
H = 3600


def test_the_stand_in_publishes_kueues_series_and_one_borrower_lender_and_idle_queue() -> None:
    found: dict[str, dict[tuple[str, ...], float]] = {}
    for family in text_string_to_metric_families(scrape(FLEETS, 600.0)):
        for s in family.samples:
            if s.name.startswith("kueue_"):
                key = tuple(
                    s.labels.get(k, "")
                    for k in ("cohort", "cluster_queue", "flavor", "resource", "custom_team")
                )
                found.setdefault(s.name, {})[key] = s.value
    assert set(found) == {NOMINAL, USAGE, "kueue_pending_workloads"}
    uses = [
        QueueUse(c, q, f, r, int(n) * H, int(found[USAGE][(c, q, f, r, t)]) * H, t)
        for (c, q, f, r, t), n in found[NOMINAL].items()
    ]
    rows = {
        r.use.cluster_queue: (r.borrowed // H, r.lent // H, r.idle // H) for r in quota_hour(uses)
    }
    # nlp-train 11 of 8: borrows 3; vision-train 1 of 4: lends those 3; research-mig 0 of 7: idle
    assert rows == {
        "nlp-train": (3, 0, 0),
        "vision-train": (0, 3, 0),
        "research-mig": (0, 0, 7),
        "sandbox-mig": (0, 0, 0),
    }
