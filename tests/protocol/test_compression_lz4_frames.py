"""The LZ4 frames we write, checked field by field against the frame format and read back by
outside decoders (python-lz4's block and frame APIs, kafka-python's record batch reader).

We frame blocks ourselves (``compression._compress_lz4``) in Java's layout: independent 64 KiB
blocks, no checksums, no content size. The header checksum is recomputed with a test-only
xxHash32 (``record_samples``), not taken from the code under test.
"""

from __future__ import annotations

import hashlib
import os
import random
import struct

import lz4.block
import lz4.frame
import pytest
from kafka.record.default_records import DefaultRecordBatch
from record_samples import xxh32

from kafka_ds.protocol.batch_encoder import encode_section
from kafka_ds.protocol.compression import Compression, compress
from kafka_ds.protocol.record_builder import assemble_batch, batch_attributes

LZ4_MAGIC = 0x184D2204
FLG_VERSION_01_INDEPENDENT = 0x60  # version 01, independent blocks, no checksums, no size
BD_64_KIB = 0x40
BLOCK_BYTES = 64 * 1024
UNCOMPRESSED_BLOCK = 0x80000000
BASE_MS = 1_800_000_000_000


def _hex_values(count: int) -> list[bytes]:
    """100 B values as the Spark sink benchmark writes them: a row number, then hex digits."""
    return [(b"%012d" % i + hashlib.sha256(b"%d" % (i % 4096)).hexdigest().encode() * 2)[:100]
            for i in range(count)]


def _json_values(count: int) -> list[bytes]:
    """JSON-like values of 50-150 B, as the fetch benchmarks' payload file."""
    rng = random.Random(100)
    words = ["user", "order", "click", "view", "cart", "pay", "ok"]
    out = []
    for index in range(count):
        length = rng.randint(50, 150)
        text = (f'{{"id":{index},"event":"{words[index % 7]}","session":'
                f'"{rng.getrandbits(64):016x}","data":"'
                + "".join(rng.choices("abcdefghijklmnopqrstuvwxyz ", k=length)))
        out.append((text[:length - 2] + '"}').encode())
    return out


def _walk(frame: bytes) -> tuple[int, int, list[tuple[bool, bytes]]]:
    """FLG, BD and the blocks (compressed?, bytes) of one frame; asserts the header checksum
    and that nothing follows the end mark."""
    assert struct.unpack_from("<I", frame, 0)[0] == LZ4_MAGIC
    flg, bd, checksum = frame[4], frame[5], frame[6]
    assert checksum == (xxh32(frame[4:6]) >> 8) & 0xFF  # over FLG and BD (KIP-57)
    blocks = []
    pos = 7
    while True:
        (size,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if size == 0:
            break
        raw = bool(size & UNCOMPRESSED_BLOCK)
        size &= ~UNCOMPRESSED_BLOCK
        blocks.append((not raw, frame[pos:pos + size]))
        pos += size
    assert pos == len(frame)
    return flg, bd, blocks


@pytest.mark.parametrize("values", [_hex_values(10_000), _json_values(10_000)],
                         ids=["hex", "json"])
@pytest.mark.parametrize("level", [None, 1, 9])
def test_a_large_section_is_one_frame_of_independent_64_kib_blocks(
        values: list[bytes], level: int | None) -> None:
    section = encode_section(values, [BASE_MS] * len(values))
    assert len(section) > 3 * BLOCK_BYTES  # several blocks
    frame = compress(Compression.LZ4, section, level)
    flg, bd, blocks = _walk(frame)
    assert (flg, bd) == (FLG_VERSION_01_INDEPENDENT, BD_64_KIB)
    assert all(compressed for compressed, _ in blocks)
    # Each block decodes on its own (independent), to 64 KiB except the last, in order.
    decoded = [lz4.block.decompress(block, uncompressed_size=BLOCK_BYTES)
               for _, block in blocks]
    assert all(len(piece) == BLOCK_BYTES for piece in decoded[:-1])
    assert b"".join(decoded) == section
    assert lz4.frame.decompress(frame) == section


def test_lz4_levels_as_liblz4_reads_them() -> None:
    # Fast mode by default and below 3 (the blocks liblz4's own block compressor makes at
    # acceleration 1), LZ4HC from 3 (smaller), more acceleration below 0.
    section = encode_section(_json_values(2000), [BASE_MS] * 2000)
    chunks = [section[start:start + BLOCK_BYTES]
              for start in range(0, len(section), BLOCK_BYTES)]
    fast = [lz4.block.compress(chunk, store_size=False) for chunk in chunks]
    for level in (None, 0, 1, 2):
        assert [block for _, block in _walk(compress(Compression.LZ4, section, level))[2]] \
            == fast
    high = compress(Compression.LZ4, section, 9)
    assert len(high) < sum(map(len, fast)) and lz4.frame.decompress(high) == section
    assert lz4.frame.decompress(compress(Compression.LZ4, section, -8)) == section


@pytest.mark.parametrize("size", [0, 1, BLOCK_BYTES - 1, BLOCK_BYTES, BLOCK_BYTES + 1,
                                  3 * BLOCK_BYTES + 17])
def test_incompressible_blocks_are_stored_as_is(size: int) -> None:
    data = os.urandom(size)
    frame = compress(Compression.LZ4, data)
    flg, bd, blocks = _walk(frame)
    assert (flg, bd) == (FLG_VERSION_01_INDEPENDENT, BD_64_KIB)
    assert [compressed for compressed, _ in blocks] == [False] * len(blocks)
    assert [len(block) for _, block in blocks] == [
        min(BLOCK_BYTES, size - start) for start in range(0, size, BLOCK_BYTES)]
    assert b"".join(block for _, block in blocks) == data
    assert lz4.frame.decompress(frame) == data


def test_a_frame_mixes_stored_and_compressed_blocks() -> None:
    text = (b"kafka " * BLOCK_BYTES)[:BLOCK_BYTES]
    data = text + os.urandom(BLOCK_BYTES) + text + text[:1000]
    frame = compress(Compression.LZ4, data)
    assert [compressed for compressed, _ in _walk(frame)[2]] == [True, False, True, True]
    assert lz4.frame.decompress(frame) == data


def test_kafka_python_reads_a_large_lz4_batch() -> None:
    values = _hex_values(9000)
    timestamps = [BASE_MS + i // 100 for i in range(len(values))]
    section = encode_section(values, timestamps)
    encoded = assemble_batch(
        section, attributes=batch_attributes(Compression.LZ4, 0, True, False),
        record_count=len(values), last_offset_delta=len(values) - 1, base_offset=0,
        base_timestamp_ms=timestamps[0], max_timestamp_ms=timestamps[-1], producer_id=7,
        producer_epoch=1, base_sequence=0)
    # The frame starts right after the 61-byte batch header.
    assert encoded[61 + 4:61 + 6] == bytes([FLG_VERSION_01_INDEPENDENT, BD_64_KIB])
    batch = DefaultRecordBatch(encoded)
    assert batch.validate_crc()
    assert batch.compression_type == Compression.LZ4 and batch.is_transactional
    records = list(batch)
    assert [r.value for r in records] == values
    assert [r.timestamp for r in records] == timestamps
    assert [r.offset for r in records] == list(range(len(values)))
