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

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kafka_ds.protocol import record_columns_rows, record_columns_scan
from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.errors import DecodeError
from kafka_ds.protocol.record_columns import (
    DecodeArea,
    DecodeOptions,
    ScannedBuffer,
    decode_columns,
    finish_columns,
    scan_buffer,
)

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
    # the guessed start reads a varint longer than five bytes (a record length's limit).
    first: list[Record] = [(b"k", filler * 40, []), (b"k", filler * 10, [])]
    second: list[Record] = [(b"k", filler * 10, []), (b"k", filler * 40, [])]
    buf = fetch_buffer([first, second, first, second], codec)
    shapes = {len(part) for part in (kafka_python_batch(first, 0, codec),
                                     kafka_python_batch(second, 0, codec))}
    if codec == Compression.NONE:
        assert len(shapes) == 1  # the premise: the batches really have one shape
    walks: list[int] = []  # the start of each section walked record by record in step 2
    scan_walks: list[int] = []  # the record count of each section the scan walked
    section_starts = record_columns_rows._section_starts
    scan_walk = record_columns_scan.walk_fast

    def counted(area: object, section: tuple[int, int, int, int], *args: object) -> None:
        walks.append(section[0])
        section_starts(area, section, *args)  # type: ignore[arg-type]

    def counted_scan(area: memoryview, start: int, count: int, starts: list[int]) -> int:
        scan_walks.append(count)
        return scan_walk(area, start, count, starts)

    monkeypatch.setattr(record_columns_rows, "_section_starts", counted)
    monkeypatch.setattr(record_columns_scan, "walk_fast", counted_scan)
    assert_rows_match_kafka_python(buf)
    # One walk lays out the shape (the scan's, for compressed batches, which walks one batch
    # per shape); the guesses for the second and fourth batches are refused, and those two
    # alone are walked again, whatever the guessed start read: a too-long varint there once
    # made the decoder walk the whole buffer again.
    sections = sorted(set(walks))
    if codec == Compression.NONE:
        assert not scan_walks
        assert len(sections) == 3 and walks == sections  # the first, second and fourth
    else:
        # Decompressed, the four batches have one shape: the scan walks the first only.
        assert scan_walks == [2]
        assert len(walks) == 2 and walks == sections  # the second and fourth


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


def _scanned(buf: bytes, walk_records: bool) -> ScannedBuffer:
    scanned = scan_buffer(buf, DecodeOptions(include_headers=True), area=DecodeArea(),
                          walk_records=walk_records)
    assert isinstance(scanned, ScannedBuffer)
    return scanned


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD], ids=lambda c: c.name)
def test_the_scan_walks_compressed_batches_as_step_2_would(codec: Compression) -> None:
    # Compressed and plain batches mixed (the records are then laid end to end again, at new
    # positions), shapes repeated and not: the layouts the scan found while decompressing must
    # place every record where step 2 finds them without them.
    varied: list[Record] = [(b"k", bytes([97 + n % 26]) * (n * 37 % 900), [("h", b"1")] * (n % 3))
                            for n in range(40)]
    same: list[Record] = [(None, b"v" * 100, [])] * 20
    parts = [kafka_python_batch(records, 0, batch_codec)
             for records, batch_codec in [(varied, codec), (same, codec), (same, Compression.NONE),
                                          (same, codec), (varied[::-1], codec),
                                          (varied, Compression.NONE)]]
    offset, renumbered = 0, []
    for part in parts:
        moved = bytearray(part)
        struct.pack_into(">q", moved, 0, offset)
        offset += struct.unpack_from(">i", part, 57)[0]
        renumbered.append(bytes(moved))
    buf = b"".join(renumbered)

    walked = _scanned(buf, walk_records=True)
    # One walk per compressed shape: varied, same (the second "same" and varied reversed, of
    # the same bytes and count as varied, are guessed); plain batches are left to step 2.
    placed = [at >= 0 for at in walked.scan.layouts.layout_at]
    assert placed == [True, True, False, True, True, False]
    assert len(walked.scan.layouts.relative_starts) == 40 + 20
    left = _scanned(buf, walk_records=False)
    assert left.scan.layouts.layout_at == [-1] * 6 and not left.scan.layouts.relative_starts
    with_walk, without = finish_columns(walked), finish_columns(left)
    for name in ("offsets", "timestamps_ms", "batch_index"):
        assert getattr(with_walk, name).tolist() == getattr(without, name).tolist()
    for name in ("keys", "values", "headers"):
        assert getattr(with_walk, name).equals(getattr(without, name))
    assert_rows_match_kafka_python(buf)


def test_a_compressed_batch_whose_records_do_not_walk_still_raises_in_truncate_mode() -> None:
    # One record more in the count than in the (CRC-valid) batch: the scan's walk does not fit,
    # so it decides nothing; step 2 names the fault, and it raises even under "truncate", as
    # records that do not parse always did (only faults of the batch walk truncate).
    batch = bytearray(kafka_python_batch([(None, b"x" * 200, [])] * 5, 0, Compression.LZ4))
    struct.pack_into(">i", batch, 57, 6)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    scanned = _scanned(bytes(batch), walk_records=True)
    assert scanned.scan.layouts.layout_at == [-1]
    with pytest.raises(DecodeError, match="buffer ends early"):
        decode_columns(bytes(batch), on_corrupt="truncate")
