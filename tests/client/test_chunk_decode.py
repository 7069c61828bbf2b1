"""Two-step chunk decoding (scan in a decode thread, finish in the fetching thread).

The oracle is outside our code: record batches a real broker stored for confluent-kafka
(``tests/protocol/golden``, with what the writer sent in ``expected.json``), and batches the
lz4 and zstandard libraries compressed. Between a chunk's scan and its finish other chunks are
scanned, as the decode pool does while the fetching thread finishes the chunk before them:
every chunk must still decode to what was written.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from kafka_ds.client import chunk_decode
from kafka_ds.client.chunk_decode import (
    decode_chunk,
    finish_chunk,
    scan_chunk,
    worth_scanning_ahead,
)
from kafka_ds.client.fetch_config import FetchConfig
from kafka_ds.client.fetch_state import Chunk, PartitionRead
from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.errors import DecodeError
from kafka_ds.protocol.record_builder import NewRecord, encode_batch
from kafka_ds.protocol.record_columns import RecordColumns, ScannedBuffer
from kafka_ds.protocol.types import TopicPartition

GOLDEN = Path(__file__).parents[1] / "protocol" / "golden"
EXPECTED: dict[str, Any] = json.loads((GOLDEN / "expected.json").read_text())
COMPRESSED = ["golden-gzip.bin", "golden-lz4.bin", "golden-snappy.bin", "golden-zstd.bin"]


def _chunk(records: bytes, topic: str = "t", end: int = 2**62) -> Chunk:
    part = PartitionRead(TopicPartition(topic, 0), 0, end, 0, 0)
    return Chunk(part, memoryview(records), 0, None)


def _written(name: str) -> tuple[list[bytes | None], list[int]]:
    """Values and offsets the writer sent (expected.json)."""
    wanted = [r for b in EXPECTED[name]["batches"] if b["control"] is None for r in b["records"]]
    return ([None if r["value"] is None else bytes.fromhex(r["value"]) for r in wanted],
            [r["offset"] for r in wanted])


def _assert_written(columns: RecordColumns, name: str) -> None:
    values, offsets = _written(name)
    assert columns.values.to_pylist() == values
    assert columns.offsets.tolist() == offsets


@pytest.mark.parametrize("walk_records", [False, True])
def test_chunks_scanned_ahead_keep_their_own_areas(walk_records: bool) -> None:
    config = FetchConfig()
    chunks = {name: _chunk((GOLDEN / name).read_bytes(), name) for name in COMPRESSED}
    # Scan every chunk first (each holds its decompressed records), then finish them in order.
    scanned = {name: scan_chunk(chunk, config, False, walk_records=walk_records)[0]
               for name, chunk in chunks.items()}
    areas = [s.area for s in scanned.values() if isinstance(s, ScannedBuffer)]
    assert len(areas) == len(COMPRESSED)
    assert len({id(area) for area in areas}) == len(areas), "one area per scanned chunk"
    for name, chunk in chunks.items():
        columns, elapsed_ns = finish_chunk(chunk, scanned[name], config)
        _assert_written(columns, name)
        assert elapsed_ns > 0


def test_scanning_in_a_pool_while_finishing_here() -> None:
    """The fetch loop's pattern: a thread scans chunk n+1 while this thread finishes chunk n."""
    config = FetchConfig()
    names = COMPRESSED * 5
    threads_seen: set[int] = set()

    def scan(chunk: Chunk) -> Any:
        threads_seen.add(threading.get_ident())
        return scan_chunk(chunk, config, True, walk_records=False)

    with ThreadPoolExecutor(1) as pool:
        futures = [(name, pool.submit(scan, chunk := _chunk((GOLDEN / name).read_bytes(), name)),
                    chunk) for name in names]
        for name, future, chunk in futures:
            scanned, _ = future.result()
            columns, _ = finish_chunk(chunk, scanned, config)
            _assert_written(columns, name)
    assert threading.get_ident() not in threads_seen


