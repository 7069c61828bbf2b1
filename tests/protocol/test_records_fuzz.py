"""Fuzz the record decoders: only the DecodeError family may come out, quickly, in bounded memory.

Random, truncated, bit-flipped and spliced buffers of every codec and message format go
through both decoders (``iter_batches`` + records, ``decode_columns``). Half of the damaged
batches get their CRC recomputed, and some are damaged inside the compressed payload and then
recompressed, so that the parsers behind the CRC check see hostile bytes too.

``KAFKA_DS_FUZZ_CASES`` sets the number of cases (10,000 by default; 1,000,000 for a long run).
``KAFKA_DS_FUZZ_SEED`` picks the first seed, to reproduce a failure.
"""

from __future__ import annotations

import gc
import os
import random
import resource
import struct
import time
import zlib
from collections.abc import Callable

import crc32c
import pytest
from record_samples import random_batches
from test_legacy_records import build

from kafka_ds.protocol.compression import Compression, compress, decompress
from kafka_ds.protocol.errors import DecodeError
from kafka_ds.protocol.record_builder import NewRecord, encode_batch, encode_control_batch
from kafka_ds.protocol.record_columns import decode_columns
from kafka_ds.protocol.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_BYTES,
    ControlRecordType,
    iter_batches,
)

CASES = int(os.environ.get("KAFKA_DS_FUZZ_CASES", "10000"))
FIRST_SEED = int(os.environ.get("KAFKA_DS_FUZZ_SEED", "0"))
CAP_BYTES = 1 << 20  # small decompression cap: bombs must stop here
# CPU seconds of this thread per case (a loaded machine may stall the wall clock, never
# this): a decoder that loops or inflates a bomb burns CPU.
MAX_CASE_CPU_SECONDS = 2.0
# Growth of the *current* resident size over the cases, after a warm-up that fills the
# allocator's pools and the decoders' caches (the lifetime peak, ru_maxrss, would hide any
# leak smaller than what earlier tests already used). A decoded case is freed before the
# next: without a leak the growth stays under 1 MiB (measured), while a leak of 1 KiB per
# case grows it by ~10 MiB over the default 10 000 cases.
WARM_UP_CASES = 300
MAX_RSS_GROWTH_BYTES = 8 << 20


def _corpus() -> tuple[list[bytes], list[bytes]]:
    """(valid buffers, buffers that are wrong on purpose)."""
    rnd = random.Random(1234)
    corpus = []
    odd = []
    for codec in Compression:
        encoded, _ = random_batches(rnd, 3, codecs=(codec,), max_records=8, max_value_bytes=80)
        corpus.append(b"".join(encoded))
    corpus.append(encode_control_batch(ControlRecordType.ABORT, producer_id=3, producer_epoch=1))
    corpus.append(encode_batch([NewRecord(b"k", b"v" * 9000, 5, [("h", None)] * 20)]))
    odd.append(encode_batch([NewRecord(None, bytes(CAP_BYTES * 4))],
                            compression=Compression.ZSTD))  # decompresses past the cap
    legacy = bytearray(build(1, Compression.NONE))
    legacy[17] = 4  # zstd was never a legacy codec
    odd.append(bytes(_fix_checksums(legacy)))
    for magic, codec in [(0, 0), (0, 1), (0, 3), (1, 0), (1, 2), (1, 3)]:
        corpus.append(build(magic, codec))
    return corpus, odd


def _frames(buf: bytes) -> list[tuple[int, int]]:
    """(start, end) of each complete top-level batch/message, by framing only."""
    frames, pos = [], 0
    while pos + 12 <= len(buf):
        (length,) = struct.unpack_from(">i", buf, pos + 8)
        end = pos + 12 + length
        if length < 5 or end > len(buf):
            break
        frames.append((pos, end))
        pos = end
    return frames


def _fix_checksums(buf: bytearray) -> bytearray:
    for start, end in _frames(bytes(buf)):
        magic = buf[start + 16]
        if magic == 2 and end - start >= HEADER_BYTES:
            struct.pack_into(">I", buf, start + CRC_OFFSET,
                             crc32c.crc32c(buf[start + ATTRIBUTES_OFFSET:end]))
        elif magic in (0, 1):
            struct.pack_into(">I", buf, start + 12, zlib.crc32(buf[start + 16:end]))
    return buf


VALID, ODD = _corpus()
CORPUS = VALID + ODD


def _flip_bits(rnd: random.Random, buf: bytearray) -> bytearray:
    for _ in range(rnd.randint(1, 8)):
        if buf:
            buf[rnd.randrange(len(buf))] ^= 1 << rnd.randrange(8)
    return buf


