"""The exporter's integrals at collection resolution (exporter/integrals.py): each
counter is re-derived here from the gauges the same exposition published at every collection,
by the rule in docs/metrics.md — an instant's reading holds until the next collection, a
container's SM utilisation covers the interval just ended, a gap longer than two intervals
counts as one."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.integrals import KEEP, STARTED, Integrals
from exporter.render.exposition import render_openmetrics, render_text
from tests.exporter.helpers import samples
from tests.exporter.test_pod_resources import H100, Node, pod

SHARE_S = "gpu_allocation_share_seconds_total"
MEMORY_S = "gpu_allocation_memory_share_seconds_total"
BUSY_S = "gpu_allocation_busy_share_seconds_total"
UNMEASURED_S = "gpu_allocation_unmeasured_share_seconds_total"
SM_S = "gpu_container_sm_seconds_total"
DEVICE_S = "gpu_device_seconds_total"


def started(integrals: Integrals) -> dict[tuple[str, str], str]:
    """Each series' start (its :data:`STARTED` label), by (family, its other labels)."""
    out = {}
    for f in integrals.families():
        for line in f.lines:
            labels = line.split("{", 1)[1].split("}", 1)[0]
            rest, _, start = labels.rpartition(f',{STARTED}="')
            out[(f.name, rest)] = start.removesuffix('"')
    return out


def totals(integrals: Integrals) -> dict[tuple[str, str], float]:
    """Each series' total, by (family, its labels but its start)."""
    return {
        (f.name, line.split("{", 1)[1].split("}", 1)[0].rpartition(f',{STARTED}="')[0]): float(
            line.rsplit(" ", 1)[1]
        )
        for f in integrals.families()
        for line in f.lines
    }


def test_an_instants_reading_holds_until_the_next_collection() -> None:
    i = Integrals(5.0, {"x_seconds_total": "x"})
    key = ("x_seconds_total", 'a="1"')
    i.advance(100.0, {key: 0.5})
    assert totals(i) == {key: 0.0}  # first seen: nothing held yet
    i.advance(105.0, {key: 0.25})
    assert totals(i) == {key: 0.5 * 5}  # the first reading held 5 s
    i.advance(112.0, {key: 1.0})
    assert totals(i) == {key: 0.5 * 5 + 0.25 * 7}  # 7 s: within two intervals, held to here
    i.advance(140.0, {key: 0.0})
    # 28 s is longer than two intervals: the reading held one interval, not the silence
    assert totals(i) == {key: 0.5 * 5 + 0.25 * 7 + 1.0 * 5}


def test_a_reading_over_the_interval_just_ended_covers_it() -> None:
    i = Integrals(5.0, {"sm_seconds_total": "sm"})
    key = ("sm_seconds_total", 'c="a"')
    i.advance(0.0, {}, {key: 0.9})  # before any interval: nothing to cover
    i.advance(5.0, {}, {key: 0.2})
    i.advance(9.0, {}, {key: 0.5})
    assert totals(i) == {key: 0.2 * 5 + 0.5 * 4}


def test_an_ended_series_stays_at_its_total_then_starts_again_as_a_new_series() -> None:
    wall = [1_764_165_600.0]  # the wall clock: 2025-11-26 14:00:00 UTC
    i = Integrals(5.0, {"x_seconds_total": "x"}, clock=lambda: wall[0])
    key = ("x_seconds_total", 'a="1"')
    i.advance(0.0, {key: 1.0})
    assert started(i) == {key: "1764165600.000"}  # when its total started at 0
    wall[0] += 5.25
    i.advance(5.0, {})  # ended: its last reading held to this collection
    assert totals(i) == {key: 5.0}
    t = 5.0
    while t + 5 <= KEEP:
        t += 5
        wall[0] += 5
        i.advance(t, {})
        assert totals(i) == {key: 5.0}  # published, unchanged, while kept
        assert started(i) == {key: "1764165600.000"}  # the same series
    i.advance(t + 5, {})
    assert totals(i) == {}  # dropped
    wall[0] += 10
    i.advance(t + 10, {key: 1.0})  # back: from 0, a new series (its own start)
    assert totals(i) == {key: 0.0}
    assert started(i) == {key: f"{wall[0]:.3f}"} != {key: "1764165600.000"}


