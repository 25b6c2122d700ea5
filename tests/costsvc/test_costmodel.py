from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from costsvc.kit.times import parse_utc as utc
from costsvc.rules.cost_model import CostModel, CostModelError, MissingPrices, load, parse

ROOT = Path(__file__).resolve().parents[2]
H100 = "NVIDIA H100 80GB HBM3"


def model(**over: Any) -> dict[str, Any]:
    version = {
        "effective_from": "2026-11-01T00:00:00Z",
        "prices": [{"model": H100, "hourly": "2.50"}],
    }
    raw: dict[str, Any] = {"versions": [version]}
    raw.update(over)
    return raw


def micro_per_hour(m: CostModel, at: datetime, models: dict[str, str | None]) -> dict[str, int]:
    """Price per GPU-hour of each ``model -> node pool`` at ``at`` (CostModel.prices_for)."""
    prices = m.prices_for(at, models.items())
    return {name: prices[(name, pool)] for name, pool in models.items()}


def test_example_loads_and_prices() -> None:
    m = load(ROOT / "examples" / "cost-model.yaml")
    at = utc("2026-11-10T05:00:00Z")
    assert micro_per_hour(m, at, {H100: None}) == {H100: 2_500_000}
    assert micro_per_hour(m, at, {H100: "spot-pool"}) == {H100: 1_000_000}  # 60 % off
    assert micro_per_hour(m, at, {H100: "reserved-pool"}) == {H100: 1_625_000}
    # amortised: 15000 / (36 * 730) + 0.4 kW * 0.12, times 1.3
    expected = (Decimal(15000) / (36 * 730) + Decimal("0.048")) * Decimal("1.3")
    got = micro_per_hour(m, at, {"NVIDIA A100-SXM4-80GB": None})["NVIDIA A100-SXM4-80GB"]
    assert abs(got - expected * 1_000_000) <= Decimal("0.5")


def test_versions_switch_at_their_instant() -> None:
    m = load(ROOT / "examples" / "cost-model.yaml")
    assert micro_per_hour(m, utc("2026-11-15T11:00:00Z"), {H100: None})[H100] == 2_500_000
    assert micro_per_hour(m, utc("2026-11-15T12:00:00Z"), {H100: None})[H100] == 2_200_000
    assert m.version_at(utc("2026-10-31T23:00:00Z")) is None


def test_missing_prices_name_every_model() -> None:
    m = parse(model())
    with pytest.raises(MissingPrices) as info:
        micro_per_hour(
            m, utc("2026-11-02T00:00:00Z"), {H100: None, "NVIDIA L4": None, "Tesla T4": None}
        )
    assert info.value.models == ["NVIDIA L4", "Tesla T4"]
    with pytest.raises(MissingPrices):  # before the first version: nothing is priced
        micro_per_hour(m, utc("2026-10-01T00:00:00Z"), {H100: None})


def test_most_specific_price_wins() -> None:
    m = parse(
        model(
            versions=[
                {
                    "effective_from": "2026-11-01T00:00:00Z",
                    "prices": [
                        {"model": "NVIDIA H100*", "hourly": "9"},
                        {"model": H100, "hourly": "2"},
                        {"model": H100, "node_pool": "p", "hourly": "1"},
                    ],
                }
            ]
        )
    )
    at = utc("2026-11-02T00:00:00Z")
    assert micro_per_hour(m, at, {H100: None})[H100] == 2_000_000
    assert micro_per_hour(m, at, {H100: "p"})[H100] == 1_000_000
    assert micro_per_hour(m, at, {"NVIDIA H100 PCIe": None})["NVIDIA H100 PCIe"] == 9_000_000


@pytest.mark.parametrize(
    ("raw", "where", "reason"),
    [
        (
            model(
                versions=[
                    {
                        "effective_from": "2026-11-01T00:00:00Z",
                        "prices": [{"model": H100, "hourly": "0"}],
                    }
                ]
            ),
            "versions[0].prices[0].hourly",
            "greater than 0",
        ),
        (
            model(
                versions=[
                    {
                        "effective_from": "2026-11-01T00:00:00Z",
                        # six decimals at most: 0.000001 less 60 % rounds to 0
                        "prices": [{"model": H100, "hourly": "0.000001", "discount": "0.6"}],
                    }
                ]
            ),
            "versions[0]",
            "rounds to 0",
        ),
        (
            model(
                versions=[
                    {
                        "effective_from": "2026-11-01T00:00:00",
                        "prices": [{"model": H100, "hourly": "1"}],
                    }
                ]
            ),
            "versions[0]",
            "time zone",
        ),
        (
            model(
                versions=[{"effective_from": "2026-11-01T00:00:00Z", "prices": [{"model": H100}]}]
            ),
            "versions[0].prices[0]",
            "either hourly or amortised",
        ),
        (
            model(
                versions=[
                    {
                        "effective_from": "2026-11-01T12:30:00Z",
                        "prices": [{"model": H100, "hourly": "1"}],
                    }
                ]
            ),
            "versions[0]",
            "whole hour",
        ),
        (model(policies={"idle_policy": "sometimes"}), "policies.idle_policy", "Input should be"),
        (model(currency="dollars"), "currency", "should match pattern"),
        (model(versions=[]), "versions", "at least 1"),
        (model(colour="red"), "colour", "Extra inputs"),
    ],
)
def test_bad_models_name_place_and_reason(raw: dict[str, Any], where: str, reason: str) -> None:
    with pytest.raises(CostModelError) as info:
        parse(raw, "cost.yaml")
    assert str(info.value).startswith(f"cost.yaml: {where}: "), str(info.value)
    assert reason in str(info.value)


def test_an_offset_time_zone_on_the_hour_is_fine() -> None:
    m = parse(
        model(
            versions=[
                {
                    "effective_from": "2026-11-01T05:00:00+02:00",
                    "prices": [{"model": H100, "hourly": "1"}],
                }
            ]
        )
    )
    assert m.version_at(utc("2026-11-01T03:00:00Z")) is not None
    assert m.version_at(utc("2026-11-01T02:00:00Z")) is None


def test_document_hash_is_stable_and_content_addressed() -> None:
    a, b = parse(model()), parse(model())
    assert a.sha256() == b.sha256()
    assert parse(model(currency="EUR")).sha256() != a.sha256()
    assert parse(a.document()) == a  # the stored document loads back to the same model


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(CostModelError, match="cannot read"):
        load(tmp_path / "nope.yaml")
