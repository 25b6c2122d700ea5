"""Fleet specs: the examples load, bad specs fail with one line naming file, place and reason,
and the curves' exact integrals (which make the energy counter exact) are right."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.simulate.curves import Constant, Piecewise, Shifted, Sine
from exporter.simulate.spec import SpecError, expand, load, parse

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["fleet-h100x8.yaml", "fleet-mixed.yaml", "fleet-shared.yaml"])
def test_examples_load(name: str) -> None:
    spec = load(ROOT / "examples" / name)
    gpus = expand(spec)
    assert gpus
    assert len({g.uuid for g in gpus}) == len(gpus)
    assert len({g.pci_bus_id for g in gpus}) == len(gpus)


def test_h100_example_is_eight_h100_80gb_hbm3() -> None:
    gpus = expand(load(ROOT / "examples" / "fleet-h100x8.yaml"))
    assert [g.spec.model for g in gpus] == ["NVIDIA H100 80GB HBM3"] * 8


def test_mixed_example_has_a100_and_l4_or_t4() -> None:
    models = {g.spec.model for g in expand(load(ROOT / "examples" / "fleet-mixed.yaml"))}
    assert any("A100" in m for m in models)
    assert models & {"NVIDIA L4", "Tesla T4"}


GOOD_GPU = {"model": "X", "memory_total_mib": 1000}


@pytest.mark.parametrize(
    ("raw", "where", "reason"),
    [
        ({"gpus": [{"memory_total_mib": 1}]}, "gpus[0].model", "Field required"),
        (
            {"gpus": [{**GOOD_GPU, "power_w": {"points": [[5, 1], [2, 3]]}}]},
            "gpus[0].power_w",
            "strictly increasing",
        ),
        (
            {"gpus": [{**GOOD_GPU, "power_w": {"sine": {"min": 1, "max": 2, "period": 0}}}]},
            "gpus[0].power_w.sine.period",
            "greater than 0",
        ),
        (
            {
                "gpus": [
                    {
                        **GOOD_GPU,
                        "power_w": {"points": [[0, 1]], "sine": {"min": 1, "max": 2, "period": 3}},
                    }
                ]
            },
            "gpus[0].power_w",
            "exactly one of",
        ),
        ({"gpus": [{**GOOD_GPU, "wattage": 3}]}, "gpus[0].wattage", "Extra inputs"),
        (
            {"gpus": [{**GOOD_GPU, "unsupported": ["teleport"]}]},
            "gpus[0].unsupported[0]",
            "Input should be",
        ),
        ({"gpus": [{**GOOD_GPU, "count": 2, "uuid": "GPU-1"}]}, "gpus[0]", "count is 1"),
        (
            {
                "gpus": [
                    {
                        **GOOD_GPU,
                        "nvlink": {
                            "links": 2,
                            "errors": [{"t": 1, "link": 5, "counter": "crc_flit"}],
                        },
                    }
                ]
            },
            "gpus[0].nvlink",
            "has 2 links",
        ),
        (
            {"gpus": [{**GOOD_GPU, "clock_events": [{"from": 5, "to": 1, "reasons": []}]}]},
            "gpus[0].clock_events[0]",
            "'to' must be after 'from'",
        ),
    ],
)
def test_bad_specs_name_the_place_and_reason(raw: dict[str, Any], where: str, reason: str) -> None:
    with pytest.raises(SpecError) as info:
        parse(raw, "fleet.yaml")
    message = str(info.value)
    assert message.startswith(f"fleet.yaml: {where}: "), message
    assert reason in message
    assert "\n" not in message


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"missing\.yaml: cannot read"):
        load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: [\n  - {model: x\n")
    with pytest.raises(SpecError, match=r"bad\.yaml: line \d+:"):
        load(bad)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    with pytest.raises(SpecError, match="top level must be a mapping"):
        load(scalar)


def numeric_integral(curve: Any, t: float, steps: int = 20000) -> float:
    h = t / steps
    return sum(curve.value((i + 0.5) * h) for i in range(steps)) * h


points = st.lists(st.tuples(st.floats(0, 100), st.floats(-50, 500)), min_size=1, max_size=6).map(
    lambda pts: sorted({round(p[0], 3): p for p in pts}.values())
)


@settings(max_examples=60, deadline=None)
@given(pts=points, linear=st.booleans(), t=st.floats(0.5, 250))
def test_piecewise_integral_matches_numeric(
    pts: list[tuple[float, float]], linear: bool, t: float
) -> None:
    curve = Piecewise(tuple(p[0] for p in pts), tuple(p[1] for p in pts), linear)
    slack = (len(pts) + 1) * (t / 20000) * max(abs(v) for _, v in pts) + 1e-6
    assert curve.integral(t) == pytest.approx(numeric_integral(curve, t), abs=slack)


@settings(max_examples=40, deadline=None)
@given(pts=points, t=st.floats(0.5, 400), linear=st.booleans())
def test_periodic_piecewise_integral_matches_numeric(
    pts: list[tuple[float, float]], t: float, linear: bool
) -> None:
    period = 120.0
    curve = Piecewise(tuple(p[0] for p in pts), tuple(p[1] for p in pts), linear, period)
    # the midpoint rule misses by up to one step width x the jump at each discontinuity
    steps = 20000
    jumps = (len(pts) + 1) * (t / period + 1)
    slack = jumps * (t / steps) * max(abs(v) for _, v in pts) + 1e-6
    assert curve.integral(t) == pytest.approx(numeric_integral(curve, t, steps), abs=slack)


@settings(max_examples=40, deadline=None)
@given(
    low=st.floats(0, 300),
    span=st.floats(0, 400),
    period=st.floats(5, 900),
    phase=st.floats(0, 900),
    t=st.floats(0.5, 2000),
    offset=st.floats(0, 300),
)
def test_sine_and_shifted_integrals_match_numeric(
    low: float, span: float, period: float, phase: float, t: float, offset: float
) -> None:
    curve = Shifted(Sine(low, low + span, period, phase), offset)
    assert curve.integral(t) == pytest.approx(numeric_integral(curve, t), rel=1e-3, abs=2.0)


def test_constant() -> None:
    assert Constant(3.0).value(99) == 3.0
    assert Constant(3.0).integral(10) == 30.0
