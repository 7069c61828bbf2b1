"""Legacy message sets (magic 0 and 1), built by kafka-python, read by us."""

from __future__ import annotations

import struct
import zlib

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from record_samples import (
    all_records,
    kafka_python_snappy,
    kafka_python_xxhash,
    legacy_message,
    legacy_wrapper,
)

from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.errors import CorruptRecordError, DecodeError
from kafka_ds.protocol.legacy_records import LegacyBatch
from kafka_ds.protocol.record_builder import NewRecord, encode_batch
from kafka_ds.protocol.records import TimestampType, iter_batches

RECORDS = [(b"k0", b"v0"), (None, b"v1"), (b"k2", None), (b"", b""), (b"k4", b"x" * 3000)]


def build(magic: int, codec: int, first_offset: int = 100, timestamp_type: int = 0) -> bytes:
    """A message set as a broker stores it: kafka-python's builder, then broker offsets."""
    with kafka_python_snappy(), kafka_python_xxhash():
        builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
        for index, (key, value) in enumerate(RECORDS):
            # Inner offsets of a magic-1 wrapper are relative; everything else is absolute.
            offset = index if codec and magic == 1 else first_offset + index
            builder.append(offset, 1_600_000_000_000 + index, key, value)
        buf = bytearray(builder.build())
    if codec:
        # The broker gives a wrapper the absolute offset of its last inner message.
        struct.pack_into(">q", buf, 0, first_offset + len(RECORDS) - 1)
        if timestamp_type:
            buf[17] |= 0x08  # wrapper attributes: LogAppendTime
            struct.pack_into(">q", buf, 18, 1_650_000_000_000)
            struct.pack_into(">I", buf, 12, zlib.crc32(buf[16:]))
    return bytes(buf)


CASES = [(0, Compression.NONE), (0, Compression.GZIP), (0, Compression.SNAPPY),
         (0, Compression.LZ4), (1, Compression.NONE), (1, Compression.GZIP),
         (1, Compression.SNAPPY), (1, Compression.LZ4)]


@pytest.mark.parametrize(("magic", "codec"), CASES, ids=lambda v: str(int(v)))
def test_legacy_message_sets_match_kafka_python(magic: int, codec: int) -> None:
    buf = build(magic, codec)
    ours = [(r.offset, r.timestamp_ms, r.timestamp_type, r.key, r.value, r.headers)
            for r in all_records(buf)]
    expected_timestamp_type = -1 if magic == 0 else 0
    assert [r[0] for r in ours] == [100, 101, 102, 103, 104]
    assert [(r[3], r[4]) for r in ours] == RECORDS
    assert all(r[2] == expected_timestamp_type and r[5] == [] for r in ours)
    if magic == 1:
        assert [r[1] for r in ours] == [1_600_000_000_000 + i for i in range(5)]
    else:
        assert all(r[1] == -1 for r in ours)
    if not (magic == 0 and codec == Compression.LZ4):
        # kafka-python's reader (the magic-0 LZ4 reader would need the real xxhash package).
        with kafka_python_snappy():
            theirs = [(r.offset, -1 if r.timestamp is None else r.timestamp,
                       -1 if r.timestamp_type is None else r.timestamp_type, r.key, r.value, [])
                      for batch in MemoryRecords(buf) for r in batch]
        assert ours == theirs


def test_batch_attributes() -> None:
    (wrapper,) = list(iter_batches(build(1, Compression.GZIP)))
    assert isinstance(wrapper, LegacyBatch)
    assert (wrapper.magic, wrapper.compression, wrapper.base_offset, wrapper.last_offset) == (
        1, Compression.GZIP, 100, 104)
    assert wrapper.next_offset == 105 and wrapper.timestamp_type == TimestampType.CREATE_TIME
    assert not wrapper.is_transactional and not wrapper.is_control
    assert wrapper.producer_id == -1 and wrapper.control_record() is None
    plain = list(iter_batches(build(0, Compression.NONE)))
    assert len(plain) == 5 and plain[0].timestamp_type == TimestampType.NO_TIMESTAMP
    assert plain[2].base_offset == plain[2].last_offset == 102


def test_log_append_time_wrapper_imposes_its_timestamp() -> None:
    buf = build(1, Compression.GZIP, timestamp_type=1)
    records = all_records(buf)
    assert {(r.timestamp_ms, r.timestamp_type) for r in records} == {(1_650_000_000_000, 1)}


def test_mixed_with_v2_batches_and_partial_tail() -> None:
    v2 = encode_batch([NewRecord(b"a", b"b", 5)], base_offset=105)
    legacy = build(1, Compression.SNAPPY)
    buf = legacy + v2 + legacy[:20]
    reader = iter_batches(buf)
    offsets = [r.offset for batch in reader for r in batch]
    assert offsets == [100, 101, 102, 103, 104, 105]
    assert reader.has_partial_batch and reader.position == len(legacy) + len(v2)


def test_legacy_crc_is_zlib_crc32() -> None:
    buf = bytearray(build(1, Compression.NONE))
    buf[30] ^= 0x40
    with pytest.raises(CorruptRecordError, match=r"offset 100 of t-1.*CRC-32 is"):
        list(iter_batches(bytes(buf), topic="t", partition=1))
    assert len(list(iter_batches(bytes(buf), verify_crc=False))) == 5


@pytest.mark.parametrize("damage", ["nested", "null value", "short", "bad key length"])
def test_malformed_legacy_messages(damage: str) -> None:
    if damage == "nested":
        inner = build(1, Compression.GZIP)  # a compressed wrapper inside a wrapper
        outer = legacy_wrapper(inner, Compression.GZIP)
        with pytest.raises(DecodeError, match="compressed again"):
            all_records(outer)
        return
    buf = bytearray(build(1, Compression.NONE))
    if damage == "null value":
        buf = bytearray(legacy_message(1, Compression.GZIP, None, None))
        with pytest.raises(DecodeError, match="null value"):
            all_records(bytes(buf))
    elif damage == "short":
        struct.pack_into(">i", buf, 8, 10)
        with pytest.raises(DecodeError):
            list(iter_batches(bytes(buf)))
    else:
        struct.pack_into(">i", buf, 26, 5000)  # key length of the first message
        struct.pack_into(">I", buf, 12, zlib.crc32(buf[16:12 + struct.unpack_from(">i", buf,
                                                                                    8)[0]]))
        with pytest.raises(DecodeError, match="key"):
            list(iter_batches(bytes(buf)))
