"""The columnar decoder against the per-record decoder, and the Spark Arrow shape."""

from __future__ import annotations

import random
import struct

import crc32c
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from record_samples import random_batches

from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.errors import CorruptRecordError, DecodeError
from kafka_ds.protocol.record_builder import NewRecord, encode_batch, encode_control_batch
from kafka_ds.protocol.record_columns import (
    HEADERS_TYPE,
    SPARK_SCHEMA,
    SPARK_SCHEMA_WITH_HEADERS,
    DecodeArea,
    RecordColumns,
    decode_columns,
    to_arrow,
)
from kafka_ds.protocol.record_columns_legacy import decode_columns_per_record
from kafka_ds.protocol.records import ControlRecordType, iter_batches


def assert_matches_simple(columns: RecordColumns, buf: bytes, start: int | None = None,
                          end: int | None = None, headers: bool = True) -> None:
    """Row for row, ``columns`` equals the per-record decoder's output for ``buf``."""
    low = -(2**63) if start is None else start
    high = 2**63 if end is None else end
    reader = iter_batches(buf)
    batches = list(reader)
    expected = [(record, index) for index, batch in enumerate(batches)
                if not batch.is_control for record in batch if low <= record.offset < high]
    assert len(columns) == len(expected)
    assert columns.offsets.tolist() == [r.offset for r, _ in expected]
    assert columns.timestamps_ms.tolist() == [r.timestamp_ms for r, _ in expected]
    assert columns.timestamp_types.tolist() == [r.timestamp_type for r, _ in expected]
    assert columns.keys.to_pylist() == [r.key for r, _ in expected]
    assert columns.values.to_pylist() == [r.value for r, _ in expected]
    assert columns.batch_index.tolist() == [index for _, index in expected]
    if headers:
        assert columns.headers is not None
        assert columns.headers.to_pylist() == [
            [{"key": k, "value": v} for k, v in r.headers] if r.headers else None
            for r, _ in expected]
    else:
        assert columns.headers is None
    assert columns.keys.type == columns.values.type == pa.binary()
    meta = columns.batches
    assert meta.base_offsets.tolist() == [b.base_offset for b in batches]
    assert meta.last_offsets.tolist() == [b.last_offset for b in batches]
    assert meta.producer_ids.tolist() == [b.producer_id for b in batches]
    assert meta.is_control.tolist() == [b.is_control for b in batches]
    assert meta.is_transactional.tolist() == [b.is_transactional for b in batches]
    assert meta.control_types.tolist() == [
        b.control_record().type if b.is_control else -1 for b in batches]
    assert columns.bytes_consumed == reader.position
    assert columns.has_partial_batch == reader.has_partial_batch
    if batches:
        assert columns.next_offset == max(batches[-1].next_offset, low)
    else:
        assert columns.next_offset is None


@st.composite
def fetch_buffers(draw: st.DrawFn) -> tuple[bytes, int | None, int | None]:
    seed = draw(st.integers(0, 2**32))
    rnd = random.Random(seed)
    encoded, inputs = random_batches(rnd, draw(st.integers(1, 6)), base_offset=rnd.randint(0, 50),
                                     codecs=tuple(draw(st.sets(
                                         st.sampled_from(list(Compression)), min_size=1))))
    pieces = []
    for batch in encoded:
        pieces.append(batch)
        if draw(st.booleans()) and rnd.random() < 0.3:
            last = struct.unpack_from(">q", batch)[0] + struct.unpack_from(">i", batch, 23)[0]
            pieces.append(encode_control_batch(rnd.choice(list(ControlRecordType)),
                                               producer_id=7, producer_epoch=1,
                                               base_offset=last + 1))
    buf = b"".join(pieces)
    if draw(st.booleans()):  # a partial batch at the end, as a broker may send
        tail = encoded[rnd.randrange(len(encoded))]
        buf += tail[:rnd.randrange(len(tail))]
    first = struct.unpack_from(">q", buf)[0]
    total = sum(len(records) for records in inputs)
    start = draw(st.one_of(st.none(), st.integers(first, first + total + 5)))
    end = draw(st.one_of(st.none(), st.integers(first, first + total + 5)))
    return buf, start, end


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fetch_buffers(), st.booleans())
def test_columns_equal_the_simple_decoder(case: tuple[bytes, int | None, int | None],
                                          headers: bool) -> None:
    buf, start, end = case
    columns = decode_columns(buf, start_offset=start, end_offset=end, include_headers=headers)
    assert_matches_simple(columns, buf, start, end, headers)
    batch = to_arrow(columns, "topic", 4, include_headers=headers)
    assert batch.schema == (SPARK_SCHEMA_WITH_HEADERS if headers else SPARK_SCHEMA)
    assert batch.num_rows == len(columns)