def _overwrite(rnd: random.Random, buf: bytearray) -> bytearray:
    if buf:
        at = rnd.randrange(len(buf))
        values = [b"\xff", b"\x80", b"\x7f", b"\x00", b"\x01", b"\xff\xff\xff\xff",
                  b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff" * 10, rnd.randbytes(4)]
        piece = rnd.choice(values)
        buf[at:at + len(piece)] = piece
    return buf


def _damage_payload(rnd: random.Random, buf: bytearray) -> bytearray:
    """Damage the decompressed records of one v2 batch, then recompress and re-frame it."""
    frames = [(s, e) for s, e in _frames(bytes(buf)) if buf[s + 16] == 2]
    if not frames:
        return _flip_bits(rnd, buf)
    start, end = rnd.choice(frames)
    codec = buf[start + 22] & 0x07
    try:
        section = bytearray(decompress(codec, buf[start + HEADER_BYTES:end], CAP_BYTES))
    except DecodeError:
        return buf
    section = rnd.choice([_flip_bits, _overwrite])(rnd, section)
    if rnd.random() < 0.3:
        section = section[:rnd.randrange(len(section) + 1)]
    payload = compress(codec, bytes(section)) if codec else bytes(section)
    batch = bytearray(buf[start:start + HEADER_BYTES]) + payload
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    if rnd.random() < 0.3:  # a record count that does not match
        struct.pack_into(">i", batch, 57, rnd.choice([0, 1, 2, 1000, -5, 2**31 - 1]))
    return bytearray(buf[:start]) + _fix_checksums(batch) + buf[end:]


def _mutate(rnd: random.Random) -> bytes:
    buf = bytearray(rnd.choice(CORPUS))
    kind = rnd.randrange(8)
    if kind == 0:
        buf = buf[:rnd.randrange(len(buf) + 1)]
    elif kind == 1:
        buf = _flip_bits(rnd, buf)
    elif kind == 2:
        buf = _fix_checksums(_flip_bits(rnd, buf))
    elif kind == 3:
        buf = _fix_checksums(_overwrite(rnd, buf))
    elif kind == 4:
        buf = _damage_payload(rnd, buf)
    elif kind == 5:
        buf = bytearray(rnd.randbytes(rnd.randint(0, 200)))
    elif kind == 6:
        other = rnd.choice(CORPUS)
        buf = buf[:rnd.randrange(len(buf) + 1)] + other[rnd.randrange(len(other) + 1):]
    else:
        buf = _fix_checksums(_overwrite(rnd, _flip_bits(rnd, buf)))
    if rnd.random() < 0.2:
        buf = buf[:rnd.randrange(len(buf) + 1)]
    return bytes(buf)


def _decoders(buf: bytes, rnd: random.Random) -> list[Callable[[], object]]:
    def simple() -> None:
        for batch in iter_batches(buf, max_decompressed_bytes=CAP_BYTES):
            batch.records()
            batch.control_record()

    start = rnd.choice([None, 0, 3, 10**6])
    return [
        simple,
        lambda: decode_columns(buf, include_headers=True, max_decompressed_bytes=CAP_BYTES),
        lambda: decode_columns(buf, start_offset=start, end_offset=rnd.choice([None, 5]),
                               max_decompressed_bytes=CAP_BYTES, on_corrupt="truncate"),
    ]


def test_corpus_is_valid() -> None:
    for buf in VALID:
        for decoder in _decoders(buf, random.Random(0)):
            decoder()
    for buf in ODD:
        for decoder in _decoders(buf, random.Random(0))[:2]:
            with pytest.raises(DecodeError):
                decoder()


def _current_rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def test_fuzz_decoders_raise_only_decode_errors() -> None:
    outcomes = {"ok": 0, "DecodeError": 0}
    slowest = 0.0
    rss_before = _current_rss_bytes()
    for seed in range(FIRST_SEED, FIRST_SEED + CASES):
        if seed == FIRST_SEED + WARM_UP_CASES:
            gc.collect()
            rss_before = _current_rss_bytes()
        rnd = random.Random(seed)
        buf = _mutate(rnd)
        for decoder in _decoders(buf, rnd):
            began = time.thread_time()
            try:
                decoder()
                outcomes["ok"] += 1
            except DecodeError:
                outcomes["DecodeError"] += 1
            except Exception as exc:  # anything else is a bug: report how to reproduce it
                pytest.fail(f"seed {seed}: {type(exc).__name__}: {exc}\n"
                            f"buffer: {buf.hex()}\n"
                            f"rerun with KAFKA_DS_FUZZ_SEED={seed} KAFKA_DS_FUZZ_CASES=1")
            took = time.thread_time() - began
            slowest = max(slowest, took)
            assert took < MAX_CASE_CPU_SECONDS, f"seed {seed} took {took:.2f} CPU s"
    gc.collect()
    growth = _current_rss_bytes() - rss_before
    assert growth < MAX_RSS_GROWTH_BYTES, f"resident size grew by {growth >> 20} MiB"
    assert outcomes["ok"] and outcomes["DecodeError"]  # the mutations reach both outcomes
