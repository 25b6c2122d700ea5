"""Chargeback by hand: every expected figure below is computed in the comment beside it."""

from __future__ import annotations

from decimal import Decimal as D
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costsvc.kit.times import parse_utc as utc
from costsvc.rules.attribution import GpuHour, Holding, Owner, attribute_hour
from costsvc.rules.chargeback import IDLE, UNALLOCATED
from costsvc.rules.cost_model import CostModel, MissingPrices, parse

H100 = "NVIDIA H100 80GB HBM3"
HOUR = utc("2026-11-10T05:00:00Z")


def cost_model(price: str = "2.50", **policies: str) -> CostModel:
    return parse(
        {
            "policies": policies,
            "versions": [
                {
                    "effective_from": "2026-11-01T00:00:00Z",
                    "prices": [
                        {"model": H100, "hourly": price},
                        {
                            "model": H100,
                            "node_pool": "spot",
                            "pricing": "spot",
                            "hourly": price,
                            "discount": "0.6",
                        },
                    ],
                },
                {
                    "effective_from": "2026-11-15T12:00:00Z",
                    "prices": [{"model": H100, "hourly": "2.20"}],
                },
            ],
        }
    )


def gpu(uuid: str = "GPU-1", present: int = 3600, pool: str | None = None) -> GpuHour:
    return GpuHour("c1", "node-1", uuid, H100, pool, D(present))


def hold(pod: str, seconds: Any = 3600, uuid: str = "GPU-1", busy: Any = 0, **kw: Any) -> Holding:
    kw.setdefault("cluster", "c1")
    return Holding(uuid, "ns", pod, "main", D(seconds), None if busy is None else D(busy), **kw)


def owners(mapping: dict[str, str]) -> Any:
    return lambda cluster, ns, pod: Owner(mapping[pod], "proj", "prod") if pod in mapping else None


