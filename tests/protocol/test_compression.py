"""Record compression codecs: round trips both ways, Kafka framings, the decompressed-size cap."""

from __future__ import annotations

import gzip
import os
import struct
import zlib

import cramjam
import lz4.block
import lz4.frame
import pytest
import zstandard
from record_samples import xxh32 as _xxh32

from kafka_ds.protocol.compression import Compression, compress, decompress, decompress_lz4_into
from kafka_ds.protocol.errors import DecodeError, EncodeError

CODECS = list(Compression)
SAMPLES = [
    b"",
    b"x",
    b"kafka " * 1000,
    os.urandom(5000),
    (b"abc" * 40000) + os.urandom(70000),  # several snappy/lz4 blocks
]
CAP = 1 << 24


def test_xxh32_reference_value() -> None:
    # Published test vector: XXH32("", 0) = 0x02CC5D05.
    assert _xxh32(b"") == 0x02CC5D05


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("sample", range(len(SAMPLES)))
def test_round_trip(codec: Compression, sample: int) -> None:
    data = SAMPLES[sample]
    assert decompress(codec, compress(codec, data), CAP) == data


@pytest.mark.parametrize("sample", range(len(SAMPLES)))
def test_ours_read_by_the_reference_libraries(sample: int) -> None:
    data = SAMPLES[sample]
    assert gzip.decompress(compress(Compression.GZIP, data)) == data
    assert lz4.frame.decompress(compress(Compression.LZ4, data)) == data
    assert zstandard.ZstdDecompressor().decompressobj().decompress(
        compress(Compression.ZSTD, data)) == data
    framed = compress(Compression.SNAPPY, data)
    assert framed[:16] == b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
    blocks, pos = [], 16
    while pos < len(framed):
        (size,) = struct.unpack_from(">i", framed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(framed[pos + 4:pos + 4 + size])))
        pos += 4 + size
    assert b"".join(blocks) == data
    assert all(len(block) <= 32 * 1024 for block in blocks)


@pytest.mark.parametrize("sample", range(len(SAMPLES)))
def test_reference_libraries_read_by_us(sample: int) -> None:
    data = SAMPLES[sample]
    assert decompress(Compression.GZIP, gzip.compress(data), CAP) == data
    assert decompress(Compression.LZ4, lz4.frame.compress(data), CAP) == data  # content size
    assert decompress(Compression.LZ4, lz4.frame.compress(data, block_linked=True), CAP) == data
    assert decompress(Compression.ZSTD, zstandard.ZstdCompressor().compress(data), CAP) == data
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert decompress(Compression.ZSTD, no_size, CAP) == data
    # Plain raw snappy (no xerial framing), as some non-Java producers write.
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(data)), CAP) == data


def test_concatenated_frames_and_members() -> None:
    assert decompress(Compression.GZIP, gzip.compress(b"ab") + gzip.compress(b"cd"), CAP) == b"abcd"
    two_zstd = zstandard.ZstdCompressor().compress(b"ab") + zstandard.ZstdCompressor(
        write_content_size=False).compress(b"cd")
    assert decompress(Compression.ZSTD, two_zstd, CAP) == b"abcd"
    assert decompress(Compression.LZ4, lz4.frame.compress(b"ab") + lz4.frame.compress(b"cd"),
                      CAP) == b"abcd"


def test_xerial_header_with_little_endian_version_ints() -> None:
    # Some producers write the version ints little-endian; only the magic is checked.
    block = bytes(cramjam.snappy.compress_raw(b"hello"))
    framed = b"\x82SNAPPY\x00" + struct.pack("<ii", 1, 1) + struct.pack(">i", len(block)) + block
    assert decompress(Compression.SNAPPY, framed, CAP) == b"hello"


def test_gzip_level_and_defaults() -> None:
    data = b"level " * 1000
    assert len(compress(Compression.GZIP, data, level=1)) >= len(compress(Compression.GZIP, data))
    assert compress(Compression.NONE, bytearray(b"ab")) == b"ab"
    assert zlib.decompress(compress(Compression.GZIP, b"x"), 31) == b"x"


def test_unknown_codec() -> None:
    with pytest.raises(DecodeError, match="unknown codec id 5"):
        decompress(5, b"", CAP)
    with pytest.raises(EncodeError):
        compress(7, b"")


@pytest.mark.parametrize("codec", [c for c in CODECS if c != Compression.NONE],
                         ids=lambda c: c.name)
def test_truncated_and_garbage_input(codec: Compression) -> None:
    data = compress(codec, SAMPLES[4])
    for cut in (1, 5, 17, len(data) // 2, len(data) - 1):
        with pytest.raises(DecodeError):
            decompress(codec, data[:cut], CAP)
    with pytest.raises(DecodeError):
        decompress(codec, b"\x00" * 40, CAP)
    with pytest.raises(DecodeError):
        decompress(codec, b"", CAP) if codec != Compression.SNAPPY else decompress(
            codec, b"\xff\xff\xff\xff\x0f", CAP)


@pytest.mark.parametrize("codec", [c for c in CODECS if c != Compression.NONE],
                         ids=lambda c: c.name)
def test_decompression_bomb_is_refused(codec: Compression) -> None:
    bomb = compress(codec, bytes(64 << 20))  # 64 MiB of zeros
    assert len(bomb) < 4 << 20
    with pytest.raises(DecodeError, match="exceeds the cap of 1048576 bytes"):
        decompress(codec, bomb, 1 << 20)
    assert len(decompress(codec, compress(codec, bytes(1 << 20)), 1 << 20)) == 1 << 20


def test_zstd_bomb_without_content_size_is_stopped_early() -> None:
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(256 << 20))
    with pytest.raises(DecodeError, match="exceeds the cap"):
        decompress(Compression.ZSTD, bomb, 1 << 20)