def test_large_records_take_the_exact_length_walk() -> None:
    # Records of 8 KiB and more have three-byte length varints.
    records = [NewRecord(b"k", bytes([i]) * (9000 + i * 3000), i) for i in range(6)]
    records.append(NewRecord(b"small", b"v", 7))
    buf = encode_batch(records) + encode_batch(records, base_offset=7, compression=3)
    assert_matches_simple(decode_columns(buf, include_headers=True), buf)


def test_many_headers_finish_in_the_per_header_loop() -> None:
    headers = [(f"h{i}", None if i % 3 else bytes([i])) for i in range(40)]
    records = [NewRecord(b"k", b"v", 0, headers), NewRecord(None, None, 1, headers[:2]),
               NewRecord(b"x", b"y", 2, headers * 2)]
    buf = encode_batch(records)
    assert_matches_simple(decode_columns(buf, include_headers=True), buf)


def test_invalid_utf8_header_keys_are_replaced_like_java() -> None:
    record = NewRecord(b"k", b"v", 0, [("ok", b"1")])
    buf = bytearray(encode_batch([record]))
    at = buf.index(b"ok")
    buf[at:at + 2] = b"\xffk"
    struct.pack_into(">I", buf, 17, crc32c.crc32c(buf[21:]))
    columns = decode_columns(bytes(buf), include_headers=True)
    assert columns.headers.to_pylist() == [[{"key": "\ufffdk", "value": b"1"}]]
    assert_matches_simple(columns, bytes(buf))


def test_headers_null_not_empty_and_log_append_time() -> None:
    buf = encode_batch([NewRecord(b"a", b"1", 10), NewRecord(b"b", b"2", 20, [("h", None)])],
                       timestamp_type=1, max_timestamp_ms=99)
    columns = decode_columns(buf, include_headers=True)
    assert columns.headers.to_pylist() == [None, [{"key": "h", "value": None}]]
    assert columns.headers.null_count == 1
    assert columns.timestamps_ms.tolist() == [99, 99]
    assert columns.timestamp_types.tolist() == [1, 1]


def test_control_batches_never_produce_rows() -> None:
    buf = (encode_batch([NewRecord(b"a")], base_offset=0, producer_id=3, producer_epoch=0,
                        is_transactional=True)
           + encode_control_batch(ControlRecordType.COMMIT, producer_id=3, producer_epoch=0,
                                  base_offset=1))
    columns = decode_columns(buf)
    assert columns.offsets.tolist() == [0]
    assert columns.batches.is_control.tolist() == [False, True]
    assert columns.batches.control_types.tolist() == [-1, 1]
    assert columns.next_offset == 2


def test_to_arrow_matches_sparks_own_arrow_schema() -> None:
    types = pytest.importorskip("pyspark.sql.types")
    pandas_types = pytest.importorskip("pyspark.sql.pandas.types")
    fields = [types.StructField("key", types.BinaryType()),
              types.StructField("value", types.BinaryType()),
              types.StructField("topic", types.StringType()),
              types.StructField("partition", types.IntegerType()),
              types.StructField("offset", types.LongType()),
              types.StructField("timestamp", types.TimestampType()),
              types.StructField("timestampType", types.IntegerType())]
    headers = types.StructField("headers", types.ArrayType(types.StructType([
        types.StructField("key", types.StringType()),
        types.StructField("value", types.BinaryType())])))
    spark = pandas_types.to_arrow_schema(types.StructType(fields), timezone="UTC")
    spark_with_headers = pandas_types.to_arrow_schema(types.StructType([*fields, headers]),
                                                      timezone="UTC")
    assert spark.equals(SPARK_SCHEMA)
    assert spark_with_headers.equals(SPARK_SCHEMA_WITH_HEADERS)
    assert spark_with_headers.field("headers").type.value_field.name == "element"
    columns = decode_columns(encode_batch([NewRecord(b"k", b"v", 1_700_000_000_123)]),
                             include_headers=True)
    batch = to_arrow(columns, "orders", 2, include_headers=True)
    assert spark_with_headers.equals(batch.schema)
    row = batch.to_pylist()[0]
    assert (row["topic"], row["partition"], row["offset"], row["timestampType"]) == (
        "orders", 2, 0, 0)
    assert row["timestamp"].timestamp() == pytest.approx(1_700_000_000.123)
    with pytest.raises(ValueError):
        to_arrow(decode_columns(encode_batch([NewRecord(b"k")])), "t", 0, include_headers=True)


