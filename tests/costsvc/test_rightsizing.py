"""The pure rightsizing rules (costsvc/advice/rightsizing.py) on hand-computed cases; the
workload of a pod (costsvc/rules/workloads.py) from owners and from names."""

from __future__ import annotations

from decimal import Decimal

import pytest

from costsvc.advice.rightsizing import Evidence, Fleet, Rules, advise
from costsvc.rules.mig import Geometry
from costsvc.rules.workloads import Workload, controller_of, workload_from_name, workload_of

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
L4 = "NVIDIA L4"
GB = 10**9
FLEET = Fleet(
    prices={H100: 2_500_000, A100: 1_800_000},
    memory_bytes={H100: 81_559 * 2**20, A100: 81_920 * 2**20},
)
WEEK = Decimal(168)


def ev(
    model: str = H100,
    hours: str = "168",
    share: str = "1",
    peak: int | None = 9 * GB,
    activity: str | None = "0.12",
    idle: str | None = "0.05",
) -> Evidence:
    return Evidence(
        gpu_model=model,
        device_hours=Decimal(hours),
        gpu_hours=Decimal(hours) * Decimal(share),
        memory_p95_bytes=peak,
        memory_peak_bytes=peak,
        activity_p95=None if activity is None else Decimal(activity),
        activity_source="profiling",
        idle_ratio=None if idle is None else Decimal(idle),
    )


def test_inference_on_a_whole_h100_fits_1g10gb() -> None:
    a = advise(ev(), FLEET, Rules(), WEEK)
    assert (a.action, a.target) == ("mig", "1g.10gb")
    # a whole H100 all week at 2.50/h = 1825.00 a month; 1/7 of it = 260.714286
    assert a.current_monthly == 1_825_000_000
    assert a.recommended_monthly == 260_714_286
    assert a.saving_monthly == 1_564_285_714  # (2.50 - 2.50/7) x 730, half-even
    assert a.target_share == Decimal(1) / 7


def test_memory_basis_bills_1g10gb_as_one_eighth() -> None:
    fleet = Fleet(FLEET.prices, FLEET.memory_bytes, mig_share_basis="memory")
    a = advise(ev(), fleet, Rules(), WEEK)
    assert (a.action, a.target) == ("mig", "1g.10gb")
    assert a.saving_monthly == 1_825_000_000 - 228_125_000  # 1825 x 7/8


def test_mig_shares_are_of_the_published_geometry() -> None:
    """The slices the GPUs' exporters published come first (costsvc/rules/mig.py), the
    per-model table's only where none was: a 14/16 GPU makes 1g.10gb 1/14, too small here."""
    fleet = Fleet(FLEET.prices, FLEET.memory_bytes, mig_geometry={H100: Geometry(14, 16)})
    a = advise(ev(), fleet, Rules(), WEEK)
    assert (a.action, a.target, a.target_share) == ("mig", "2g.20gb", Decimal(2) / 14)
    memory = Fleet(FLEET.prices, FLEET.memory_bytes, "memory", {H100: Geometry(14, 16)})
    assert advise(ev(), memory, Rules(), WEEK).target_share == Decimal(2) / 16


def test_a_workload_on_a_gpu_half_the_week_saves_half() -> None:
    a = advise(ev(hours="84"), FLEET, Rules(), WEEK)
    assert a.saving_monthly == 782_142_857  # 1564.285714 / 2, half-even


def test_training_that_needs_a_whole_gpu_keeps_it() -> None:
    a = advise(ev(peak=70 * GB, activity="0.95"), FLEET, Rules(), WEEK)
    assert a.action == "keep"
    assert a.saving_monthly == 0


def test_idle_statefulset_is_released() -> None:
    a = advise(ev(idle="0.90", activity="0.02"), FLEET, Rules(), WEEK)
    assert a.action == "release"
    assert a.saving_monthly == a.current_monthly == 1_825_000_000


def test_three_hours_of_data_is_not_enough() -> None:
    a = advise(ev(hours="3", idle="0.99"), FLEET, Rules(), WEEK)
    assert a.action == "insufficient"
    assert a.saving_monthly == 0


@pytest.mark.parametrize(
    ("peak", "activity", "idle"), [(None, "0.1", "0.1"), (GB, None, "0.1"), (GB, "0.1", None)]
)
def test_missing_series_never_recommend(
    peak: int | None, activity: str | None, idle: str | None
) -> None:
    a = advise(ev(peak=peak, activity=activity, idle=idle), FLEET, Rules(), WEEK)
    assert a.action == "insufficient"
    assert "no series" in a.reason


def test_peak_above_every_smaller_profile_is_kept() -> None:
    # 50 GB + 10 % > 4g.40gb's 40192 MiB; half a time-sliced H100 (40 GiB) is too small
    only_h100 = Fleet({H100: 2_500_000}, {H100: 81_559 * 2**20})
    a = advise(ev(peak=50 * GB, activity="0.20"), only_h100, Rules(), WEEK)
    assert a.action == "keep"
    assert a.saving_monthly == 0
    # with a cheaper 80 GB model in the fleet, a whole one of those fits
    cheaper = advise(ev(peak=50 * GB, activity="0.20"), FLEET, Rules(), WEEK)
    assert (cheaper.action, cheaper.target) == ("model", A100)