def test_none_codec_respects_the_cap() -> None:
    with pytest.raises(DecodeError, match="cap"):
        decompress(Compression.NONE, b"abc", 2)


def _broken_checksum_frame(data: bytes) -> bytes:
    """An LZ4 frame as Kafka 0.8/0.9 wrote it: header checksum over magic + FLG + BD."""
    frame = bytearray(lz4.frame.compress(data, store_size=False, block_linked=False))
    frame[6] = (_xxh32(bytes(frame[0:6])) >> 8) & 0xFF
    return bytes(frame)


def test_legacy_lz4_broken_header_checksum() -> None:
    data = b"old kafka " * 3000 + os.urandom(100)
    frame = bytearray(lz4.frame.compress(data, store_size=False, block_linked=False))
    # Our xxh32 reproduces the standard checksum: (xxh32(FLG, BD) >> 8) & 0xFF.
    assert frame[6] == (_xxh32(bytes(frame[4:6])) >> 8) & 0xFF
    broken = _broken_checksum_frame(data)
    if broken[6] != frame[6]:
        with pytest.raises(DecodeError):
            decompress(Compression.LZ4, broken, CAP)
    assert decompress(Compression.LZ4, broken, CAP, legacy_lz4_header=True) == data
    # Blocks stored uncompressed, block checksums and content sizes are walked too.
    incompressible = os.urandom(200_000)
    framed = lz4.frame.compress(incompressible, block_checksum=True, store_size=True,
                                block_linked=False)
    assert decompress(Compression.LZ4, framed, CAP, legacy_lz4_header=True) == incompressible
    with pytest.raises(DecodeError, match="cap"):
        decompress(Compression.LZ4, _broken_checksum_frame(bytes(1 << 20)), 1000,
                   legacy_lz4_header=True)
    for cut in (3, 7, 12, len(broken) - 2):
        with pytest.raises(DecodeError):
            decompress(Compression.LZ4, broken[:cut], CAP, legacy_lz4_header=True)


def test_lz4_block_api_is_what_the_legacy_path_uses() -> None:
    # Guard for the legacy LZ4 walker: lz4.block accepts a size bound and a dictionary.
    raw = lz4.block.compress(b"abc" * 10, store_size=False)
    assert lz4.block.decompress(raw, uncompressed_size=100, dict=b"") == b"abc" * 10


def _lz4_into(data: bytes, size: int) -> tuple[int | None, bytes]:
    out = bytearray(size)
    written = decompress_lz4_into(data, out)
    return written, bytes(out[:written or 0])


@pytest.mark.parametrize("sample", range(len(SAMPLES)))
def test_lz4_into_a_buffer_round_trips(sample: int) -> None:
    data = SAMPLES[sample]
    framed = compress(Compression.LZ4, data)
    assert _lz4_into(framed, len(data)) == (len(data), data)  # exactly the size
    assert _lz4_into(framed, len(data) + 100) == (len(data), data)  # room to spare
    # Frames one after another, as python-lz4's decoder accepts them too.
    twice = framed + lz4.frame.compress(b"tail", content_checksum=True)
    assert _lz4_into(twice, len(data) + 10) == (len(data) + 4, data + b"tail")


def test_lz4_into_a_buffer_too_small_says_so() -> None:
    # None, not an error: the caller retries larger. This pins how cramjam words "output
    # full" (_CRAMJAM_OUTPUT_FULL); if a new version words it otherwise, this fails instead of
    # every batch larger than the first guess being reported as corrupt.
    data = SAMPLES[4]
    framed = compress(Compression.LZ4, data)
    for size in (0, 1, len(data) // 2, len(data) - 1):
        assert decompress_lz4_into(framed, bytearray(size)) is None
    with_size = lz4.frame.compress(data, store_size=True)
    assert decompress_lz4_into(with_size, bytearray(len(data) - 1)) is None


def test_lz4_into_a_buffer_refuses_corrupt_input() -> None:
    data = SAMPLES[4]
    framed = compress(Compression.LZ4, data)
    for cut in (1, 5, 17, len(framed) // 2, len(framed) - 1):
        with pytest.raises(DecodeError, match="LZ4"):
            decompress_lz4_into(framed[:cut], bytearray(len(data)))
    with pytest.raises(DecodeError, match="LZ4"):
        decompress_lz4_into(b"\x00" * 40, bytearray(1000))
    checked = bytearray(lz4.frame.compress(data, content_checksum=True))
    checked[-1] ^= 0xFF  # the content checksum no longer matches
    with pytest.raises(DecodeError, match="LZ4"):
        decompress_lz4_into(bytes(checked), bytearray(len(data)))