def test_empty_and_all_filtered() -> None:
    columns = decode_columns(b"", include_headers=True)
    assert len(columns) == 0 and columns.next_offset is None and not columns.has_partial_batch
    assert to_arrow(columns, "t", 0, include_headers=True).num_rows == 0
    buf = encode_batch([NewRecord(b"a"), NewRecord(b"b")], base_offset=10)
    columns = decode_columns(buf, start_offset=12)
    assert len(columns) == 0 and columns.next_offset == 12
    assert len(decode_columns(buf, end_offset=10)) == 0
    assert decode_columns(buf, start_offset=11, end_offset=12).offsets.tolist() == [11]


def test_filter_keeps_bookkeeping() -> None:
    rnd = random.Random(3)
    encoded, _ = random_batches(rnd, 3)
    buf = b"".join(encoded)
    columns = decode_columns(buf, include_headers=True)
    keep = np.arange(len(columns)) % 2 == 0
    kept = columns.filter(keep)
    assert kept.offsets.tolist() == columns.offsets[keep].tolist()
    assert kept.values.to_pylist() == [v for v, k in zip(columns.values.to_pylist(), keep,
                                                          strict=True) if k]
    assert kept.headers is not None and len(kept.headers) == len(kept)
    assert kept.next_offset == columns.next_offset and kept.batches is columns.batches


def test_crc_errors_and_truncate_mode() -> None:
    good = encode_batch([NewRecord(b"a", b"1")], base_offset=5)
    bad = bytearray(encode_batch([NewRecord(b"b", b"2")], base_offset=6))
    bad[-2] ^= 0x10  # the value byte
    buf = good + bytes(bad) + good
    with pytest.raises(CorruptRecordError, match="offset 6 of t-2"):
        decode_columns(buf, topic="t", partition=2)
    columns = decode_columns(buf, on_corrupt="truncate")
    assert columns.offsets.tolist() == [5] and isinstance(columns.error, CorruptRecordError)
    assert columns.bytes_consumed == len(good) and columns.next_offset == 6
    assert len(decode_columns(buf, verify_crc=False)) == 3
    with pytest.raises(ValueError):
        decode_columns(buf, on_corrupt="ignore")


def test_total_decompressed_bytes_are_capped() -> None:
    batch = encode_batch([NewRecord(b"k", bytes(400_000))], compression=Compression.ZSTD)
    buf = batch + batch
    assert len(decode_columns(buf, max_decompressed_bytes=1_000_000)) == 2
    with pytest.raises(DecodeError, match="cap"):
        decode_columns(buf, max_decompressed_bytes=600_000)


def test_legacy_buffers_give_the_same_columns() -> None:
    from test_legacy_records import build

    legacy = build(1, Compression.GZIP) + build(0, Compression.NONE, first_offset=105)
    v2 = encode_batch([NewRecord(b"new", b"v", 5, [("h", b"x")])], base_offset=110)
    buf = legacy + v2 + v2[:10]
    columns = decode_columns(buf, include_headers=True, start_offset=101, end_offset=111)
    assert_matches_simple(columns, buf, 101, 111)
    assert columns.timestamp_types.tolist() == [0] * 4 + [-1] * 5 + [0]
    assert columns.batches.base_offsets.tolist()[0] == 100
    direct = decode_columns_per_record(v2, include_headers=True)
    assert_matches_simple(direct, v2)
    assert columns.headers.type == HEADERS_TYPE


def test_a_reused_area_gives_the_same_columns_and_they_never_share_it() -> None:
    rnd = random.Random(7)
    area = DecodeArea()
    kept = []
    for round_ in range(6):  # LZ4 (in place), other codecs (copied in), mixed with plain
        codecs = [(Compression.LZ4,), (Compression.ZSTD, Compression.GZIP),
                  (Compression.LZ4, Compression.NONE)][round_ % 3]
        encoded, _ = random_batches(rnd, 4, base_offset=100 * round_, codecs=codecs)
        buf = b"".join(encoded)
        columns = decode_columns(buf, include_headers=True, area=area)
        assert_matches_simple(columns, buf)
        kept.append((buf, columns))
    assert len(area.buf) > 0  # the area kept its memory for the next call ...
    for buf, columns in kept:  # ... and no earlier call's columns changed when it was reused
        assert_matches_simple(columns, buf)


def test_an_area_is_reset_after_an_error() -> None:
    area = DecodeArea()
    good = encode_batch([NewRecord(b"k", b"v" * 5000)], compression=Compression.LZ4)
    bomb = encode_batch([NewRecord(b"k", bytes(4_000_000))], compression=Compression.LZ4,
                        base_offset=1)
    with pytest.raises(DecodeError, match="cap"):
        decode_columns(good + bomb, max_decompressed_bytes=1_000_000, area=area)
    assert_matches_simple(decode_columns(good, area=area), good, headers=False)
