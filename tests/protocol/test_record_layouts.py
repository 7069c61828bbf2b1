"""The columnar decoder on the record layouts its shortcuts depend on.

``record_columns_rows`` walks one batch of each shape (record count, bytes) and guesses that
the others lay their records out alike; ``record_arrow.gather`` copies keys and values as
fixed-width rows when every non-empty one has the same length. These tests build batches whose
shapes match but whose layouts do not, and key/value mixtures on both sides of the fixed-width
test, with kafka-python's builder (an independent encoder), and compare every row with
kafka-python's reader (an independent decoder).
"""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kafka_ds.protocol import record_columns_rows
from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.record_columns import decode_columns

CODECS = [Compression.NONE, Compression.LZ4, Compression.ZSTD]
Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def kafka_python_batch(records: list[Record], base_offset: int, codec: Compression) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 24)
    for index, (key, value, headers) in enumerate(records):
        builder.append(index, 1_700_000_000_000 + index, key, value, headers)
    built = bytearray(builder.build())
    struct.pack_into(">q", built, 0, base_offset)  # the broker's to set; not under the CRC
    return bytes(built)


def fetch_buffer(batches: list[list[Record]], codec: Compression) -> bytes:
    parts, offset = [], 0
    for records in batches:
        parts.append(kafka_python_batch(records, offset, codec))
        offset += len(records)
    return b"".join(parts)


def assert_rows_match_kafka_python(buf: bytes) -> None:
    expected = [(r.offset, r.timestamp, r.key, r.value,
                 [{"key": k, "value": v} for k, v in r.headers] or None)
                for batch in MemoryRecords(buf) for r in batch]
    columns = decode_columns(buf, include_headers=True)
    assert columns.headers is not None
    got = list(zip(columns.offsets.tolist(), columns.timestamps_ms.tolist(),
                   columns.keys.to_pylist(), columns.values.to_pylist(),
                   columns.headers.to_pylist(), strict=True))
    assert got == expected
    for array in (columns.keys, columns.values):
        array.validate(full=True)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("filler", [b"a", b"\xff"], ids=["ascii", "continuation-bytes"])
def test_batches_of_one_shape_with_different_layouts(codec: Compression, filler: bytes,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Same record count and byte length, records swapped: the first batch's layout, applied
    # to the second, puts its second record inside the first one's value. With 0xff filler
    # the guessed start reads a varint longer than five bytes.
    first: list[Record] = [(b"k", filler * 40, []), (b"k", filler * 10, [])]
    second: list[Record] = [(b"k", filler * 10, []), (b"k", filler * 40, [])]
    buf = fetch_buffer([first, second, first, second], codec)
    shapes = {len(part) for part in (kafka_python_batch(first, 0, codec),
                                     kafka_python_batch(second, 0, codec))}
    if codec == Compression.NONE:
        assert len(shapes) == 1  # the premise: the batches really have one shape
    walks: list[int] = []  # the start of each section walked record by record
    section_starts = record_columns_rows._section_starts

    def counted(area: object, section: tuple[int, int, int, int], *args: object) -> None:
        walks.append(section[0])
        section_starts(area, section, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(record_columns_rows, "_section_starts", counted)
    assert_rows_match_kafka_python(buf)
    # One walk lays out the shape; the guess for the second batch was refused, so it was
    # walked too (alone, or with the whole buffer when the guess read a too-long varint).
    assert len(set(walks)) >= 2


FIXED = b"v" * 1000
MIXTURES: dict[str, list[Record]] = {
    "fixed values, null keys": [(None, FIXED, [])] * 6,
    "fixed values, some null": [(None, FIXED, []), (None, None, []), (None, FIXED, [])] * 2,
    "fixed values, some empty": [(None, b"", []), (None, FIXED, []), (None, b"", [])] * 2,
    "all values null": [(None, None, [])] * 6,
    "all values empty": [(b"", b"", [])] * 6,
    "values of many lengths": [(None, b"x" * n, []) for n in (0, 1, 5, 300, 1000, 2)],
    "fixed keys, some null": [(b"key-00000001", FIXED, []), (None, FIXED, [])] * 3,
    "keys of two lengths": [(b"k1", FIXED, []), (b"key-2", FIXED, [])] * 3,
    "with headers": [(b"k", FIXED, [("h", b"1"), ("g", None)]), (b"k", FIXED, [])] * 3,
}


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("name", list(MIXTURES))
def test_key_and_value_mixtures(codec: Compression, name: str) -> None:
    records = MIXTURES[name]
    assert_rows_match_kafka_python(fetch_buffer([records, records, records[:2]], codec))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_record_lengths_of_one_two_and_three_varint_bytes(codec: Compression) -> None:
    # A record's length is a zigzag varint: one byte up to 63, two up to 8191, then three.
    sizes = [0, 1, 50, 55, 56, 57, 60, 63, 64, 100, 8170, 8180, 8185, 8191, 8200, 20_000]
    records: list[Record] = [(None, bytes([65 + n % 26]) * n, []) for n in sizes]
    buf = fetch_buffer([records] * 3 + [records[::-1]] * 2, codec)
    assert_rows_match_kafka_python(buf)
