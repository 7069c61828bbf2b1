"""RecordBatch v2: golden bytes, kafka-python interop both ways, control batches, errors."""

from __future__ import annotations

import random
import struct

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from record_samples import all_records, kafka_python_snappy, random_record

from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.errors import CorruptRecordError, DecodeError, EncodeError
from kafka_ds.protocol.record_builder import (
    NewRecord,
    encode_batch,
    encode_control_batch,
    estimate_record_size_bytes,
    record_size_bytes,
)
from kafka_ds.protocol.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_BYTES,
    MAGIC_OFFSET,
    RECORD_COUNT_OFFSET,
    ControlRecordType,
    RecordBatch,
    TimestampType,
    decode_control_record,
    iter_batches,
)

CODECS = list(Compression)

# One record (key "k", value "val", header h=1) in a batch at offset 42, written field by field.
GOLDEN = bytes.fromhex(
    "000000000000002a"  # baseOffset 42
    "00000040"  # batchLength 64 = 61 - 12 + 15
    "00000007"  # partitionLeaderEpoch 7
    "02"  # magic 2
    "3184b93d"  # crc: CRC-32C of attributes..end
    "0000"  # attributes: no codec, CreateTime, not transactional, not control
    "00000000"  # lastOffsetDelta 0
    "0000018bcfe56800"  # baseTimestamp 1_700_000_000_000
    "0000018bcfe56800"  # maxTimestamp
    "00000000000003e8"  # producerId 1000
    "0003"  # producerEpoch 3
    "00000005"  # baseSequence 5
    "00000001"  # recordCount 1
    "1c"  # record length varint: 14 (zigzag 28)
    "00"  # attributes
    "00"  # timestampDelta 0
    "00"  # offsetDelta 0
    "02" "6b"  # keyLength 1, "k"
    "06" "76616c"  # valueLength 3, "val"
    "02"  # headersCount 1
    "02" "68"  # header key length 1, "h"
    "02" "31"  # header value length 1, "1"
)


def test_golden_batch_encodes_field_by_field() -> None:
    encoded = encode_batch([NewRecord(b"k", b"val", 1_700_000_000_000, [("h", b"1")])],
                           base_offset=42, partition_leader_epoch=7, producer_id=1000,
                           producer_epoch=3, base_sequence=5)
    assert encoded == GOLDEN
    assert crc32c.crc32c(GOLDEN[ATTRIBUTES_OFFSET:]) == struct.unpack_from(">I", GOLDEN,
                                                                           CRC_OFFSET)[0]


def test_golden_batch_decodes() -> None:
    reader = iter_batches(GOLDEN)
    (batch,) = list(reader)
    assert isinstance(batch, RecordBatch)
    header = batch.header
    assert (header.base_offset, header.batch_length, header.partition_leader_epoch) == (42, 64, 7)
    assert (header.magic, header.attributes, header.last_offset_delta) == (2, 0, 0)
    assert header.base_timestamp_ms == header.max_timestamp_ms == 1_700_000_000_000
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1000, 3, 5)
    assert header.record_count == 1 and header.size_bytes == len(GOLDEN)
    assert header.compression is Compression.NONE
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert not (header.is_transactional or header.is_control or header.has_delete_horizon)
    assert (batch.last_offset, batch.next_offset) == (42, 43)
    (record,) = batch.records()
    assert record == (42, 1_700_000_000_000, 0, b"k", b"val", [("h", b"1")])
    assert reader.position == len(GOLDEN) and not reader.has_partial_batch


def test_golden_batch_matches_kafka_python_builder() -> None:
    builder = DefaultRecordBatchBuilder(2, 0, False, 1000, 3, 5, 1 << 20)
    builder.append(0, 1_700_000_000_000, b"k", b"val", [("h", b"1")])
    built = bytearray(builder.build())
    # kafka-python leaves baseOffset and partitionLeaderEpoch to the broker (0); neither is
    # under the CRC.
    struct.pack_into(">qii", built, 0, 42, 64, 7)
    assert bytes(built) == GOLDEN


def test_header_offsets_are_derived_from_the_struct() -> None:
    assert (MAGIC_OFFSET, CRC_OFFSET, ATTRIBUTES_OFFSET, RECORD_COUNT_OFFSET, HEADER_BYTES) == (
        16, 17, 21, 57, 61)


def _kafka_python_view(buf: bytes) -> list[tuple]:
    out = []
    for batch in MemoryRecords(buf):
        assert batch.validate_crc()
        for record in batch:
            out.append((record.offset, record.timestamp, record.timestamp_type, record.key,
                        record.value, [(k, v) for k, v in record.headers]))
    return out