def test_time_slice_where_no_mig_profile_of_the_model() -> None:
    l4 = Fleet({L4: 800_000}, {L4: 23_034 * 2**20})
    a = advise(ev(model=L4, peak=4 * GB, activity="0.10"), l4, Rules(), WEEK)
    assert (a.action, a.target) == ("timeslice", "1/4")
    assert a.saving_monthly == 438_000_000  # 0.80 x 3/4 x 730


def test_cheaper_model_in_the_fleet() -> None:
    fleet = Fleet({H100: 2_500_000, L4: 800_000}, {H100: 81_559 * 2**20, L4: 23_034 * 2**20})
    # 20 GB + 10 % is more than 2g.20gb; 3g.40gb (3/7 x 2.50 = 1.071) and 1/2 (1.25) cost
    # more than a whole L4 (0.80)
    a = advise(ev(peak=20 * GB, activity="0.30"), fleet, Rules(), WEEK)
    assert (a.action, a.target) == ("model", L4)
    assert a.saving_monthly == (2_500_000 - 800_000) * 730
    busy = advise(ev(peak=20 * GB, activity="0.60"), fleet, Rules(), WEEK)
    assert busy.action != "model"  # too busy to move to a GPU of unknown speed


def test_a_workload_on_two_models_is_advised_per_model() -> None:
    on_h100 = advise(ev(hours="100"), FLEET, Rules(), WEEK)
    on_a100 = advise(ev(model=A100, hours="68"), FLEET, Rules(), WEEK)
    assert (on_h100.target, on_a100.target) == ("1g.10gb", "1g.10gb")
    # A100: 1.80 x 6/7 x 68 h x 730/168
    assert on_a100.saving_monthly == 455_877_551
    assert on_h100.saving_monthly == 931_122_449  # 2.50 x 6/7 x 100 x 730/168


def test_already_on_a_mig_slice_moves_down_only() -> None:
    a = advise(ev(share=str(Decimal(3) / 7)), FLEET, Rules(), WEEK)
    assert (a.action, a.target) == ("mig", "1g.10gb")
    big = advise(ev(share=str(Decimal(1) / 7)), FLEET, Rules(), WEEK)
    assert big.action == "keep"


def test_no_price_no_recommendation() -> None:
    a = advise(ev(model="NVIDIA B200"), FLEET, Rules(), WEEK)
    assert a.action == "insufficient"


# -- workloads ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("owner", "parents", "labels", "expected"),
    [
        (("ReplicaSet", "web-7d4b9c8f6"), {("ReplicaSet", "web-7d4b9c8f6"): ("Deployment", "web")},
         {}, Workload("Deployment", "web")),
        # the ReplicaSet not (yet) seen: its name less the pod-template-hash
        (("ReplicaSet", "web-7d4b9c8f6"), {}, {"pod-template-hash": "7d4b9c8f6"},
         Workload("Deployment", "web")),
        (("ReplicaSet", "web-7d4b9c8f6"), {}, {}, Workload("Deployment", "web")),
        (("ReplicaSet", "bare"), {("ReplicaSet", "bare"): None}, {},
         Workload("ReplicaSet", "bare")),
        (("Job", "nightly-29001120"), {("Job", "nightly-29001120"): ("CronJob", "nightly")}, {},
         Workload("CronJob", "nightly")),
        (("Job", "nightly-29001120"), {}, {}, Workload("CronJob", "nightly")),
        (("Job", "train"), {("Job", "train"): None}, {}, Workload("Job", "train")),
        (("StatefulSet", "db"), {}, {}, Workload("StatefulSet", "db")),
        (("DaemonSet", "agent"), {}, {}, Workload("DaemonSet", "agent")),
        (None, {}, {}, Workload("Pod", "the-pod")),
    ],
)  # fmt: skip
def test_workload_from_owners(
    owner: tuple[str, str] | None,
    parents: dict[tuple[str, str], tuple[str, str] | None],
    labels: dict[str, str],
    expected: Workload,
) -> None:
    assert workload_of("the-pod", owner, parents, labels) == expected


def test_controller_reference() -> None:
    refs = [
        {"kind": "Foo", "name": "x"},
        {"kind": "ReplicaSet", "name": "web-1", "controller": True},
    ]
    assert controller_of(refs) == ("ReplicaSet", "web-1")
    assert controller_of([]) is None
    assert controller_of(None) is None


@pytest.mark.parametrize(
    ("pod", "labels", "expected"),
    [
        ("web-7d4b9c8f6-x2k9p", {"pod-template-hash": "7d4b9c8f6"}, Workload("Deployment", "web")),
        ("web-7d4b9c8f6-x2k9p", {}, Workload("Deployment", "web")),
        ("nightly-29001120-7xq2z", {}, Workload("CronJob", "nightly")),
        ("db-0", {}, Workload("StatefulSet", "db")),
        ("kv-store-12", {}, Workload("StatefulSet", "kv-store")),
        ("train-x2k9p", {}, Workload("Controller", "train")),
        ("standalone", {}, Workload("Pod", "standalone")),
        ("has-vowels-abcde", {}, Workload("Pod", "has-vowels-abcde")),
    ],
)
def test_workload_from_pod_name(pod: str, labels: dict[str, str], expected: Workload) -> None:
    assert workload_from_name(pod, labels) == expected
