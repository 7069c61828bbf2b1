"""The LZ4 frames we write, checked field by field against the frame format and read back by
outside decoders (python-lz4's block and frame APIs, kafka-python's record batch reader).

Our frames use 256 KiB blocks where Java's producer uses 64 KiB ones (see
``compression._compress_lz4``): these tests pin that layout and that readers other than ours
take it. The header checksum is recomputed with a test-only xxHash32 (``record_samples``),
not with the library that wrote it.
"""

from __future__ import annotations

import hashlib
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
BD_64_KIB, BD_256_KIB = 0x40, 0x50
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
def test_a_large_section_is_one_frame_of_independent_256_kib_blocks(values: list[bytes]) -> None:
    section = encode_section(values, [BASE_MS] * len(values))
    assert len(section) > 3 * 256 * 1024  # several blocks
    frame = compress(Compression.LZ4, section)
    flg, bd, blocks = _walk(frame)
    assert (flg, bd) == (FLG_VERSION_01_INDEPENDENT, BD_256_KIB)
    # Each block decodes on its own (independent), to at most 256 KiB, in order.
    decoded = [lz4.block.decompress(block, uncompressed_size=256 * 1024) if compressed
               else block for compressed, block in blocks]
    assert all(len(piece) == 256 * 1024 for piece in decoded[:-1])
    assert b"".join(decoded) == section
    assert lz4.frame.decompress(frame) == section


def test_a_small_section_keeps_64_kib_blocks() -> None:
    section = encode_section(_hex_values(500), [BASE_MS] * 500)
    assert len(section) < 64 * 1024
    frame = compress(Compression.LZ4, section)
    flg, bd, blocks = _walk(frame)
    assert (flg, bd) == (FLG_VERSION_01_INDEPENDENT, BD_64_KIB)
    assert len(blocks) == 1 and lz4.frame.decompress(frame) == section


def test_kafka_python_reads_a_large_lz4_batch() -> None:
    values = _hex_values(9000)
    timestamps = [BASE_MS + i // 100 for i in range(len(values))]
    section = encode_section(values, timestamps)
    encoded = assemble_batch(
        section, attributes=batch_attributes(Compression.LZ4, 0, True, False),
        record_count=len(values), last_offset_delta=len(values) - 1, base_offset=0,
        base_timestamp_ms=timestamps[0], max_timestamp_ms=timestamps[-1], producer_id=7,
        producer_epoch=1, base_sequence=0)
    assert encoded[61 + 5] == BD_256_KIB  # the frame starts right after the batch header
    batch = DefaultRecordBatch(encoded)
    assert batch.validate_crc()
    assert batch.compression_type == Compression.LZ4 and batch.is_transactional
    records = list(batch)
    assert [r.value for r in records] == values
    assert [r.timestamp for r in records] == timestamps
    assert [r.offset for r in records] == list(range(len(values)))