def _our_view(buf: bytes) -> list[tuple]:
    return [(r.offset, r.timestamp_ms, r.timestamp_type, r.key, r.value, r.headers)
            for r in all_records(buf)]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_python_reads_our_batches(codec: Compression) -> None:
    rnd = random.Random(codec)
    records = [random_record(rnd, timestamp_ms=1_700_000_000_000 + i * 7) for i in range(40)]
    records[0] = NewRecord(None, None, 1_700_000_000_000, [("n", None)])
    buf = encode_batch(records, base_offset=1000, compression=codec, producer_id=9,
                       producer_epoch=2, base_sequence=17, is_transactional=True)
    buf += encode_batch(records[:3], base_offset=1040, compression=codec, timestamp_type=1,
                        max_timestamp_ms=1_800_000_000_000)
    with kafka_python_snappy():
        assert _kafka_python_view(buf) == _our_view(buf)
        batch = DefaultRecordBatch(buf)
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 2, 17)
        assert batch.is_transactional and not batch.is_control_batch
        assert batch.compression_type == codec and batch.last_offset == 1039


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("transactional", [False, True])
def test_we_read_kafka_python_batches(codec: Compression, transactional: bool) -> None:
    rnd = random.Random(100 + codec)
    records = [random_record(rnd, timestamp_ms=1_700_000_000_000 + rnd.randint(-50, 50))
               for _ in range(60)]
    records[1] = NewRecord(None, b"", 1_700_000_000_000, [])
    records[2] = NewRecord(b"", None, 1_700_000_000_000, [("k", None), ("", b"")])
    with kafka_python_snappy():
        builder = DefaultRecordBatchBuilder(2, codec, transactional, 5 if transactional else -1,
                                            0 if transactional else -1,
                                            0 if transactional else -1, 1 << 22)
        for index, record in enumerate(records):
            builder.append(index, record.timestamp_ms, record.key, record.value,
                           list(record.headers))
        buf = bytes(builder.build())
        assert _our_view(buf) == _kafka_python_view(buf)
    (batch,) = list(iter_batches(buf))
    assert batch.is_transactional == transactional
    assert batch.producer_id == (5 if transactional else -1)
    if codec == Compression.NONE:  # same bytes from both encoders
        ours = encode_batch(records, compression=codec, is_transactional=transactional,
                            producer_id=5 if transactional else -1,
                            producer_epoch=0 if transactional else -1,
                            base_sequence=0 if transactional else -1, partition_leader_epoch=0)
        assert ours == buf


@pytest.mark.parametrize("kind", list(ControlRecordType))
def test_control_batches(kind: ControlRecordType) -> None:
    buf = encode_control_batch(kind, producer_id=77, producer_epoch=4, base_offset=500,
                               coordinator_epoch=12, timestamp_ms=99)
    (batch,) = list(iter_batches(buf))
    assert batch.is_control and batch.is_transactional
    marker = batch.control_record()
    assert marker == (0, kind, 12)
    assert marker.is_abort == (kind == ControlRecordType.ABORT)
    assert marker.is_commit == (kind == ControlRecordType.COMMIT)
    kp_batch = DefaultRecordBatch(buf)
    assert kp_batch.is_control_batch and kp_batch.producer_id == 77
    (kp_record,) = list(kp_batch)
    assert kp_record.type == kind and kp_record.abort == (kind == ControlRecordType.ABORT)


def test_control_record_decoding_errors_and_other_types() -> None:
    assert decode_control_record(struct.pack(">hh", 0, 5), None) == (0, 5, None)
    with pytest.raises(DecodeError):
        decode_control_record(b"\x00", None)
    with pytest.raises(DecodeError):
        decode_control_record(struct.pack(">hh", 0, 1), b"\x00\x00")
    (batch,) = list(iter_batches(encode_batch([NewRecord(b"k", b"v")])))
    assert batch.control_record() is None


def test_log_append_time_and_delete_horizon() -> None:
    records = [NewRecord(b"a", b"1", 10), NewRecord(b"b", b"2", 30)]
    buf = encode_batch(records, timestamp_type=TimestampType.LOG_APPEND_TIME,
                       max_timestamp_ms=5000)
    assert [(r.timestamp_ms, r.timestamp_type) for r in all_records(buf)] == [(5000, 1)] * 2
    buf = encode_batch(records, delete_horizon_ms=5)
    (batch,) = list(iter_batches(buf))
    assert batch.header.has_delete_horizon and batch.header.base_timestamp_ms == 5
    assert [r.timestamp_ms for r in batch] == [10, 30]
    assert batch.header.max_timestamp_ms == 30


