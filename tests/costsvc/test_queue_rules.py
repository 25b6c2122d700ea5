"""The quota-against-use rule and the borrowing money (costsvc/rules/queues.py), on small
hand-computed tables (docs/queues.md)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

import pytest

from costsvc.rules.attribution import HourFacts
from costsvc.rules.cost_model import CostModel, CostModelError, MissingPrices, parse
from costsvc.rules.owners import QUEUE_LABEL, OwnerLookup
from costsvc.rules.queues import (
    PodQueues,
    QueueHour,
    QueueUse,
    credit_lenders,
    price_queues,
    quota_hour,
    resource_price,
    terms,
    unlent,
)

H = 3600  # one resource for the whole hour, in resource-seconds
AT = datetime(2026, 11, 18, 10, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"


def use(queue: str, nominal: int, used: int, cohort: str = "research") -> QueueUse:
    return QueueUse(cohort, queue, "h100", "nvidia.com/gpu", nominal * H, used * H, "t-" + queue)


def figures(rows: list[QueueHour]) -> dict[str, tuple[int, int, int, int]]:
    """ClusterQueue -> (within, borrowed, lent, idle) in GPU-hours (exact: whole hours)."""
    return {
        r.use.cluster_queue: (r.within // H, r.borrowed // H, r.lent // H, r.idle // H)
        for r in rows
    }


@pytest.mark.parametrize(
    ("uses", "expected"),
    [
        # 8/4/4: b uses 7 (4 own + 3 borrowed), a all of its 8, c 1 of 4: c lends the 3
        (((8, 8), (4, 7), (4, 1)), {"a": (8, 0, 0, 0), "b": (4, 3, 0, 0), "c": (1, 0, 3, 0)}),
        # a leaves 2 unused, c 4: b's 3 split 2:4 -> a lends 1, c 2 (c keeps 2 idle)
        (((8, 6), (4, 7), (4, 0)), {"a": (6, 0, 1, 1), "b": (4, 3, 0, 0), "c": (0, 0, 2, 2)}),
        # nobody borrows: unused quota is idle
        (((8, 8), (4, 4), (4, 2)), {"a": (8, 0, 0, 0), "b": (4, 0, 0, 0), "c": (2, 0, 0, 2)}),
    ],
)
def test_the_cohort_8_4_4(
    uses: tuple[tuple[int, int], ...], expected: dict[str, tuple[int, int, int, int]]
) -> None:
    rows = quota_hour(use(q, n, u) for q, (n, u) in zip("abc", uses, strict=True))
    assert figures(rows) == expected
    for r in rows:  # nominal = within + lent + idle; used = within + borrowed
        assert r.use.nominal == r.within + r.lent + r.idle
        assert r.use.used == r.within + r.borrowed
    assert unlent(rows) == 0


def test_lending_is_largest_remainder_and_never_past_the_unused_quota() -> None:
    # 1 GPU borrowed for 100 s, unused 3:3:3 GPU-hours: 100 s in thirds -> 34, 33, 33 (the
    # spare second to the first in name order)
    uses = [
        QueueUse("co", "b", "f", "nvidia.com/gpu", 0, 100, "t"),
        *(QueueUse("co", q, "f", "nvidia.com/gpu", 3 * H, 0, "t") for q in "cde"),
    ]
    assert [r.lent for r in quota_hour(uses)] == [0, 34, 33, 33]
    # borrowing beyond the cohort's unused quota (a parent cohort's): 5 GPU-hours borrowed,
    # 2 unused -> 2 lent, 3 unlent
    rows = quota_hour([use("x", 1, 6), use("y", 2, 0)])
    assert [r.lent for r in rows] == [0, 2 * H] and unlent(rows) == 3 * H


def test_a_queue_in_no_cohort_lends_to_nobody() -> None:
    rows = quota_hour([use("solo", 2, 3, cohort=""), use("other", 4, 0, cohort="")])
    assert figures(rows) == {"other": (0, 0, 0, 4), "solo": (2, 1, 0, 0)}


def test_credit_lenders_charges_equal_credits() -> None:
    # b borrows 3 GPU-hours at 2.50 x premium 1.2 = 9.000000; lent 1:2 -> a 3.0, c 6.0
    rows = quota_hour([use("a", 8, 6), use("b", 4, 7), use("c", 4, 0)])
    priced = credit_lenders(rows, 2_500_000, Decimal("1.2"))
    assert [(r.charge, r.credit) for r in priced] == [
        (0, 3_000_000),
        (9_000_000, 0),
        (0, 6_000_000),
    ]
    # an odd amount: 1 GPU for 1000 s at 1.000001 -> 1000 x 1000001 / 3600 = 277778.055…
    # -> 277778 charged; credited 1:1 -> 138889 each
    rows = quota_hour(
        [
            QueueUse("co", "b", "f", "nvidia.com/gpu", 0, 1000, "t"),
            QueueUse("co", "c", "f", "nvidia.com/gpu", 500, 0, "t"),
            QueueUse("co", "d", "f", "nvidia.com/gpu", 500, 0, "t"),
        ]
    )
    priced = credit_lenders(rows, 1_000_001, Decimal(1))
    assert [(r.charge, r.credit) for r in priced] == [(277_778, 0), (0, 138_889), (0, 138_889)]


def model(**queues: object) -> CostModel:
    return parse(
        {
            "versions": [
                {
                    "effective_from": "2026-11-01T00:00:00Z",
                    "prices": [{"model": H100, "hourly": "2.50"}],
                }
            ],
            "queues": queues,
        }
    )


def test_the_price_of_a_flavor_and_of_a_mig_resource() -> None:
    m = model(flavors={"h100": H100})
    assert resource_price(m, AT, "h100", "nvidia.com/gpu") == 2_500_000
    # 1g.10gb on an H100: 1 of 7 compute slices -> 2.50 / 7 per instance-hour
    mig = resource_price(m, AT, "h100", "nvidia.com/mig-1g.10gb")
    assert mig is not None and abs(mig - Fraction(2_500_000, 7)) < Fraction(1, 10**15)
    # 3 instances borrowed for the hour at premium 1.2 from one lender: 3 x 2.50 x 1.2 / 7
    # = 1.2857142857… -> 1.285714
    rows = quota_hour(
        [
            QueueUse("m", "d", "h100", "nvidia.com/mig-1g.10gb", 7 * H, 10 * H, "t"),
            QueueUse("m", "e", "h100", "nvidia.com/mig-1g.10gb", 7 * H, 2 * H, "t"),
        ]
    )
    priced = credit_lenders(rows, mig, Decimal("1.2"))
    assert [(r.charge, r.credit) for r in priced] == [(1_285_714, 0), (0, 1_285_714)]
    assert resource_price(m, AT, "other", "nvidia.com/gpu") is None


def test_the_policy_in_force_and_a_flavor_without_a_price() -> None:
    rows = quota_hour([use("a", 8, 6), use("b", 4, 7), use("c", 4, 0)])
    none = price_queues(rows, model(flavors={"h100": H100}), AT)
    assert {(r.policy, r.charge, r.credit) for r in none} == {("none", 0, 0)}
    later = {"effective_from": "2026-11-18T11:00:00Z", "policy": "credit_lenders"}
    m = model(flavors={"h100": H100}, borrowing=[later])
    assert {r.policy for r in price_queues(rows, m, AT)} == {"none"}
    at11 = datetime(2026, 11, 18, 11, tzinfo=UTC)
    priced = price_queues(rows, m, at11)
    assert [r.charge - r.credit for r in priced] == [-2_500_000, 7_500_000, -5_000_000]
    with pytest.raises(MissingPrices, match="flavor h100"):
        price_queues(rows, model(borrowing=[later]), at11)


def test_the_terms_a_reprice_compares() -> None:
    # what an hour's rows are priced on: the policy, its premium in millionths (0 under none),
    # the price per resource-hour to the micro-unit (a 1g.10gb: 2.50 / 7 = 0.357142857… ->
    # 357143)
    credit = {"effective_from": "2026-11-18T10:00:00Z", "policy": "credit_lenders"}
    m = model(flavors={"h100": H100}, borrowing=[{**credit, "premium": "1.25"}])
    assert terms(m, AT, "h100", "nvidia.com/gpu") == ("credit_lenders", 1_250_000, 2_500_000)
    assert terms(m, AT, "h100", "nvidia.com/mig-1g.10gb") == ("credit_lenders", 1_250_000, 357_143)
    before = datetime(2026, 11, 18, 9, tzinfo=UTC)
    assert terms(m, before, "h100", "nvidia.com/gpu") == ("none", 0, 2_500_000)
    assert terms(m, AT, "unmapped", "nvidia.com/gpu") == ("credit_lenders", 1_250_000, None)


@pytest.mark.parametrize(
    ("owners", "teams"),
    [
        # off: the pod's own label, else its namespace's
        ({}, {"own": "own-team", "plain": "ns-team", "queued": "ns-team"}),
        # the LocalQueue's label; pod_first: the pod's own label first
        (
            {"team_from": "local_queue_label"},
            {"own": "own-team", "plain": "ns-team", "queued": "lq-team"},
        ),
        # queue_first: the queue's team over the pod's own label; no queue label: unchanged
        (
            {"team_from": "local_queue_label", "precedence": "queue_first"},
            {"own": "lq-team", "plain": "ns-team", "queued": "lq-team"},
        ),
        # the LocalQueue's namespace's team label, over the pod's own with queue_first
        (
            {"team_from": "local_queue_namespace", "precedence": "queue_first"},
            {"own": "ns-team", "plain": "ns-team", "queued": "ns-team"},
        ),
    ],
)
def test_the_owner_rules_queue_step(owners: dict[str, str], teams: dict[str, str]) -> None:
    queue = {QUEUE_LABEL: "lq"}
    facts = HourFacts(
        AT,
        pod_labels={
            ("c1", "ns", "own"): {**queue, "label_team": "own-team"},
            ("c1", "ns", "plain"): {},
            ("c1", "ns", "queued"): queue,
        },
        namespace_labels={("c1", "ns"): {"label_team": "ns-team"}},
    )
    m = model(owners=owners)
    lookup = OwnerLookup(facts, m.labels, m.queues.owners, {("c1", "ns", "lq"): "lq-team"})
    found = {pod: lookup("c1", "ns", pod) for pod in teams}
    assert {pod: o.team for pod, o in found.items() if o is not None} == teams


@pytest.mark.parametrize(
    ("queues", "where"),
    [
        ({"borrowing": [{"effective_from": "2026-11-18T10:00:00Z", "premium": "10.5"}]}, "premium"),
        ({"borrowing": [{"effective_from": "2026-11-18T10:30:00Z"}]}, "borrowing[0]"),
        ({"borrowing": [{"effective_from": "2026-11-18T10:00:00Z", "policy": "x"}]}, "policy"),
        ({"owners": {"label": "team"}}, "owners.label"),  # Kueue's custom labels are custom_*
        ({"owners": {"team_from": "cluster"}}, "owners.team_from"),
    ],
)
def test_bad_queue_settings_are_refused_naming_them(queues: dict[str, object], where: str) -> None:
    with pytest.raises(CostModelError, match=re.escape(where)):
        model(**queues)


@pytest.mark.parametrize(
    ("owners", "decided"),
    [
        (
            {},
            "team=pod:team",
        ),
        ({"team_from": "local_queue_label"}, "team=pod:team"),  # pod_first: its own label
        (
            {"team_from": "local_queue_label", "precedence": "queue_first"},
            "team=local_queue:custom_team",
        ),
        (
            {"team_from": "cluster_queue_label", "precedence": "queue_first"},
            "team=cluster_queue:custom_team",
        ),
        (
            {"team_from": "local_queue_namespace", "precedence": "queue_first"},
            "team=local_queue_namespace:team",
        ),
    ],
)
def test_which_labels_decided_the_owner(owners: dict[str, str], decided: str) -> None:
    """``owner_from``: per dimension, where its value came from; ``-`` where none did."""
    facts = HourFacts(
        AT,
        pod_labels={
            ("c1", "ns", "own"): {QUEUE_LABEL: "lq", "label_team": "own-team"},
            ("c1", "ns", "plain"): {},
        },
        namespace_labels={("c1", "ns"): {"label_team": "ns-team", "label_project": "p"}},
    )
    m = model(owners=owners)
    lookup = OwnerLookup(facts, m.labels, m.queues.owners, {("c1", "ns", "lq"): "lq-team"})
    assert lookup.decided("c1", "ns", "own") == decided + ";project=namespace:project;stage=-"
    # no queue label: its namespace's labels decide, whatever the queue step
    assert (
        lookup.decided("c1", "ns", "plain")
        == "team=namespace:team;project=namespace:project;stage=-"
    )
    assert lookup.decided("c1", "elsewhere", "gone") == "team=-;project=-;stage=-"


def test_the_queue_of_a_line() -> None:
    """LocalQueue -> ClusterQueue (the watch), its cohort, the flavor of the line's GPUs."""
    uses = {
        "c1": [
            QueueUse("research", "cq-b", "h100", "nvidia.com/gpu", H, H, "beta"),
            QueueUse("research", "cq-b", "h100-spot", "nvidia.com/gpu", H, 0, "beta"),
            QueueUse("research", "cq-b", "a100", "nvidia.com/gpu", H, 0, "beta"),
            QueueUse("mig", "cq-d", "h100-mig", "nvidia.com/mig-1g.10gb", 7 * H, H, "delta"),
            QueueUse("mig", "cq-d", "h100", "nvidia.com/gpu", H, 0, "delta"),
        ]
    }
    links = {
        ("c1", "ns", "lq-b"): "cq-b",
        ("c1", "ns", "lq-d"): "cq-d",
        ("c1", "ns", "lq-x"): "gone",
    }
    flavors = {"h100": H100, "h100-spot": H100, "a100": "NVIDIA A100", "h100-mig": H100}
    queues = PodQueues(uses, links, flavors)
    # two flavors of cq-b are H100s: which one is unknown; its one A100 flavor is known
    assert queues("c1", "ns", "lq-b", H100, "") == ("lq-b", "cq-b", "research", "")
    assert queues("c1", "ns", "lq-b", "NVIDIA A100", "") == ("lq-b", "cq-b", "research", "a100")
    # a MIG line: the flavor with its MIG resource; a whole GPU: the whole-GPU flavor
    assert queues("c1", "ns", "lq-d", H100, "1g.10gb") == ("lq-d", "cq-d", "mig", "h100-mig")
    assert queues("c1", "ns", "lq-d", H100, "") == ("lq-d", "cq-d", "mig", "h100")
    assert queues("c1", "ns", "lq-d", H100, "2g.20gb") == ("lq-d", "cq-d", "mig", "")
    # no series of its ClusterQueue, no link, no queue label
    assert queues("c1", "ns", "lq-x", H100, "") == ("lq-x", "gone", "", "")
    assert queues("c1", "ns", "lq-new", H100, "") == ("lq-new", "", "", "")
    assert queues("c1", "ns", "", H100, "") == ("", "", "", "")
    assert queues("c2", "ns", "lq-b", H100, "") == ("lq-b", "", "", "")  # another cluster's
