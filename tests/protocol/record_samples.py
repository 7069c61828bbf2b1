"""Helpers shared by the record batch tests: random records, buffers, a snappy shim."""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import cramjam

from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.record_builder import NewRecord, encode_batch
from kafka_ds.protocol.records import Record, iter_batches

HEADER_KEYS = ["", "h", "trace-id", "\u00e9t\u00e9", "\u65e5\u672c"]


def random_record(rnd: random.Random, *, timestamp_ms: int, headers: bool = True,
                  max_value_bytes: int = 300) -> NewRecord:
    key = rnd.choice([None, b"", rnd.randbytes(rnd.randint(1, 40))])
    value = rnd.choice([None, b"", rnd.randbytes(rnd.randint(1, max_value_bytes))])
    record_headers: list[tuple[str, bytes | None]] = []
    if headers and rnd.random() < 0.4:
        record_headers = [(rnd.choice(HEADER_KEYS), rnd.choice([None, b"", rnd.randbytes(5)]))
                          for _ in range(rnd.choice([1, 2, 3, 20]))]
    return NewRecord(key, value, timestamp_ms, record_headers)


def random_batches(rnd: random.Random, count: int, *, base_offset: int = 0,
                   codecs: tuple[int, ...] = tuple(Compression), headers: bool = True,
                   max_records: int = 30,
                   max_value_bytes: int = 300) -> tuple[list[bytes], list[list[NewRecord]]]:
    """``count`` encoded batches with consecutive offsets, and the records of each."""
    encoded, inputs = [], []
    offset = base_offset
    for _ in range(count):
        records = [random_record(rnd, timestamp_ms=1_700_000_000_000 + rnd.randint(-10**6, 10**6),
                                 headers=headers, max_value_bytes=max_value_bytes)
                   for _ in range(rnd.randint(1, max_records))]
        encoded.append(encode_batch(
            records, base_offset=offset, compression=rnd.choice(codecs),
            timestamp_type=rnd.choice([0, 0, 0, 1]),
            max_timestamp_ms=1_800_000_000_000 if rnd.random() < 0.2 else None,
            producer_id=rnd.choice([-1, 7]), producer_epoch=1, base_sequence=offset))
        inputs.append(records)
        offset += len(records)
    return encoded, inputs


def all_records(buf: bytes) -> list[Record]:
    return [record for batch in iter_batches(buf) for record in batch]


class _CramjamSnappy:
    """What kafka-python expects of python-snappy, on top of cramjam (test-only shim)."""

    @staticmethod
    def compress(data: bytes) -> bytes:
        return bytes(cramjam.snappy.compress_raw(bytes(data)))

    @staticmethod
    def decompress(data: bytes) -> bytes:
        return bytes(cramjam.snappy.decompress_raw(bytes(data)))


@contextmanager
def kafka_python_snappy() -> Iterator[None]:
    """Let kafka-python read and write snappy (it wants python-snappy, not installed here)."""
    import kafka.codec

    saved = kafka.codec.snappy
    kafka.codec.snappy = _CramjamSnappy
    try:
        yield
    finally:
        kafka.codec.snappy = saved


def xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32, for building LZ4 frame headers the way old Kafka did (test-only)."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    def round_(acc: int, lane: int) -> int:
        return (rotl((acc + lane * p2) & mask, 13) * p1) & mask

    pos = 0
    if len(data) >= 16:
        v = [(seed + p1 + p2) & mask, (seed + p2) & mask, seed, (seed - p1) & mask]
        while pos + 16 <= len(data):
            lanes = struct.unpack_from("<4I", data, pos)
            v = [round_(acc, lane) for acc, lane in zip(v, lanes, strict=True)]
            pos += 16
        acc = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & mask
    else:
        acc = (seed + p5) & mask
    acc = (acc + len(data)) & mask
    while pos + 4 <= len(data):
        acc = (rotl((acc + struct.unpack_from("<I", data, pos)[0] * p3) & mask, 17) * p4) & mask
        pos += 4
    while pos < len(data):
        acc = (rotl((acc + data[pos] * p5) & mask, 11) * p1) & mask
        pos += 1
    acc ^= acc >> 15
    acc = (acc * p2) & mask
    acc ^= acc >> 13
    acc = (acc * p3) & mask
    return acc ^ (acc >> 16)


class _XxhashShim:
    """The slice of the ``xxhash`` package kafka-python uses for magic-0 LZ4 (test-only)."""

    class _Digest:
        def __init__(self, data: bytes) -> None:
            self._value = xxh32(bytes(data))

        def digest(self) -> bytes:
            return self._value.to_bytes(4, "big")

    xxh32 = _Digest


@contextmanager
def kafka_python_xxhash() -> Iterator[None]:
    """Let kafka-python write magic-0 LZ4 (its broken header checksum needs xxhash)."""
    import kafka.codec

    saved = kafka.codec.xxhash
    kafka.codec.xxhash = _XxhashShim
    try:
        yield
    finally:
        kafka.codec.xxhash = saved


def legacy_message(magic: int, attributes: int, key: bytes | None, value: bytes | None,
                   offset: int = 0) -> bytes:
    """One magic 0/1 message as a broker stores it (CRC-32 over magic..end)."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", 0)
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def legacy_wrapper(inner: bytes, codec: int, offset: int = 200) -> bytes:
    """A magic-1 wrapper message holding the message set ``inner`` compressed with ``codec``."""
    from kafka_ds.protocol.compression import compress

    return legacy_message(1, codec, None, compress(codec, inner), offset=offset)