def test_offset_deltas_with_gaps_and_empty_batch() -> None:
    records = [NewRecord(b"a", offset_delta=0), NewRecord(b"b", offset_delta=5)]
    (batch,) = list(iter_batches(encode_batch(records, base_offset=10)))
    assert [r.offset for r in batch] == [10, 15] and batch.last_offset == 15
    (empty,) = list(iter_batches(encode_batch([], base_offset=3, last_offset_delta=4)))
    assert empty.records() == [] and empty.next_offset == 8


def test_record_size_functions_match_the_encoder() -> None:
    rnd = random.Random(5)
    for index in range(200):
        record = random_record(rnd, timestamp_ms=0, max_value_bytes=20000)
        timestamp_delta = rnd.choice([0, 1, -1, 300, 10**6, -(10**12), 2**62])
        offset_delta = rnd.choice([0, index, 2**20])
        exact = record_size_bytes(offset_delta, timestamp_delta, record.key, record.value,
                                  record.headers)
        one = encode_batch([record._replace(timestamp_ms=timestamp_delta,
                                            offset_delta=offset_delta)],
                           delete_horizon_ms=0)
        assert exact == len(one) - HEADER_BYTES
        assert exact == DefaultRecordBatchBuilder.size_in_bytes(
            offset_delta, timestamp_delta, record.key, record.value, list(record.headers))
        assert estimate_record_size_bytes(record.key, record.value, record.headers) >= exact


def test_crc_mismatch_names_the_partition_and_offset() -> None:
    buf = bytearray(GOLDEN)
    buf[70] ^= 1  # "val" -> "vam"
    with pytest.raises(CorruptRecordError, match=r"offset 42 of orders-3.*CRC-32C"):
        list(iter_batches(bytes(buf), topic="orders", partition=3))
    # Unchecked: the flipped value byte is accepted.
    (batch,) = list(iter_batches(bytes(buf), verify_crc=False))
    assert batch.records()[0].value == b"vam"


def test_fields_outside_the_crc_can_change() -> None:
    buf = bytearray(GOLDEN)
    struct.pack_into(">q", buf, 0, 7)  # baseOffset
    struct.pack_into(">i", buf, 12, 99)  # partitionLeaderEpoch
    (batch,) = list(iter_batches(bytes(buf)))
    assert batch.records()[0].offset == 7 and batch.header.partition_leader_epoch == 99


def _recrc(buf: bytearray, pos: int = 0) -> bytes:
    end = pos + 12 + struct.unpack_from(">i", buf, pos + 8)[0]
    struct.pack_into(">I", buf, pos + CRC_OFFSET, crc32c.crc32c(buf[pos + ATTRIBUTES_OFFSET:end]))
    return bytes(buf)


@pytest.mark.parametrize(("where", "value", "message"), [
    (MAGIC_OFFSET, b"\x05", "unknown magic 5"),
    (RECORD_COUNT_OFFSET, b"\x00\x00\x00\x09", "9 records cannot fit"),
    (RECORD_COUNT_OFFSET, b"\xff\xff\xff\xff", "-1 records"),
    (HEADER_BYTES + 4, b"\x7f", "key"),  # key length -64
    (HEADER_BYTES + 10, b"\x7e", "headers count"),
])
def test_malformed_batches_raise_decode_error(where: int, value: bytes, message: str) -> None:
    buf = bytearray(GOLDEN)
    buf[where:where + len(value)] = value
    with pytest.raises(DecodeError, match=message):
        for batch in iter_batches(_recrc(buf)):
            batch.records()


def test_batch_length_and_trailing_bytes_errors() -> None:
    short = bytearray(GOLDEN)
    struct.pack_into(">i", short, 8, 20)
    with pytest.raises(DecodeError, match="too small"):
        list(iter_batches(bytes(short)))
    # A records section longer than its records: one garbage byte before the end.
    longer = bytearray(GOLDEN + b"\x00")
    struct.pack_into(">i", longer, 8, 65)
    with pytest.raises(DecodeError, match="after the last of 1 records"):
        for batch in iter_batches(_recrc(longer)):
            batch.records()


def test_partial_batches_are_reported_not_raised() -> None:
    two = GOLDEN + GOLDEN
    for cut in (0, 5, 12, 17, 61, len(GOLDEN) + 30, len(two) - 1):
        reader = iter_batches(two[:cut])
        batches = list(reader)
        assert len(batches) == cut // len(GOLDEN)
        assert reader.position == len(batches) * len(GOLDEN)
        assert reader.has_partial_batch == (cut % len(GOLDEN) != 0)


def test_encode_errors() -> None:
    with pytest.raises(EncodeError):
        encode_batch([NewRecord(b"k")], producer_epoch=1 << 20)
    with pytest.raises(EncodeError):
        encode_batch([NewRecord(b"k")], compression=9)
    with pytest.raises(EncodeError):
        encode_batch([NewRecord(b"k", offset_delta=1 << 40)])
