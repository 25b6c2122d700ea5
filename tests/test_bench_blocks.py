"""The benches' TSDB blocks read back by the real Prometheus: bench/tsdb_block.py writes what
bench/fleet.py and bench/fleet_integrals.py say, sample for sample, whichever way a series is
encoded (a chunk shared by key, a series' own chunk in Python, the counters' in numpy,
several blocks written by forked workers), and an ended series goes stale."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

from bench.fleet import realistic
from bench.fleet_integrals import integrals
from bench.series import STALE_NAN, Grid, Spec, _labels
from bench.tsdb_block import offset, write_blocks
from bench.tsdb_chunks import xor_chunks
from tests.conftest import require_binary
from tests.prom import Prometheus

T0 = 1_780_002_000_000  # ms, on the hour
HOURS = 6


def _selector(spec: Spec) -> str:
    return spec.name + "{" + ",".join(f'{k}="{v}"' for k, v in spec.labels if k != "__name__") + "}"


@pytest.fixture(scope="module")
def loaded(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Prometheus, Grid, list[Spec]]]:
    grid = Grid(T0, T0 + HOURS * 3_600_000, 60_000)
    gauges, _ = realistic(16, 80, grid)
    series = gauges + list(integrals(gauges, grid))
    # the same counters, each written by xor_chunk's loop (no ``array``): both encoders' chunks
    series += [
        replace(s, labels=_labels("python_" + s.name, dict(s.labels)), array=None)
        for s in series
        if s.array is not None and s.key(0) is None
    ]
    work = tmp_path_factory.mktemp("bench-blocks")
    (work / "data").mkdir()
    write_blocks(work / "data", series, grid.start_ms, grid.end_ms, 60_000, 2, workers=2)
    prom = Prometheus(
        require_binary("prometheus"), work, [], extra_args=["--storage.tsdb.retention.time=100y"]
    )
    prom.wait_ready()
    prom.until(lambda: prom.query(f"up @ {T0 / 1000 + 60}"), 30, "blocks loaded")
    yield prom, grid, series
    prom.stop()


def test_every_sample_of_every_kind_of_series_reads_back(
    loaded: tuple[Prometheus, Grid, list[Spec]],
) -> None:
    prom, grid, series = loaded
    end = grid.end_ms / 1000 + 60  # (a target's samples lie up to one interval late)
    seen = {"counter in numpy": 0, "counter in Python": 0, "gauge": 0}
    for spec in series:
        if sum(s.labels == spec.labels for s in series) > 1:
            continue  # a MIG instance re-made: one series, several specs
        found = prom.query(f"{_selector(spec)}[{HOURS + 1}h] @ {end}")
        got = [(float(t), float(v)) for t, v in found[0]["values"]] if found else []
        o = offset(spec.labels, 60_000)
        ks = range(spec.first, spec.last + 1)
        assert got == [((grid.time(k) + o) / 1000, spec.value(grid.time(k))) for k in ks]
        own = spec.key(0) is None
        kind = "gauge" if not own else "counter in numpy" if spec.array else "counter in Python"
        seen[kind] += 1
    assert min(seen.values()) > 100, seen


def test_an_ended_counter_goes_stale_at_the_scrape_after_its_last(
    loaded: tuple[Prometheus, Grid, list[Spec]],
) -> None:
    prom, grid, series = loaded
    ended = [
        s for s in series if s.stale and s.array is not None and s.name.endswith("_seconds_total")
    ]
    assert ended
    for spec in ended[:20]:
        o = offset(spec.labels, 60_000)
        last = (grid.time(spec.last) + o) / 1000
        assert prom.query(f"{_selector(spec)} @ {last}")
        assert not prom.query(f"{_selector(spec)} @ {last + 60}")  # not 5 minutes' look-back


def test_xor_chunks_write_the_float_bits_prometheus_keeps() -> None:
    """Values whose bits the numpy encoder could mishandle: a 64-bit XOR (sign change), more
    than 31 leading zeros, a repeat, the staleness NaN; each decoded by the format's rule."""
    runs = [
        np.array([1.0, -1.0, -1.0, 2.0**-1000, 5e-324, STALE_NAN, 0.0]),
        np.array([7.5]),
        np.array([1e12, 1e12 + 0.25]),
    ]
    chunks = xor_chunks(runs, [T0, T0 + 1, T0 + 2], 60_000)
    for run, t0, chunk in zip(runs, [T0, T0 + 1, T0 + 2], chunks, strict=True):
        decoded = _decode(chunk)
        assert [t for t, _ in decoded] == [t0 + i * 60_000 for i in range(len(run))]
        assert [np.float64(v).tobytes() for _, v in decoded] == [v.tobytes() for v in run]


def _decode(chunk: bytes) -> list[tuple[int, float]]:
    """An XOR chunk's samples, as tsdb/chunkenc/xor.go's iterator reads them (regular steps
    only: a delta-of-delta of 0 is the one timestamp form the encoders write after the
    second sample)."""
    import struct

    n = struct.unpack(">H", chunk[:2])[0]
    bits = "".join(f"{b:08b}" for b in chunk[2:])
    at = 0

    def take(k: int) -> int:
        nonlocal at
        value = int(bits[at : at + k], 2) if k else 0
        at += k
        return value

    def uvarint() -> int:
        shift = value = 0
        while True:
            b = take(8)
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value

    raw = uvarint()
    t = (raw >> 1) ^ -(raw & 1)
    v = take(64)
    out = [(t, struct.unpack(">d", v.to_bytes(8, "big"))[0])]
    delta = leading = width = 0
    for i in range(1, n):
        if i == 1:
            delta = uvarint()
        else:
            assert take(1) == 0  # delta of delta 0
        t += delta
        if take(1):
            if take(1):
                leading, width = take(5), take(6) or 64
            v ^= take(width) << (64 - leading - width)
        out.append((t, struct.unpack(">d", v.to_bytes(8, "big"))[0]))
    return out