def test_decode_chunk_equals_the_library_output() -> None:
    """lz4 frames and zstd frames without a content size (what the Java producer writes)."""
    import zstandard

    values = [bytes([i % 251]) * (900 + i) for i in range(300)]
    records = [NewRecord(b"k%d" % i, value) for i, value in enumerate(values)]
    for codec in (Compression.LZ4, Compression.ZSTD):
        batch = encode_batch(records, compression=codec)
        if codec == Compression.ZSTD:
            # Re-frame as a stream without the content size, as Java's ZstdOutputStream does.
            raw = _records_section(batch)
            stream = zstandard.ZstdCompressor(write_content_size=False).compressobj()
            framed = stream.compress(raw) + stream.flush()
            unknown = zstandard.CONTENTSIZE_UNKNOWN
            assert zstandard.get_frame_parameters(framed).content_size == unknown
            batch = _with_section(batch, framed)
        columns, _ = decode_chunk(_chunk(batch), FetchConfig(), False)
        assert columns.values.to_pylist() == values
        assert columns.keys.to_pylist() == [b"k%d" % i for i in range(300)]


def _records_section(batch: bytes) -> bytes:
    """The uncompressed records section of ``batch`` (lz4/zstd library output, decoded by it)."""
    import lz4.frame
    import zstandard

    section = batch[61:]
    codec = batch[22] & 7  # attributes, low byte
    if codec == Compression.LZ4:
        return lz4.frame.decompress(section)
    return zstandard.ZstdDecompressor().decompressobj().decompress(section)


def _with_section(batch: bytes, section: bytes) -> bytes:
    """``batch`` with its records section replaced (length and CRC-32C recomputed)."""
    import struct

    import crc32c

    body = bytearray(batch[:61] + section)
    struct.pack_into(">i", body, 8, len(body) - 12)
    struct.pack_into(">I", body, 17, crc32c.crc32c(bytes(body[21:])))
    return bytes(body)


def test_a_capped_scan_returns_its_area_and_the_next_chunk_decodes() -> None:
    config = FetchConfig(max_decompressed_bytes=1_000_000)
    bomb = encode_batch([NewRecord(b"k", bytes(4_000_000))], compression=Compression.ZSTD)
    chunk_decode._free_areas.clear()
    with pytest.raises(DecodeError, match="decompressed data would exceed 1000000 bytes"):
        scan_chunk(_chunk(bomb), config, False, walk_records=False)
    assert len(chunk_decode._free_areas) == 1 and chunk_decode._free_areas[0].used == 0
    name = "golden-zstd.bin"
    columns, _ = decode_chunk(_chunk((GOLDEN / name).read_bytes(), name), config, False)
    _assert_written(columns, name)



def test_which_chunks_a_decode_thread_takes() -> None:
    import random

    rnd = random.Random(5)
    large = [NewRecord(b"k", rnd.randbytes(600)) for _ in range(20)]  # incompressible
    small = [NewRecord(b"k", b"v" * 60) for _ in range(200)]
    assert not worth_scanning_ahead(encode_batch(large))  # uncompressed: CRC only
    assert not worth_scanning_ahead(encode_batch(small, compression=Compression.ZSTD))
    assert worth_scanning_ahead(encode_batch(large, compression=Compression.ZSTD))
    assert worth_scanning_ahead(encode_batch(large, compression=Compression.GZIP))
    assert not worth_scanning_ahead(encode_batch(large, compression=Compression.LZ4))
    assert not worth_scanning_ahead(encode_batch(large, compression=Compression.SNAPPY))
    assert not worth_scanning_ahead(b"")
    assert not worth_scanning_ahead(encode_batch(large, compression=Compression.ZSTD)[:40])
    legacy = bytearray(encode_batch(large, compression=Compression.ZSTD))
    legacy[16] = 1  # magic 1: the per-record path
    assert not worth_scanning_ahead(legacy)


def test_which_chunks_a_helper_receives_during() -> None:
    import random

    from kafka_ds.client.chunk_decode import RECEIVE_AHEAD_MIN_BYTES, worth_receiving_ahead

    rnd = random.Random(6)
    records = [NewRecord(b"k", rnd.randbytes(1000)) for _ in range(1200)]  # ~1.2 MB
    for codec in (Compression.LZ4, Compression.ZSTD, Compression.GZIP, Compression.SNAPPY):
        batch = encode_batch(records, compression=codec)
        assert len(batch) >= RECEIVE_AHEAD_MIN_BYTES
        assert worth_receiving_ahead(batch), codec
        # Too small a chunk: the hand-off would cost about what it saves.
        assert not worth_receiving_ahead(encode_batch(records[:100], compression=codec))
    # Uncompressed: decoding never releases the GIL for long, the helper would only wait.
    assert not worth_receiving_ahead(encode_batch(records))
    legacy = bytearray(encode_batch(records, compression=Compression.LZ4))
    legacy[16] = 1  # magic 1: not a v2 batch
    assert not worth_receiving_ahead(legacy)