def test_a_new_exporter_process_starts_every_series_anew() -> None:
    """Its totals start at 0 again, as new series: no series' values ever go down."""
    key = ("x_seconds_total", 'a="1"')
    first = Integrals(5.0, {"x_seconds_total": "x"}, clock=lambda: 1_764_165_600.0)
    first.advance(0.0, {key: 1.0})
    first.advance(5.0, {key: 1.0})
    restarted = Integrals(5.0, {"x_seconds_total": "x"}, clock=lambda: 1_764_165_607.5)
    restarted.advance(0.0, {key: 1.0})
    assert totals(first) == {key: 5.0} and totals(restarted) == {key: 0.0}
    lines = [line for i in (first, restarted) for f in i.families() for line in f.lines]
    assert len(set(line.split("{", 1)[1].split("}", 1)[0] for line in lines)) == 2
    assert started(restarted) == {key: "1764165607.500"}


def test_a_series_with_no_other_labels_has_its_start_alone() -> None:
    i = Integrals(5.0, {"x_seconds_total": "x"}, clock=lambda: 1.0)
    i.advance(0.0, {("x_seconds_total", ""): 1.0})
    (family,) = i.families()
    assert family.lines[0].startswith('x_seconds_total{started="1.000"} ')


def test_the_totals_are_counters_in_both_formats() -> None:
    i = Integrals(5.0, {"x_seconds_total": "x help"})
    a, b = ("x_seconds_total", 'a="1"'), ("x_seconds_total", 'a="2"')
    i.advance(0.0, {a: 1.0, b: 2.0})
    i.advance(5.0, {a: 1.0, b: 2.0})
    om = samples(render_openmetrics(i.families()).decode())  # the strict parser
    assert {s.labels["a"]: s.value for s in om["x_seconds_total"]} == {"1": 5.0, "2": 10.0}
    text = render_text(i.families()).decode()
    assert {f.name: f.type for f in parse_text(text)} == {"x_seconds": "counter"}


