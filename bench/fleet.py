"""The benches' fleets: the realistic one and the constant one ("best case").

Every ingest bench (bench/rollup_month.py, bench/rollup_scale.py, bench/costsvc_rollup.py,
bench/serve_ingest.py) feeds the cost service one of these, in the form Prometheus stores
scraped data (each series with its target's ``job``/``instance``, each target's ``up``, samples
on its target's scrape schedule: Prometheus aligns scrape timestamps to it within
``--scrape.timestamp-tolerance``, 2 ms by default, cmd/prometheus/main.go, and spreads its
targets over the interval, each at its own offset: bench/tsdb_block.py ``offset``; a fleet
whose targets all scraped on the minute would put a sample on every hour's edge):

**Realistic** (:func:`realistic`, seeded: ``SEED``; the same arguments give the same fleet):

- GPUs on nodes of 8 (one exporter target per node), H100s; 1 % of them (at least one) in MIG
  mode, the rest held whole by one pod each or time-sliced (``REPLICAS`` replicas, the pods
  left over spread over them), as the constant fleet splits them;
- **utilisation changes at every sample**: ``DCGM_FI_DEV_GPU_UTIL`` per whole GPU is a
  bounded random walk of integer percent (steps of -6..+6, reflected at 0 and 100), each MIG
  instance's ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` a random walk of ratios (3 decimals);
- **SM time per container changes at every sample**: ``gpu_container_sm_utilization_ratio``
  of every container (whole, time-sliced, MIG) is a random walk within its share, in the
  form our exporter publishes it (the mean of NVML's integer percents over a collection, / 100:
  floats of full precision, not short decimals);
- **5 % of pods end each hour and others start**: each holding slot runs a sequence of pods,
  lifetimes drawn from an exponential distribution (mean ``1 / CHURN`` hours, at least 10
  minutes), the next pod starting 0-10 minutes after (mid-hour, mostly): the replica or GPU
  is idle in between. A pod's series (its share, SM time, ``kube_pod_labels``) start at its
  first scrape and end with a staleness marker at the scrape after its last, as Prometheus
  writes them;
- **time-sliced holders come and go within hours**: ``SHORT_SLOTS`` of the time-sliced slots
  run short jobs (mean ``SHORT_HOURS`` hours, gaps up to 30 minutes); the other slots' mean
  lifetime is set so that the fleet's pods end at ``CHURN`` per hour overall;
- **1 % of pods are relabelled per day** (``RELABEL``): their ``kube_pod_labels`` series ends
  and one with a new ``label_version`` starts, at a random scrape;
- **MIG instances are re-created once a day** on the MIG GPUs: at a seeded time of each day,
  each MIG GPU's instances (alternately 3g.40gb + 2g.20gb + 2 x 1g.10gb and 4g.40gb + 2g.20gb +
  1g.10gb) go away with their holders' pods and, 2 minutes later, the other layout comes up with
  new pods;
- each GPU's energy counter and ``gpu_device_up`` as in the constant fleet.

Random walks are drawn once per kind (``TRACKS`` walks as long as the history) and each series
follows one of them from its own starting chunk, so a block writer (bench/tsdb_block.py) encodes
each 2-hour chunk of a walk once, however many series share it (the values each series takes
still change at every sample).

**Constant** (:func:`constant`, the best case): every
value fixed for the whole history (utilisation ``40 + i % 50``, SM ``0.6 x share``), no pod
ever starts, ends or is relabelled, no MIG.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.series import CHUNK, TRACKS, Grid, Spec, Walks, _const, _labels, _walks

H100 = "NVIDIA H100 80GB HBM3"
SEED = 29
CHURN = 0.05  # pods ending per pod and hour
RELABEL = 0.01  # relabels per pod and day
SHORT_SLOTS = 0.03  # of the time-sliced slots: short jobs
SHORT_HOURS = 1.5  # their mean lifetime
MIG_SHARE = 0.01  # of the GPUs: in MIG mode
SM_SAMPLES = 7  # NVML's per-process samples in one collection of the exporter
LAYOUTS = (
    (("3g.40gb", 3, 4), ("2g.20gb", 2, 2), ("1g.10gb", 1, 1), ("1g.10gb", 1, 1)),
    (("4g.40gb", 4, 4), ("2g.20gb", 2, 2), ("1g.10gb", 1, 1)),
)


def _split(gpus: int, pods: int) -> tuple[int, int, int]:
    """(GPUs held whole, time-sliced GPUs, pods per time-sliced GPU), as the constant fleet
    has always split them."""
    whole = min(gpus, max(0, gpus - (pods - gpus) // 10)) if pods > gpus else gpus
    shared_gpus = gpus - whole
    per_gpu = max(1, -(-(pods - whole) // shared_gpus)) if shared_gpus else 0
    return whole, shared_gpus, per_gpu


def target(i: int) -> dict[str, str]:
    return {"job": "gpu-exporter", "instance": f"node-{i // 8}:9400"}


def gpu_labels(i: int) -> dict[str, str]:
    return {
        "UUID": f"GPU-{i:05d}",
        "modelName": H100,
        "Hostname": f"node-{i // 8}",
        "gpu": str(i % 8),
        **target(i),
    }


KSM = {"job": "kube-state-metrics", "instance": "kube-state-metrics:8080"}
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"


def _fixed(grid: Grid, gpus: int) -> list[Spec]:
    """What both fleets share: each GPU's ``gpu_device_up`` and energy counter, the targets'
    ``up``."""
    out = []
    t0 = grid.start_ms
    for i in range(gpus):
        out.append(_const(grid, "gpu_device_up", gpu_labels(i), 1))
        per_ms = 200 + i % 300  # mW = mJ/s: mJ per ms (integers: exact as float)
        out.append(
            Spec(
                _labels(ENERGY, gpu_labels(i)),
                0,
                grid.n - 1,
                lambda t, r=per_ms: float(10**12 + r * (t - t0)),
                lambda c, r=per_ms: ("energy", r, c),
            )
        )
    for k in range(-(-gpus // 8)):
        out.append(_const(grid, "up", target(8 * k), 1))
    out.append(_const(grid, "up", KSM, 1))
    return out


def constant(gpus: int, pods: int, grid: Grid) -> list[Spec]:
    """The best case: every value fixed for the whole history, no churn (module docstring)."""
    whole, _, per_gpu = _split(gpus, pods)
    out = _fixed(grid, gpus)
    for i in range(gpus):
        out.append(_const(grid, "DCGM_FI_DEV_GPU_UTIL", gpu_labels(i), 40 + i % 50))
    for p in range(pods):
        if p < whole:
            g, share = p, 1.0
        else:
            g, share = whole + (p - whole) // per_gpu, 1.0 / per_gpu
        holder = {
            **gpu_labels(g),
            "namespace": f"team-{p % 40}",
            "pod": f"pod-{p}",
            "container": "main",
        }
        out.append(
            _const(grid, "gpu_allocation_share", {**holder, "resource": "nvidia.com/gpu"}, share)
        )
        if p >= whole:
            out.append(_const(grid, "gpu_container_sm_utilization_ratio", holder, share * 0.6))
        pod = {"namespace": f"team-{p % 40}", "pod": f"pod-{p}", "label_team": f"team-{p % 40}"}
        out.append(_const(grid, "kube_pod_labels", {**pod, **KSM}, 1))
    return out


@dataclass
class Churn:
    """What the realistic fleet did, for the bench's report."""

    pods: int = 0  # pods that ever ran
    ended: int = 0  # of them, ended within the history
    relabels: int = 0
    recreations: int = 0  # MIG GPUs re-created
    hours: float = 0.0
    concurrent: int = 0  # holding slots

    def per_hour(self) -> float:
        """Pods ended per hour, as a share of the slots."""
        return self.ended / self.hours / self.concurrent if self.hours and self.concurrent else 0.0


