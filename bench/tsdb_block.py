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

import functools
import json
import multiprocessing
import os
import secrets
import struct
import sys
import time
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from bench.fleet import CHUNK, STALE_NAN, Labels, Spec

_POLY = 0x82F63B78
_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli): google-crc32c's C implementation where it is installed (the
    ``test`` extra), else this table-driven one (slow: minutes for a month of history)."""
    if _fast_crc is not None:
        return int(_fast_crc(data))
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


try:
    from google_crc32c import value as _fast_crc
except ImportError:  # pragma: no cover - the pure-Python table above
    _fast_crc = None


@functools.lru_cache(maxsize=1 << 16)  # (chunk spans and lengths repeat: most calls hit)
def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def varint(n: int) -> bytes:
    return uvarint((n << 1) ^ (n >> 63) if n < 0 else n << 1)


def xor_chunk(samples: list[tuple[int, float]]) -> bytes:
    """The XOR chunk of (ms, value) samples (tsdb/chunkenc/xor.go: Append, writeVDelta).
    Runs of samples one scrape apart with the value unchanged (2 zero bits each) are written
    at once."""
    n = len(samples)
    t0 = samples[0][0]
    bits = struct.unpack(f">{n}Q", struct.pack(f">{n}d", *(v for _, v in samples)))
    acc = n  # 16 bits of count, then the first timestamp and value
    nbits = 16
    for x in varint(t0):
        acc = (acc << 8) | x
        nbits += 8
    prev_bits = bits[0]
    acc = (acc << 64) | prev_bits
    nbits += 64
    leading, trailing = 0xFF, 0
    prev_t, prev_delta = t0, 0
    zeros = 0  # zero bits not yet written
    for i in range(1, n):
        t = samples[i][0]
        delta_t = t - prev_t
        vb = bits[i]
        delta = vb ^ prev_bits
        if i > 1 and delta_t == prev_delta:
            if delta == 0:
                zeros += 2  # the same step, the same value
                prev_t = t
                continue
            zeros += 1  # the same step: a 0 bit
            acc <<= zeros
            nbits += zeros
            zeros = 0
        else:
            acc <<= zeros
            nbits += zeros
            zeros = 0
            if i == 1:
                for x in uvarint(delta_t):
                    acc = (acc << 8) | x
                    nbits += 8
            else:
                dod = delta_t - prev_delta
                if -(1 << 13) <= dod < (1 << 13):
                    acc, nbits = (acc << 16) | (0b10 << 14) | (dod & 0x3FFF), nbits + 16
                elif -(1 << 16) <= dod < (1 << 16):
                    acc, nbits = (acc << 20) | (0b110 << 17) | (dod & 0x1FFFF), nbits + 20
                elif -(1 << 19) <= dod < (1 << 19):
                    acc, nbits = (acc << 24) | (0b1110 << 20) | (dod & 0xFFFFF), nbits + 24
                else:
                    acc = (acc << 68) | (0b1111 << 64) | (dod & 0xFFFFFFFFFFFFFFFF)
                    nbits += 68
        prev_t, prev_delta = t, delta_t
        prev_bits = vb
        if delta == 0:
            acc <<= 1
            nbits += 1
            continue
        new_leading = 64 - delta.bit_length()
        new_trailing = (delta & -delta).bit_length() - 1
        if new_leading >= 32:
            new_leading = 31
        if leading != 0xFF and new_leading >= leading and new_trailing >= trailing:
            width = 64 - leading - trailing
            acc = (((acc << 2) | 0b10) << width) | (delta >> trailing)
            nbits += 2 + width
            continue
        leading, trailing = new_leading, new_trailing
        sigbits = 64 - new_leading - new_trailing
        acc = (((acc << 13) | (0b11 << 11) | (new_leading << 6) | (sigbits & 0x3F)) << sigbits) | (
            delta >> new_trailing
        )
        nbits += 13 + sigbits
    acc <<= zeros
    nbits += zeros
    pad = (-nbits) % 8
    return (acc << pad).to_bytes((nbits + pad) // 8, "big")


_BATCH = 400_000  # samples encoded at once by xor_chunks (~90 bytes of scratch each)


def xor_chunks(values: Sequence[np.ndarray], t0s: Sequence[int], step_ms: int) -> list[bytes]:
    """XOR chunks (without their encoding byte) of many series' runs at once, in numpy: chunk
    ``j`` holds ``values[j]`` at ``t0s[j] + i * step_ms``. For the counters no two series
    share (bench/fleet_integrals.py), where :func:`xor_chunk`'s loop over samples is the
    month's cost. Every value that changed is written with its own leading/trailing-zero
    window (control bits ``11``, tsdb/chunkenc/xor.go ``writeVDelta``): what Prometheus'
    decoder reads as it reads its own chunks (``xorIterator.readValue``), a few bits larger
    than its encoder, which reuses the previous window where the new one fits in it."""
    out: list[bytes] = []
    j = 0
    while j < len(values):
        k, size = j, 0
        while k < len(values) and (k == j or size + len(values[k]) <= _BATCH):
            size += len(values[k])
            k += 1
        out.extend(_xor_batch(values[j:k], t0s[j:k], step_ms))
        j = k
    return out


def _xor_batch(values: Sequence[np.ndarray], t0s: Sequence[int], step_ms: int) -> list[bytes]:
    lengths = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
    if lengths.min() < 1:
        raise ValueError("a chunk needs a sample")
    bits = np.concatenate(values).astype(">f8").view(">u8").astype(np.uint64)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    delta = np.empty_like(bits)
    delta[0] = 0
    np.bitwise_xor(bits[1:], bits[:-1], out=delta[1:])
    pos = np.arange(len(bits)) - np.repeat(starts, lengths)  # the sample's place in its chunk
    # leading zeros (at most 31, a 5-bit field) and trailing zeros of each delta
    smear = delta.copy()
    for shift in (1, 2, 4, 8, 16, 32):
        smear |= smear >> np.uint64(shift)
    leading = np.minimum(64 - np.bitwise_count(smear).astype(np.int64), 31)
    low = delta & (~delta + np.uint64(1))
    trailing = np.where(delta == 0, 0, np.bitwise_count(low - np.uint64(1)).astype(np.int64))
    changed = delta != 0
    sig = np.where(changed, 64 - leading - trailing, 0)
    # each sample after its chunk's first: a 0 bit of timestamp (the same step: from the third
    # sample on; the second's delta is a byte-aligned uvarint in the head), then ``0`` for an
    # unchanged value, else ``11``, 5 bits of leading zeros, 6 of significant bits, those bits
    head_len = np.where(pos >= 1, np.where(pos >= 2, 1, 0) + np.where(changed, 13, 1), 0)
    head = np.where(changed & (pos >= 1), (0b11 << 11) | (leading << 6) | (sig & 0x3F), 0)
    sig = np.where(pos >= 1, sig, 0)
    payload = np.where(sig > 0, delta >> trailing.astype(np.uint64), np.uint64(0))
    # where each sample's bits go: its chunk starts at a byte, it follows its chunk's samples
    total = head_len + sig
    chunk_bits = np.add.reduceat(total, starts)
    chunk_bytes = (chunk_bits + 7) // 8
    ends = np.cumsum(chunk_bytes)
    at = np.cumsum(total) - total  # each sample's first bit, were the chunks not padded
    at += np.repeat(8 * (ends - chunk_bytes) - (at[starts]), lengths)
    words = np.zeros(int(ends[-1]) // 8 + 2, dtype=np.uint64)
    _put(words, head.astype(np.uint64), head_len, at)
    _put(words, payload, sig, at + head_len)
    stream = words.astype(">u8").tobytes()
    out = []
    first = bits[starts]
    for j, t0 in enumerate(t0s):
        n = int(lengths[j])
        head_bytes = struct.pack(">H", n) + varint(t0) + struct.pack(">Q", int(first[j]))
        if n > 1:
            head_bytes += uvarint(step_ms)
        lo = int(ends[j - 1]) if j else 0
        out.append(head_bytes + stream[lo : int(ends[j])])
    return out


def _put(words: np.ndarray, value: np.ndarray, width: np.ndarray, at: np.ndarray) -> None:
    """ORs each ``value`` (its low ``width`` bits, at most 64) into the big-endian bit
    stream ``words`` from bit ``at`` on: into one word, or across two."""
    w = at // 64
    s = at % 64
    over = s + width - 64  # bits that spill into the next word
    fits = over <= 0
    u64 = np.uint64
    first = np.where(fits, value << (-over).clip(0).astype(u64), value >> over.clip(0).astype(u64))
    np.bitwise_or.at(words, w, first)
    spill = ~fits
    np.bitwise_or.at(words, w[spill] + 1, value[spill] << (64 - over[spill]).astype(u64))


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
    if _fast_crc is None:
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
            if queued >= _BATCH:
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
