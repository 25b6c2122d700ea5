"""Write one Prometheus TSDB block (index format v2, XOR chunks) straight from Python, for the
30-day bench (bench/rollup_month.py): ~750 M samples through ``promtool tsdb create-blocks-from``
would take over an hour on two cores; regular series encode fast here (a chunk of a steady
series is the same bytes for every series with that value and start).

The format as Prometheus documents and reads it: tsdb/docs/format/index.md, chunks.md,
tsdb/chunkenc/xor.go (prometheus/prometheus, v2.x): chunk files ``chunks/000001`` (magic
0x85BD40DD, version 1; each chunk ``uvarint(len) | encoding | data | crc32c``), the index
(magic 0xBAAAD700, version 2: symbol table, 16-byte-aligned series with their chunk metas,
postings lists, the postings offset table, TOC), ``meta.json``. Checksums are CRC-32C
(Castagnoli). Prometheus opening the block is the check: the bench compares what it reads.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import secrets
import struct
import sys
import time
import zlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from bench.series import CHUNK, STALE_NAN, Labels, Spec
from bench.tsdb_chunks import BATCH, FAST_CRC, crc32c, uvarint, varint, xor_chunk, xor_chunks


def offset(labels: Labels, step_ms: int) -> int:
    """Where in the scrape interval a series' target is scraped, in ms: Prometheus spreads its
    targets over the interval (each target's offset is a hash of its labels, scrape/target.go
    ``offset``), so a fleet's targets scrape at different times and hardly any on an hour's
    edge. Here a CRC-32 of the target's ``job`` and ``instance``; 0 for a series without."""
    found = dict(labels)
    instance = found.get("instance")
    if instance is None:
        return 0
    return zlib.crc32(f"{found.get('job', '')}/{instance}".encode()) % step_ms


def _moved(data: bytes, t0: int, o: int) -> bytes:
    """An XOR chunk (its encoding byte first) whose samples begin at ``t0``, with every
    timestamp ``o`` ms later: the first timestamp is a varint at a byte boundary after the
    16-bit sample count, the rest are deltas (tsdb/chunkenc/xor.go)."""
    if not o:
        return data
    old, new = varint(t0), varint(t0 + o)
    if len(old) != len(new):  # pragma: no cover - a length change: ~never at these times
        raise ValueError(f"the timestamp {t0} + {o} ms changes its varint's length")
    return data[:3] + new + data[3 + len(old) :]


def _section(content: bytes) -> bytes:
    """``len | content | crc32c(content)`` (the decbuf form of the index's tables)."""
    return struct.pack(">I", len(content)) + content + struct.pack(">I", crc32c(content))


def write_blocks(
    out: Path,
    series: list[Spec],
    start_ms: int,
    end_ms: int,
    step_ms: int,
    block_hours: int = 72,
    workers: int = os.cpu_count() or 1,
) -> int:
    """``series`` as consecutive blocks of ``block_hours`` (the last one shorter), as
    Prometheus holds a month once compacted: its blocks span at most 10 % of the retention
    (``--storage.tsdb.max-block-duration``'s default, cmd/prometheus/main.go), so a month
    kept for a 30-day re-ingest lies in blocks of ~3 days, each indexing only the series that
    had samples in it. ``workers`` processes write blocks at once (forked: they inherit
    ``series``, whose values are closures). Returns the number of samples."""
    per_block = block_hours * 3_600_000 // step_ms
    n = (end_ms - start_ms) // step_ms + 1
    windows = [(lo, min(n, lo + per_block) - 1) for lo in range(0, n, per_block)]
    args = [(out, start_ms, end_ms, step_ms, w) for w in windows]
    if workers < 2 or len(windows) < 2:
        return sum(_write_window(series, *a) for a in args)
    global _FORKED
    _FORKED = series
    try:
        with multiprocessing.get_context("fork").Pool(min(workers, len(windows))) as pool:
            return sum(pool.starmap(_write_forked, args, chunksize=1))
    finally:
        _FORKED = []


_FORKED: list[Spec] = []  # write_blocks' series, for its forked workers


def _write_forked(out: Path, start_ms: int, end_ms: int, step_ms: int, w: tuple[int, int]) -> int:
    return _write_window(_FORKED, out, start_ms, end_ms, step_ms, w)


def _write_window(
    series: list[Spec], out: Path, start_ms: int, end_ms: int, step_ms: int, w: tuple[int, int]
) -> int:
    return write_block(out, series, start_ms, end_ms, step_ms, window=w)[1]


