"""The bytes of a Prometheus TSDB block's chunks (bench/tsdb_block.py lays them out in a
block): XOR chunks as tsdb/chunkenc/xor.go writes them (prometheus/prometheus, v2.x), one
series' samples at a time or many series' runs at once in numpy, their varints and the CRC-32C
(Castagnoli) checksums of the chunk files and the index.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence

import numpy as np

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
FAST_CRC = _fast_crc is not None  # else a block takes much longer


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


BATCH = 400_000  # samples encoded at once by xor_chunks (~90 bytes of scratch each)


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
        while k < len(values) and (k == j or size + len(values[k]) <= BATCH):
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
