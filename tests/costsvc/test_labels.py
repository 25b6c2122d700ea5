from __future__ import annotations

from costsvc.rules.attribution import Owner
from costsvc.rules.chargeback import UNALLOCATED
from costsvc.rules.cost_model import LabelKeys
from costsvc.rules.owners import resolve_owner

KEYS = LabelKeys(
    team=["team", "app.kubernetes.io/team"], project=["project"], stage=["stage", "env"]
)


def test_pod_labels_first_key_wins() -> None:
    got = resolve_owner(
        {"app.kubernetes.io/team": "b", "team": "a", "project": "p", "env": "dev"},
        {"team": "ns-team"},
        KEYS,
    )
    assert got == Owner("a", "p", "dev")


def test_namespace_fallback_per_dimension() -> None:
    got = resolve_owner({"project": "p"}, {"team": "ns-team", "stage": "prod"}, KEYS)
    assert got == Owner("ns-team", "p", "prod")


def test_no_labels_anywhere_is_unallocated() -> None:
    assert resolve_owner({}, {}, KEYS) == Owner(UNALLOCATED, UNALLOCATED, UNALLOCATED)
    no_fallback = LabelKeys(namespace_fallback=False)
    assert resolve_owner({}, {"team": "x"}, no_fallback).team == UNALLOCATED