@dataclass
class _Slot:
    """A place a pod can hold: a whole GPU, a time-slice replica or a MIG instance."""

    gpu: int
    labels: dict[str, str]  # the device unit's labels (GPU, + GPU_I_ID/GPU_I_PROFILE)
    share: float
    resource: str
    mean_hours: float
    gap_minutes: float
    available: list[tuple[int, int]] = field(default_factory=list)  # grid index spans


def realistic(gpus: int, pods: int, grid: Grid, seed: int = SEED) -> tuple[list[Spec], Churn]:
    """The realistic fleet over ``grid`` (module docstring), and what churned in it."""
    rng = random.Random(seed)
    n = grid.n
    per_hour = 3_600_000 // grid.step_ms
    util = _walks(rng, n, "util", 0, 100, 6, 0)
    ratio = _walks(rng, n, "ratio", 0, 1, 0.04, 3)
    n_mig = max(1, round(gpus * MIG_SHARE)) if gpus > 1 else 0
    plain = gpus - n_mig
    mig_slots = 4 * n_mig
    whole, shared_gpus, per_gpu = _split(plain, max(plain, pods - mig_slots))
    out = _fixed(grid, gpus)
    churn = Churn(hours=(n - 1) / per_hour)
    slots: list[_Slot] = []
    for i in range(plain):
        out.append(
            util.spec(
                grid,
                "DCGM_FI_DEV_GPU_UTIL",
                gpu_labels(i),
                rng.randrange(TRACKS),
                rng.randrange(util.chunks),
            )
        )
    short = SHORT_SLOTS * shared_gpus * per_gpu
    total_slots = whole + shared_gpus * per_gpu + mig_slots
    # the other slots' lifetimes, so that the fleet's pods end at CHURN per hour overall: a
    # slot ends a pod every (mean lifetime, at least 10 minutes) + (mean gap) hours
    ends = CHURN * total_slots - short / (_mean_life(SHORT_HOURS) + 0.25)
    rest_rate = 1 / _life_for(max(1e-3, ends / (total_slots - short)), 1 / 12)
    for i in range(whole):
        slots.append(
            _Slot(i, gpu_labels(i), 1.0, "nvidia.com/gpu", 1 / rest_rate, 10, [(0, n - 1)])
        )
    for g in range(shared_gpus):
        i = whole + g
        for _ in range(per_gpu):
            is_short = rng.random() < SHORT_SLOTS
            slots.append(
                _Slot(
                    i,
                    gpu_labels(i),
                    1 / per_gpu,
                    "nvidia.com/gpu",
                    SHORT_HOURS if is_short else 1 / rest_rate,
                    30 if is_short else 10,
                    [(0, n - 1)],
                )
            )
    day = 24 * per_hour
    for m in range(n_mig):
        i = plain + m
        at = rng.randrange(day)  # this GPU's re-creation time of day
        edges = [0] + [k for k in range(at, n, day) if k > 0] + [n]
        for d, (a, b) in enumerate(itertools.pairwise(edges)):
            churn.recreations += 1 if a > 0 else 0
            layout = LAYOUTS[d % 2]
            up = a + (2 * per_hour // 60 if a > 0 else 0)  # 2 minutes without instances
            if up >= b:
                continue
            for gi, (profile, compute, memory) in enumerate(layout, 1):
                unit = {**gpu_labels(i), "GPU_I_ID": str(gi), "GPU_I_PROFILE": profile}
                last = b - 1
                stale = b < n
                out.append(
                    _const(
                        grid,
                        "gpu_mig_instance_info",
                        {**unit, "compute_slices": str(compute), "memory_slices": str(memory)},
                        1,
                        up,
                        last,
                        stale,
                    )
                )
                out.append(
                    ratio.spec(
                        grid,
                        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                        unit,
                        rng.randrange(TRACKS),
                        rng.randrange(ratio.chunks),
                        up,
                        last,
                        stale,
                    )
                )
                slots.append(
                    _Slot(
                        i,
                        unit,
                        compute / 7,
                        f"nvidia.com/mig-{profile}",
                        1 / rest_rate,
                        10,
                        [(up, last)],
                    )
                )
    churn.concurrent = total_slots  # at any time (a MIG GPU's slots are re-made daily)
    for s_i, slot in enumerate(slots):
        out.extend(_pods(rng, grid, slot, s_i, ratio, churn))
    return out, churn


def _mean_life(mean: float, floor: float = 1 / 6) -> float:
    """The mean of max(an exponential lifetime of this mean, ``floor``) hours."""
    return floor + mean * math.exp(-floor / mean)


def _life_for(rate: float, gap: float) -> float:
    """The exponential mean lifetime (hours) whose pods, with ``gap`` hours between, end at
    ``rate`` per hour."""
    mean = 1 / rate
    for _ in range(20):  # a fixed point: _mean_life is mean + a little
        mean = max(1e-3, 1 / rate - gap - (_mean_life(mean) - mean))
    return mean


def _pods(
    rng: random.Random, grid: Grid, slot: _Slot, s_i: int, ratio: Walks, churn: Churn
) -> Iterator[Spec]:
    """The pods one slot runs over its available spans."""
    per_hour = 3_600_000 // grid.step_ms
    n = grid.n
    team = f"team-{s_i % 40:02d}"
    for a, b in slot.available:
        # the slot's first pod started before the history (its age drawn like a lifetime)
        k = a - int(rng.expovariate(1 / slot.mean_hours) * per_hour) if a == 0 else a
        gen = 0
        while k <= b:
            life = max(per_hour // 6, int(rng.expovariate(1 / slot.mean_hours) * per_hour))
            first, last = max(k, a), min(k + life - 1, b)
            gen += 1
            if last >= first:
                churn.pods += 1
                ended = k + life - 1 <= b and last < n - 1
                churn.ended += 1 if ended or last < b else 0
                stale = last < n - 1
                pod = f"{team}-job-{s_i}-{gen}"
                who = {"namespace": team, "pod": pod, "container": "main"}
                holder = {**slot.labels, **who}
                yield _const(
                    grid,
                    "gpu_allocation_share",
                    {**holder, "resource": slot.resource},
                    slot.share,
                    first,
                    last,
                    stale,
                )
                yield _sm(grid, ratio, holder, slot.share, rng, first, last, stale)
                yield from _pod_labels(rng, grid, team, pod, first, last, stale, churn)
            k += life + int(rng.uniform(0, slot.gap_minutes) * per_hour / 60) + 1


def _sm(
    grid: Grid,
    ratio: Walks,
    holder: dict[str, str],
    share: float,
    rng: random.Random,
    first: int,
    last: int,
    stale: bool,
) -> Spec:
    """A container's SM utilisation: a ratio walk within its share, in the exporter's form —
    the mean of NVML's integer percents over a collection's :data:`SM_SAMPLES` samples, / 100
    (exporter/nvml/boundary.py ``process_sm_utilization``): a float of full precision."""
    j, phase = rng.randrange(TRACKS), rng.randrange(ratio.chunks)
    walk, walk_array = ratio.values[j], ratio.arrays[j]
    length = len(walk)
    start, step = grid.start_ms, grid.step_ms

    def value(t: int) -> float:
        mean = walk[((t - start) // step + phase * CHUNK) % length] * share
        return round(mean * 100 * SM_SAMPLES) / SM_SAMPLES / 100

    def array(lo: int, hi: int) -> np.ndarray:  # value's arithmetic, element by element
        mean = walk_array[(np.arange(lo, hi + 1) + phase * CHUNK) % length] * share
        out: np.ndarray = np.round(mean * 100 * SM_SAMPLES) / SM_SAMPLES / 100
        return out

    def key(c: int) -> Any:
        return ("sm", share, j, (c + phase) % ratio.chunks)

    return Spec(
        _labels("gpu_container_sm_utilization_ratio", holder),
        first,
        last,
        value,
        key,
        stale,
        array,
    )


def _pod_labels(
    rng: random.Random,
    grid: Grid,
    team: str,
    pod: str,
    first: int,
    last: int,
    stale: bool,
    churn: Churn,
) -> Iterator[Spec]:
    """``kube_pod_labels`` over the pod's life, a new series at each relabel."""
    per_day = 24 * 3_600_000 // grid.step_ms
    edges = [first]
    k = first
    while True:
        k += int(rng.expovariate(RELABEL) * per_day) + 1
        if k > last:
            break
        edges.append(k)
        churn.relabels += 1
    for v, (a, b) in enumerate(itertools.pairwise([*edges, last + 1])):
        labels = {
            "namespace": team,
            "pod": pod,
            "label_team": team,
            "label_version": f"v{v}",
            **KSM,
        }
        yield _const(grid, "kube_pod_labels", labels, 1, a, b - 1, stale or b <= last)


def describe(specs: list[Spec]) -> str:
    """Series and samples of a fleet, for the bench's report."""
    samples = sum(s.last - s.first + 1 for s in specs)
    return f"{len(specs):,} series, {samples / 1e6:,.1f} M samples"