def test_the_exporters_counters_are_the_integrals_of_its_gauges(tmp_path: Path) -> None:
    """Three GPUs: gpu0 held whole by pod w at a changing utilisation and lost at 32 s; gpu1
    time-sliced (4 replicas) by pods a (two replicas) and b, with their SM use; gpu2 held by u,
    its utilisation not read.
    Every counter is the integral of what the gauges said, collection by collection."""
    gpus = [
        {
            **H100,
            "lost_at": 32,
            "utilization": {"gpu": {"steps": [[0, 20], [8, 80], [21, 50]], "period": 60}},
            "processes": [{"pid": 11, "sm_util": 40}],
        },
        {
            **H100,
            "time_slicing_replicas": 4,
            "processes": [{"pid": 101, "sm_util": 50}, {"pid": 201, "sm_util": 10}],
        },
        {**H100, "unsupported": ["utilization"]},
    ]
    pods = [
        pod("w", ["gpu0"], pids=(11,)),
        pod("a", ["gpu1::0", "gpu1::1"], "nvidia.com/gpu.shared", (101,)),
        pod("b", ["gpu1::2"], "nvidia.com/gpu.shared", (201,)),
        pod("u", ["gpu2"]),
    ]
    node = Node({"gpus": gpus, "pods": pods}, tmp_path)
    try:
        # (advance before each collection: a 20 s gap, longer than two 5 s intervals, counts 5)
        steps = [0.0, 5.0, 5.0, 7.0, 20.0, 5.0, 5.0, 5.0, 3.0]
        seen = []
        for step in steps:
            m = node.collect(step)
            seen.append((node.clock(), m))
    finally:
        node.close()
    expected: dict[tuple[str, str], float] = {}

    def add(name: str, who: str, amount: float) -> None:
        expected[(name, who)] = expected.get((name, who), 0.0) + amount

    for (t0, before), (t1, after) in itertools.pairwise(seen):
        held = t1 - t0 if t1 - t0 <= 10 else 5.0
        up = {s.labels["gpu"]: s.value for s in before["gpu_device_up"]}
        for gpu, v in up.items():
            add(DEVICE_S, f"{gpu}/up", v * held)
            add(DEVICE_S, f"{gpu}/down", (1 - v) * held)
        busy = {  # the held GPU's utilisation as the cost service prices use
            s.labels["gpu"]: s.value for s in before.get("DCGM_FI_PROF_GR_ENGINE_ACTIVE", [])
        }
        for s in before.get("DCGM_FI_DEV_GPU_UTIL", []):
            busy.setdefault(s.labels["gpu"], s.value / 100)
        for s in before["gpu_allocation_share"]:
            who, gpu = s.labels["pod"], s.labels["gpu"]
            share = s.value * up[gpu]
            add(SHARE_S, who, share * held)
            add(MEMORY_S, who, share * held)  # (replicas and whole GPUs: memory share = share)
            if gpu in busy and up[gpu]:
                add(BUSY_S, who, share * busy[gpu] * held)
            elif share:  # (published from its first nonzero reading on)
                add(UNMEASURED_S, who, share * held)
        for s in after.get("gpu_container_sm_utilization_ratio", []):
            add(SM_S, s.labels["pod"], s.value * held)

    last = seen[-1][1]
    got: dict[tuple[str, str], float] = {}
    for name in (SHARE_S, MEMORY_S, BUSY_S, UNMEASURED_S, SM_S):
        for s in last.get(name, []):
            got[(name, s.labels["pod"])] = s.value
    for s in last[DEVICE_S]:
        got[(DEVICE_S, f"{s.labels['gpu']}/{s.labels['state']}")] = s.value
    for key in got.keys() - expected.keys():
        expected[key] = 0.0
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-9)
    # the rule's effects, said plainly: the lost GPU's time stopped counting for w, and was
    # counted down; the time-sliced holders' SM seconds are their own, not the GPU's
    assert got[(DEVICE_S, "0/down")] > 0 and got[(DEVICE_S, "2/down")] == 0
    assert got[(SHARE_S, "w")] < got[(DEVICE_S, "2/up")]
    assert got[(SHARE_S, "a")] == pytest.approx(0.5 * got[(DEVICE_S, "1/up")])
    assert 0 < got[(BUSY_S, "w")] < got[(SHARE_S, "w")] - got.get((UNMEASURED_S, "w"), 0)
    # u's use was never read: all its time unmeasured; w's, a's and b's always read: none
    assert got[(UNMEASURED_S, "u")] == got[(SHARE_S, "u")] > 0
    assert {who for name, who in got if name == UNMEASURED_S} == {"u"}
    shares = {s.labels["pod"]: s.labels["share"] for s in last[SHARE_S]}
    assert shares == {"w": "1", "a": "0.5", "b": "0.25", "u": "1"}  # the share they integrate
    assert got[(SM_S, "a")] == pytest.approx(5 * got[(SM_S, "b")])


def test_a_sparse_familys_series_starts_at_its_first_nonzero_reading() -> None:
    i = Integrals(
        5.0, {"x_seconds_total": "x"}, clock=lambda: 0.0, sparse=frozenset({"x_seconds_total"})
    )
    key = ("x_seconds_total", 'a="1"')
    i.advance(0.0, {key: 0.0})
    i.advance(5.0, {key: 0.0})
    assert totals(i) == {}  # never nonzero: not published
    i.advance(10.0, {key: 0.5})
    assert totals(i) == {key: 0.0}  # from its first nonzero reading, at 0
    i.advance(15.0, {key: 0.0})
    i.advance(20.0, {key: 0.0})
    assert totals(i) == {key: 2.5}  # then published at every reading, zero ones too