def write_block(
    out: Path,
    series: Iterable[Spec],
    start_ms: int,
    end_ms: int,
    step_ms: int,
    chunk_samples: int = CHUNK,
    window: tuple[int, int] | None = None,
) -> tuple[Path, int]:
    """A block of ``series`` (bench/fleet.py's :class:`Spec`: labels, the grid indices of its
    first and last sample, values, what identifies a whole chunk's values) on the grid
    ``start_ms + k * step_ms`` up to ``end_ms`` — of the grid indices in ``window`` only
    (first and last, whole chunks apart) where given; a series that ends before the grid does
    gets a staleness marker at the next scrape (``stale``). Returns its directory and number
    of samples."""
    if not FAST_CRC:
        print(
            "tsdb_block: google-crc32c is not installed (make .venv/.installed): CRC-32C in "
            "Python, the block takes much longer",
            file=sys.stderr,
        )
    ulid = _ulid()
    d = out / ulid
    (d / "chunks").mkdir(parents=True)
    stamps = list(range(start_ms, end_ms + 1, step_ms))
    n = len(stamps)
    w0, w1 = window if window is not None else (0, n - 1)
    # series with one label set (spans apart in time) are one series
    todo = sorted(
        (s for s in series if s.first <= w1 and (s.last + s.stale) >= w0),
        key=lambda s: (s.labels, s.first),
    )
    cache: dict[object, bytes] = {}  # a whole chunk's bytes, on the grid
    metas: list[list[list[int]]] = []  # each series' chunks: [mint, maxt, ref]
    names: list[tuple[tuple[str, str], ...]] = []  # each series' labels
    pos = 8
    samples = 0
    # chunks to write, in order: their bytes, or (a series with ``array`` and no chunk key)
    # values and first timestamp for xor_chunks; and their meta, whose ref is set on writing
    queue: list[tuple[bytes | None, np.ndarray | None, int, list[int]]] = []
    queued = 0
    with (d / "chunks" / "000001").open("wb") as f:
        f.write(struct.pack(">IB3x", 0x85BD40DD, 1))

        def flush() -> None:
            nonlocal pos, queued
            runs = [(v, t0) for data, v, t0, _ in queue if data is None and v is not None]
            encoded = iter(xor_chunks([v for v, _ in runs], [t0 for _, t0 in runs], step_ms))
            for ready, _, _, meta in queue:
                data = ready if ready is not None else b"\x01" + next(encoded)
                raw = uvarint(len(data) - 1) + data + struct.pack(">I", crc32c(data))
                f.write(raw)
                meta[2] = pos
                pos += len(raw)
            queue.clear()
            queued = 0

        for i, spec in enumerate(todo):
            if i and todo[i - 1].labels == spec.labels:
                mine = metas.pop()  # the same series again, later (a MIG instance re-made)
                names.pop()
            else:
                mine = []
            first, last = max(w0, spec.first), min(w1, spec.last)
            stale = spec.last + 1 if spec.stale and w0 <= spec.last + 1 <= min(w1, n - 1) else -1
            cuts = [
                (c, max(first, c * chunk_samples), min(last, (c + 1) * chunk_samples - 1))
                for c in range(first // chunk_samples, last // chunk_samples + 1)
                if first <= last
            ]
            if stale >= 0 and (not cuts or cuts[-1][2] != stale - 1):
                cuts.append((stale // chunk_samples, stale, stale - 1))  # the marker alone
            o = offset(spec.labels, step_ms)  # the target's place in the scrape interval
            own = spec.array is not None and bool(cuts) and spec.key(cuts[0][0]) is None
            values = spec.array(first, last) if own and spec.array and first <= last else None
            for c, lo, hi in cuts:
                ts = stamps[lo : hi + 1]
                marker = stale >= 0 and hi + 1 == stale
                meta = [stamps[lo] + o, (stamps[stale] if marker else ts[-1]) + o, 0]
                mine.append(meta)
                samples += len(ts) + marker
                if own:
                    run = values[lo - first : hi - first + 1] if values is not None else []
                    run = np.append(run, STALE_NAN) if marker else run
                    queue.append((None, np.asarray(run, dtype=np.float64), stamps[lo] + o, meta))
                    queued += len(run)
                    continue
                chunk_key = spec.key(c)
                whole = lo == c * chunk_samples and hi == (c + 1) * chunk_samples - 1
                key = (chunk_key, ts[0]) if whole and not marker and chunk_key is not None else None
                data = cache.get(key) if key is not None else None
                if data is None:  # encoded on the grid itself, then moved to the target's times
                    points = [(t, spec.value(t)) for t in ts]
                    if marker:
                        points.append((stamps[stale], STALE_NAN))
                    data = b"\x01" + xor_chunk(points)
                    if key is not None:
                        cache[key] = data
                # (lo: the marker's, in a chunk of it alone)
                queue.append((_moved(data, stamps[lo], o), None, 0, meta))
                queued += 1
            metas.append(mine)
            names.append(spec.labels)
            if len(cache) > 200_000:
                cache.clear()
            if queued >= BATCH:
                flush()
        flush()
    symbols = sorted({x for labels in names for pair in labels for x in pair})
    index_of = {s: i for i, s in enumerate(symbols)}
    buf = bytearray(struct.pack(">IB", 0xBAAAD700, 2))
    toc_symbols = len(buf)
    content = struct.pack(">I", len(symbols)) + b"".join(
        uvarint(len(s.encode())) + s.encode() for s in symbols
    )
    buf += _section(content)
    buf += b"\x00" * ((-len(buf)) % 16)
    toc_series = len(buf)
    postings: dict[tuple[str, str], list[int]] = {("", ""): []}
    for labels, mine in zip(names, metas, strict=True):
        buf += b"\x00" * ((-len(buf)) % 16)
        ref = len(buf) // 16
        postings[("", "")].append(ref)
        body = bytearray(uvarint(len(labels)))
        for n, v in labels:
            body += uvarint(index_of[n]) + uvarint(index_of[v])
            postings.setdefault((n, v), []).append(ref)
        body += uvarint(len(mine))
        prev_max = prev_ref = 0
        for i, (mint, maxt, cref) in enumerate(mine):
            if i == 0:
                body += varint(mint) + uvarint(maxt - mint) + uvarint(cref)
            else:
                body += uvarint(mint - prev_max) + uvarint(maxt - mint) + varint(cref - prev_ref)
            prev_max, prev_ref = maxt, cref
        buf += uvarint(len(body)) + body + struct.pack(">I", crc32c(bytes(body)))
    toc_label_indices = len(buf)
    toc_label_table = len(buf)
    buf += _section(struct.pack(">I", 0))
    toc_postings = len(buf)
    offsets = []
    for key in sorted(postings):
        buf += b"\x00" * ((-len(buf)) % 4)
        offsets.append((key, len(buf)))
        refs = postings[key]
        buf += _section(struct.pack(f">I{len(refs)}I", len(refs), *refs))
    toc_postings_table = len(buf)
    table = bytearray(struct.pack(">I", len(offsets)))
    for (n, v), off in offsets:
        table += uvarint(2) + uvarint(len(n.encode())) + n.encode()
        table += uvarint(len(v.encode())) + v.encode() + uvarint(off)
    buf += _section(bytes(table))
    toc = struct.pack(
        ">6Q",
        toc_symbols,
        toc_series,
        toc_label_indices,
        toc_label_table,
        toc_postings,
        toc_postings_table,
    )
    buf += toc + struct.pack(">I", crc32c(toc))
    (d / "index").write_bytes(bytes(buf))
    meta = {
        "ulid": ulid,
        "minTime": stamps[w0],
        "maxTime": stamps[w1] + 1,
        "stats": {
            "numSamples": samples,
            "numSeries": len(names),
            "numChunks": sum(len(m) for m in metas),
        },
        "compaction": {"level": 1, "sources": [ulid]},
        "version": 1,
    }
    (d / "meta.json").write_text(json.dumps(meta, indent="\t"))
    return d, samples


def _ulid() -> str:
    alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    n = (int(time.time() * 1000) << 80) | int.from_bytes(secrets.token_bytes(10), "big")
    out = []
    for _ in range(26):
        out.append(alphabet[n & 31])
        n >>= 5
    return "".join(reversed(out))


if __name__ == "__main__":  # a smoke test: python bench/tsdb_block.py DIR
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    t0 = 1_700_000_000_000
    rows = [
        Spec((("__name__", "x"), ("i", str(i))), 0, 240, lambda t, i=i: float(i), lambda c, i=i: i)
        for i in range(5)
    ]
    rows.append(
        Spec((("__name__", "e"), ("i", "0")), 10, 200, lambda t: 1e12 + 0.2 * (t - t0), hash, True)
    )
    print(write_block(target, rows, t0, t0 + 4 * 3600_000, 60_000))
    os.sync()