def by_team(result: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in result.lines:
        out[line.team] = (
            out.get(line.team, 0) + line.allocated + (line.idle if line.team == IDLE else 0)
        )
    return out


def test_no_utilisation_series_is_unknown_efficiency_not_zero() -> None:
    """An A100 MIG instance (no device utilisation in MIG mode, no GPM): its holding has no
    utilisation series. Its cost is allocated in full, but neither used nor waste; a measured
    holding of the same team keeps its own figures."""
    # MIG 3g of GPU-1 for the hour: 2.50 x 3/7 = 1.071429, unmeasured; GPU-2 whole for 30
    # minutes, 80 % busy: 1.25 allocated, 1.00 used, 0.25 waste
    unknown = hold("mig", 3600 * 3 / 7, busy=None, compute_slices=3, memory_slices=4, gi_id=2)
    r = attribute_hour(
        HOUR,
        [gpu("GPU-1"), gpu("GPU-2")],
        [unknown, hold("p", 1800, "GPU-2", busy=1440)],
        owners({"mig": "a", "p": "a"}),
        cost_model(),
    )
    lines = {line.pod: line for line in r.lines if line.team == "a"}
    assert (lines["mig"].allocated, lines["mig"].used, lines["mig"].waste) == (1_071_429, 0, 0)
    assert (lines["p"].allocated, lines["p"].used, lines["p"].waste) == (
        1_250_000,
        1_000_000,
        250_000,
    )
    assert r.total() == r.fleet_cost == 5_000_000


def test_one_whole_gpu_for_30_minutes_at_2_50() -> None:
    # 2.50/h x 1800 s = 1.25 allocated; the other half hour the GPU existed unheld: idle 1.25;
    # busy 80 % of the held time -> used 1.00, waste 0.25
    r = attribute_hour(
        HOUR, [gpu()], [hold("p", 1800, busy=1440)], owners({"p": "a"}), cost_model()
    )
    line = next(line for line in r.lines if line.team == "a")
    assert (line.allocated, line.used, line.waste) == (1_250_000, 1_000_000, 250_000)
    assert by_team(r) == {"a": 1_250_000, IDLE: 1_250_000}
    assert line.gpu_hours == 500_000  # half a GPU-hour
    assert r.fleet_cost == 2_500_000


def test_h100_as_seven_1g10gb_shared_by_three_teams() -> None:
    # six of seven instances held, 1/7 each: 2.50 x 6/7 = 2.142857142... -> 2142857 allocated,
    # split in six equal parts 357142.857...: five get 357143, the last 357142; idle 357143
    pods = {"a1": "a", "a2": "a", "a3": "a", "b1": "b", "b2": "b", "c1": "c"}
    held = [hold(p, D(3600) / 7, compute_slices=1, memory_slices=1) for p in pods]
    r = attribute_hour(HOUR, [gpu()], held, owners(pods), cost_model())
    assert by_team(r) == {"a": 1_071_429, "b": 714_286, "c": 357_142, IDLE: 357_143}


@pytest.mark.parametrize(
    ("basis", "expected"),
    [
        ("compute", {"t3": 3_000_000, "t2": 2_000_000, "t1a": 1_000_000, "t1b": 1_000_000}),
        # memory slices 4,2,1,1 of 8 at 7.00: 3.5, 1.75, 0.875, 0.875
        ("memory", {"t3": 3_500_000, "t2": 1_750_000, "t1a": 875_000, "t1b": 875_000}),
    ],
)
def test_3g_2g_1g_1g_by_compute_and_by_memory(basis: str, expected: dict[str, int]) -> None:
    layout = {"t3": (3, 4), "t2": (2, 2), "t1a": (1, 1), "t1b": (1, 1)}
    held = [
        hold(p, D(3600) * c / 7, compute_slices=c, memory_slices=m) for p, (c, m) in layout.items()
    ]
    r = attribute_hour(
        HOUR,
        [gpu()],
        held,
        owners({p: p for p in layout}),
        cost_model("7.00", mig_share_basis=basis),
    )
    assert by_team(r) == expected  # the whole GPU is held: nothing idle


@pytest.mark.parametrize(
    ("policy", "a", "b"),
    # 4 replicas at 4.00: a holds 2, b holds 1, one unheld -> idle 1.00 under both policies.
    # equal: a 2.00, b 1.00. usage: the held 3.00 split by SM time 600 : 1800 -> 0.75, 2.25
    [("equal", 2_000_000, 1_000_000), ("usage", 750_000, 2_250_000)],
)
def test_gpu_time_sliced_four_ways(policy: str, a: int, b: int) -> None:
    # a replica is 1/4 of the GPU: held for an hour, 900 GPU-seconds
    held = [
        hold("a", 900, shared=True, sm_seconds=D(300)),
        hold("a", 900, shared=True, sm_seconds=D(300)),
        hold("b", 900, shared=True, sm_seconds=D(1800)),
    ]
    r = attribute_hour(
        HOUR,
        [gpu()],
        held,
        owners({"a": "a", "b": "b"}),
        cost_model("4.00", shared_gpu_policy=policy),
    )
    assert by_team(r) == {"a": a, "b": b, IDLE: 1_000_000}


def test_price_change_at_noon_on_the_15th() -> None:
    held = [hold("p")]
    before = attribute_hour(
        utc("2026-11-15T11:00:00Z"), [gpu()], held, owners({"p": "a"}), cost_model()
    )
    after = attribute_hour(
        utc("2026-11-15T12:00:00Z"), [gpu()], held, owners({"p": "a"}), cost_model()
    )
    assert (by_team(before), by_team(after)) == ({"a": 2_500_000}, {"a": 2_200_000})


def test_back_dated_change_reprices_exactly_the_hours_it_covers() -> None:
    old = cost_model()
    raw = old.model_dump(mode="json")
    raw["versions"].append(
        {
            "effective_from": "2026-11-10T05:00:00Z",  # back-dated
            "prices": [{"model": H100, "hourly": "3.00"}],
        }
    )
    new = parse(raw)
    held = [hold("p")]
    for hour, want_old, want_new in (
        ("2026-11-10T04:00:00Z", 2_500_000, 2_500_000),
        ("2026-11-10T05:00:00Z", 2_500_000, 3_000_000),
        ("2026-11-15T12:00:00Z", 2_200_000, 2_200_000),
    ):
        at = utc(hour)
        assert by_team(attribute_hour(at, [gpu()], held, owners({"p": "a"}), old)) == {
            "a": want_old
        }
        assert by_team(attribute_hour(at, [gpu()], held, owners({"p": "a"}), new)) == {
            "a": want_new
        }


def test_unlabelled_pod_is_unallocated() -> None:
    r = attribute_hour(HOUR, [gpu()], [hold("orphan")], owners({}), cost_model())
    assert by_team(r) == {UNALLOCATED: 2_500_000}


def test_spot_and_on_demand_nodes() -> None:
    # spot: 2.50 with 60 % off = 1.00
    gpus = [gpu("GPU-od"), gpu("GPU-spot", pool="spot")]
    held = [hold("a", uuid="GPU-od"), hold("b", uuid="GPU-spot")]
    r = attribute_hour(HOUR, gpus, held, owners({"a": "a", "b": "b"}), cost_model())
    assert by_team(r) == {"a": 2_500_000, "b": 1_000_000}


def test_a_20_minute_scrape_gap_is_idle_not_allocated() -> None:
    # held for the 40 minutes we saw; the GPU existed all hour: 2.50 x 2/3 allocated
    r = attribute_hour(HOUR, [gpu()], [hold("p", 2400)], owners({"p": "a"}), cost_model())
    assert by_team(r) == {"a": 1_666_667, IDLE: 833_333}


@pytest.mark.parametrize(
    ("policy", "expected_idle"),
    # two GPUs at 2.50 = 5.00; a holds 1.25 (half of one), b holds 2.50: idle 1.25
    [
        ("separate", {IDLE: 1_250_000}),
        ("weighted", {"a": 416_667, "b": 833_333}),  # by allocated 1.25 : 2.50 = 1 : 2
        ("even", {"a": 625_000, "b": 625_000}),
    ],
)
def test_idle_under_each_policy(policy: str, expected_idle: dict[str, int]) -> None:
    gpus = [gpu("GPU-1"), gpu("GPU-2")]
    held = [hold("a", 1800, uuid="GPU-1"), hold("b", 3600, uuid="GPU-2")]
    r = attribute_hour(
        HOUR, gpus, held, owners({"a": "a", "b": "b"}), cost_model(idle_policy=policy)
    )
    idle = {line.team: line.idle for line in r.lines if line.idle}
    assert idle == expected_idle
    assert r.total() == r.fleet_cost == 5_000_000


def test_unpriced_models_are_an_error_naming_every_one() -> None:
    gpus = [
        GpuHour("c1", "n", "GPU-9", "NVIDIA B200", None, D(3600)),
        GpuHour("c1", "n", "GPU-8", "NVIDIA L4", None, D(3600)),
        gpu("GPU-1"),
    ]
    with pytest.raises(MissingPrices) as info:
        attribute_hour(HOUR, gpus, [], owners({}), cost_model())
    assert info.value.models == ["NVIDIA B200", "NVIDIA L4"]  # the priced H100 is not named


holding = st.builds(
    lambda g, p, s, b, sm, shared, c, m: Holding(
        f"GPU-{g}",
        "ns",
        f"p{p}",
        "main",
        D(s),
        None if b is None else D(min(b, s)),  # None: no utilisation series
        D(sm),
        shared,
        c if c else None,
        m if c else None,
        cluster="c1",
    ),
    st.integers(0, 3),
    st.integers(0, 5),
    st.integers(0, 3600),
    st.none() | st.integers(0, 3600),
    st.integers(0, 3600),
    st.booleans(),
    st.integers(0, 7),
    st.integers(1, 8),
)


@settings(max_examples=150, deadline=None)
@given(
    present=st.lists(st.integers(0, 3600), min_size=4, max_size=4),
    held=st.lists(holding, max_size=12),
    price=st.sampled_from(["2.50", "0.333333", "7", "1234.567891"]),
    basis=st.sampled_from(["compute", "memory"]),
    shared=st.sampled_from(["equal", "usage"]),
    idle=st.sampled_from(["separate", "weighted", "even"]),
)
def test_attributed_plus_idle_is_fleet_cost_every_hour(
    present: list[int], held: list[Holding], price: str, basis: str, shared: str, idle: str
) -> None:
    gpus = [gpu(f"GPU-{i}", p) for i, p in enumerate(present)]
    model = cost_model(price, mig_share_basis=basis, shared_gpu_policy=shared, idle_policy=idle)
    r = attribute_hour(HOUR, gpus, held, owners({"p0": "a", "p1": "b", "p2": "a"}), model)
    assert r.total() == r.fleet_cost  # attribute_hour also raises InvariantBroken itself
    for line in r.lines:
        assert line.allocated >= 0 and line.idle >= 0
        assert 0 <= line.used <= line.used + line.waste <= line.allocated
    measured = {(h.namespace, h.pod) for h in held if h.busy_share_seconds is not None}
    for line in r.lines:  # what is not measured is the allocated cost of unmeasured holdings
        if line.pod and not any(h.pod == line.pod for h in held if h.busy_share_seconds is None):
            assert line.used + line.waste == line.allocated
        if line.pod and (line.namespace, line.pod) not in measured:
            assert line.used == line.waste == 0


@pytest.mark.parametrize("policy", ["separate", "weighted", "even"])
def test_lost_gpu_time_stays_idle_and_unavailable_whatever_the_policy(policy: str) -> None:
    # GPU-1 lost 20 minutes while p held it: p charged 40 minutes (the ingest cut the lost time
    # out of its share): 2.50 x 2400/3600 = 1.666667; the lost 20 minutes: 0.833333, 1/3 h.
    # GPU-2 unheld for the hour: 2.50 of free idle capacity, which the policy may spread
    lost = GpuHour("c1", "node-1", "GPU-1", H100, None, D(3600), lost_seconds=D(1200))
    r = attribute_hour(
        HOUR,
        [lost, gpu("GPU-2")],
        [hold("p", 2400, busy=1200)],
        owners({"p": "a"}),
        cost_model(idle_policy=policy),
    )
    idle = [line for line in r.lines if line.team == IDLE]
    team = [line for line in r.lines if line.team == "a"]
    assert [(line.unavailable, line.unavailable_gpu_hours) for line in idle] == [(833_333, 333_333)]
    assert team[0].allocated == 1_666_667
    if policy == "separate":  # one __idle__ line for node-1: lost time + GPU-2's free hour
        assert [(line.idle, line.gpu_hours) for line in idle] == [(3_333_333, 1_333_333)]
        assert team[0].idle == 0
    else:  # the free hour moves onto the team's line; the lost time does not
        assert [(line.idle, line.gpu_hours) for line in idle] == [(833_333, 333_333)]
        assert team[0].idle == 2_500_000
    assert r.total() == r.fleet_cost == 5_000_000


def test_gpu_hours_follow_the_mig_basis_and_add_up() -> None:
    # 3g.40gb (3 of 7 compute, 4 of 8 memory slices) held all hour at 2.80: compute basis
    # 0.428571 GPU-hours, memory basis 0.5 (1.40 / 0.5 = 2.80 per GPU-hour, not 3.266670);
    # the idle line carries the rest of the GPU's hour
    for basis, held, cost in (("compute", 428_571, 1_200_000), ("memory", 500_000, 1_400_000)):
        r = attribute_hour(
            HOUR,
            [gpu()],
            [hold("m", D(3600) * 3 / 7, compute_slices=3, memory_slices=4, gi_id=1)],
            owners({"m": "a"}),
            cost_model("2.80", mig_share_basis=basis),
        )
        line = next(line for line in r.lines if line.team == "a")
        assert (line.gpu_hours, line.allocated) == (held, cost)
        assert sum(line.gpu_hours for line in r.lines) == 1_000_000


def test_a_line_names_its_price_only_where_all_its_gpus_were_charged_one() -> None:
    # one pod holds two GPUs of node-1, one on demand (2.50 an hour) and one in the spot pool
    # (2.50 less its 60 % discount = 1.00): one line, charged two prices -> no unit price;
    # another pod holds two on-demand GPUs: its line's unit price is 2.50 (micro-units)
    gpus = [gpu("GPU-1"), gpu("GPU-2", pool="spot"), gpu("GPU-3"), gpu("GPU-4")]
    holdings = [
        hold("mixed", uuid="GPU-1"),
        hold("mixed", uuid="GPU-2"),
        hold("plain", uuid="GPU-3"),
        hold("plain", uuid="GPU-4"),
    ]
    who = owners({"mixed": "a", "plain": "b"})
    result = attribute_hour(HOUR, gpus, holdings, who, cost_model())
    by_pod = {line.pod: line for line in result.lines if line.team != IDLE}
    assert by_pod["mixed"].allocated == 2_500_000 + 1_000_000
    assert by_pod["mixed"].unit_price is None
    assert by_pod["plain"].unit_price == 2_500_000
    assert [line.key for line in result.lines] == sorted(line.key for line in result.lines)
