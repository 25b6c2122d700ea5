"""The series a bench's fleet is made of (bench/fleet.py, bench/fleet_dcgm.py,
bench/fleet_integrals.py) and the grid of sample times they lie on: each series' labels, the
span of its samples and its values, constant or following one of a few random walks shared by
many series (a block writer, bench/tsdb_block.py, encodes each chunk of a walk once)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

TRACKS = 61  # random walks per kind
CHUNK = 120  # samples per chunk (bench/tsdb_block.py)
Labels = tuple[tuple[str, str], ...]


def _stale() -> float:
    import struct

    # Prometheus' staleness marker: the NaN 0x7ff0000000000002 (model/value/value.go)
    found: float = struct.unpack(">d", bytes.fromhex("7ff0000000000002"))[0]
    return found


STALE_NAN = _stale()


@dataclass(frozen=True, slots=True)
class Spec:
    """One series: its labels (sorted, with ``__name__``), its samples at grid indices
    ``first..last`` (inclusive; a staleness marker at ``last + 1`` when ``stale``), and their
    values: ``value(t_ms)``; ``key(chunk index)``: what identifies the values of a whole
    chunk (series with equal keys share the chunk's bytes), None where nothing does;
    ``array(lo, hi)``, where given: the values at grid indices ``lo..hi`` at once (what
    bench/fleet_integrals.py integrates, and how bench/tsdb_block.py reads a series whose
    chunks no other shares)."""

    labels: Labels
    first: int
    last: int
    value: Callable[[int], float]
    key: Callable[[int], Any]
    stale: bool = False
    array: Callable[[int, int], np.ndarray] | None = None

    @property
    def name(self) -> str:
        return dict(self.labels)["__name__"]


@dataclass
class Grid:
    """Sample times: ``start_ms + k * step_ms`` for k in 0..n-1."""

    start_ms: int
    end_ms: int
    step_ms: int

    @property
    def n(self) -> int:
        return (self.end_ms - self.start_ms) // self.step_ms + 1

    def index(self, t_ms: int) -> int:
        return (t_ms - self.start_ms) // self.step_ms

    def time(self, k: int) -> int:
        return self.start_ms + k * self.step_ms


def _labels(name: str, labels: dict[str, str]) -> Labels:
    return tuple(sorted({**labels, "__name__": name}.items()))


def _const(
    grid: Grid,
    name: str,
    labels: dict[str, str],
    value: float,
    first: int = 0,
    last: int | None = None,
    stale: bool = False,
) -> Spec:
    return Spec(
        _labels(name, labels),
        first,
        grid.n - 1 if last is None else last,
        lambda t: value,
        lambda c: ("const", value),
        stale,
        lambda lo, hi: np.full(hi - lo + 1, value, dtype=np.float64),
    )


@dataclass
class Walks:
    """``TRACKS`` bounded random walks of one kind, each ``n`` samples (padded to whole
    chunks); a series follows walk ``j`` from chunk ``phase`` on."""

    values: list[list[float]]
    chunks: int
    kind: str
    arrays: list[np.ndarray] = field(default_factory=list)  # the same, for ``Spec.array``

    def __post_init__(self) -> None:
        self.arrays = [np.array(walk, dtype=np.float64) for walk in self.values]

    def spec(
        self,
        grid: Grid,
        name: str,
        labels: dict[str, str],
        j: int,
        phase: int,
        first: int = 0,
        last: int | None = None,
        stale: bool = False,
    ) -> Spec:
        walk = self.values[j % len(self.values)]
        walk_array = self.arrays[j % len(self.values)]
        length = len(walk)
        offset = phase * CHUNK
        start, step = grid.start_ms, grid.step_ms

        def value(t: int) -> float:
            return walk[((t - start) // step + offset) % length]

        def array(lo: int, hi: int) -> np.ndarray:
            return walk_array[(np.arange(lo, hi + 1) + offset) % length]

        def key(c: int) -> Any:
            return (self.kind, j % len(self.values), (c + phase) % self.chunks)

        return Spec(
            _labels(name, labels),
            first,
            grid.n - 1 if last is None else last,
            value,
            key,
            stale,
            array,
        )


def _walks(
    rng: random.Random, n: int, kind: str, low: float, high: float, step: float, digits: int
) -> Walks:
    chunks = -(-n // CHUNK)
    length = chunks * CHUNK
    out = []
    for _ in range(TRACKS):
        v = rng.uniform(low, high)
        walk = []
        for _ in range(length):
            v += rng.uniform(-step, step)
            if v < low:
                v = 2 * low - v
            if v > high:
                v = 2 * high - v
            walk.append(round(v, digits) if digits else float(round(v)))
        out.append(walk)
    return Walks(out, chunks, kind)
