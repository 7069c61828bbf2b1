"""One decompression budget per partition per response, whatever the message format.

The attack: a buffer of many small gzip wrappers (magic 0/1) or v2 batches, each inflating to
a lot. A cap per wrapper lets 9 KB of gzip become 8 MiB under a 2 MiB cap (and about 4 GiB at
the default partition fetch size); the budget must hold for the buffer as a whole, and the
fetcher's response budget for all partitions together.
"""

from __future__ import annotations

import os
import struct

import lz4.frame
import pytest
import zstandard
from kafka.codec import lz4_encode
from record_samples import legacy_message, legacy_wrapper

from kafka_ds.protocol import decompression_budget
from kafka_ds.protocol.compression import Compression, compress
from kafka_ds.protocol.decompression_budget import DecompressionBudget
from kafka_ds.protocol.errors import DecodeError
from kafka_ds.protocol.record_builder import NewRecord, encode_batch
from kafka_ds.protocol.record_columns import decode_columns
from kafka_ds.protocol.record_columns_legacy import decode_columns_per_record
from kafka_ds.protocol.records import iter_batches

MIB = 1024 * 1024


def _bomb_wrappers(count: int, first_offset: int = 0) -> bytes:
    """``count`` gzip wrappers, each holding one message whose value is 1 MiB of zeros:
    about a kilobyte each on the wire."""
    parts = []
    for index in range(count):
        inner = legacy_message(1, 0, None, bytes(MIB), offset=0)
        parts.append(legacy_wrapper(inner, Compression.GZIP, offset=first_offset + index))
    return b"".join(parts)


def test_gzip_wrappers_share_one_budget_per_partition() -> None:
    buf = _bomb_wrappers(8)
    assert len(buf) < 16 * 1024  # a few KB on the wire ...
    # ... fits a generous cap (8 MiB of values plus message overhead) ...
    assert len(decode_columns(buf, max_decompressed_bytes=9 * MIB)) == 8
    # ... but not a 2 MiB one, which each wrapper alone (1 MiB) would pass.
    with pytest.raises(DecodeError, match=r"2097152 bytes \(max_decompressed_bytes"):
        decode_columns(buf, max_decompressed_bytes=2 * MIB)


def test_the_per_record_path_and_iter_batches_share_it_too() -> None:
    buf = _bomb_wrappers(4)
    with pytest.raises(DecodeError, match="2097152"):
        decode_columns_per_record(buf, max_decompressed_bytes=2 * MIB)
    with pytest.raises(DecodeError, match="2097152"):
        for batch in iter_batches(buf, max_decompressed_bytes=2 * MIB):
            list(batch)


def test_v2_batches_and_legacy_wrappers_draw_on_the_same_budget() -> None:
    v2 = encode_batch([NewRecord(None, bytes(MIB))], base_offset=0,
                      compression=Compression.GZIP)
    mixed = v2 + _bomb_wrappers(1, first_offset=1)
    assert len(decode_columns(mixed, max_decompressed_bytes=3 * MIB)) == 2
    with pytest.raises(DecodeError, match="max_decompressed_bytes"):
        decode_columns(mixed, max_decompressed_bytes=int(1.5 * MIB))


def test_a_response_budget_bounds_all_partitions_together() -> None:
    partition = _bomb_wrappers(2)  # 2 MiB each: within a 3 MiB partition cap
    response = DecompressionBudget(5 * MIB, name="fetch.max.decompressed.response.bytes")
    decode_columns(partition, max_decompressed_bytes=3 * MIB, budget=response)
    decode_columns(partition, max_decompressed_bytes=3 * MIB, budget=response)
    assert response.spent_bytes > 4 * MIB
    with pytest.raises(DecodeError, match=r"fetch\.max\.decompressed\.response\.bytes"):
        decode_columns(partition, max_decompressed_bytes=3 * MIB, budget=response)


@pytest.mark.parametrize("codec", [Compression.ZSTD, Compression.LZ4], ids=lambda c: c.name)
def test_v2_batches_charge_the_response_budget(codec: Compression) -> None:
    batches = b"".join(encode_batch([NewRecord(None, bytes(MIB))], base_offset=offset,
                                    compression=codec) for offset in range(3))
    response = DecompressionBudget(2 * MIB, name="response cap")
    with pytest.raises(DecodeError, match="response cap"):
        decode_columns(batches, max_decompressed_bytes=4 * MIB, budget=response)


class _Reserved:
    """A ``reserve`` callback that records every size asked for (a fresh buffer each time)."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.last = bytearray()

    def __call__(self, size: int) -> memoryview:
        self.sizes.append(size)
        self.last = bytearray(size)
        return memoryview(self.last)


def test_lz4_into_grows_a_wrong_size_guess_until_it_fits() -> None:
    data = bytes(3 * MIB) + b"end"  # compresses to a few KB: the first guess (256 KiB) is short
    reserved = _Reserved()
    budget = DecompressionBudget(8 * MIB)
    # python-lz4's frame defaults (linked blocks, a content size), which the block path
    # declines: the frame decoder's guesses.
    framed = lz4.frame.compress(data)
    written = budget.decompress_into(Compression.LZ4, framed, reserved)
    assert written == len(data) and bytes(reserved.last[:written]) == data
    assert reserved.sizes == [256 * 1024, 512 * 1024, MIB, 2 * MIB, 4 * MIB]
    assert budget.spent_bytes == len(data)


def _no_frame_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(data: object, out: object) -> int:
        raise AssertionError("the frame decoder ran")

    monkeypatch.setattr(decompression_budget, "decompress_lz4_into", refuse)


@pytest.mark.parametrize("writer", ["ours", "python-lz4 64 KiB", "python-lz4 256 KiB",
                                    "python-lz4 4 MiB", "kafka-python"])
def test_lz4_into_decodes_javas_frame_layout_block_by_block_in_one_reservation(
        writer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Java's layout (independent blocks, no checksums, no content size), as our compressor
    # writes it (test_compression_lz4_frames checks it against the format) and as python-lz4,
    # an independent encoder, writes it when told to; text that compresses and random bytes
    # that do not (stored blocks), over several blocks.
    data = (_TEXT * 3)[:700_000] + os.urandom(200_000) + _TEXT[:100_000]
    block_bytes = {"ours": 64 << 10, "python-lz4 64 KiB": 64 << 10,
                   "python-lz4 256 KiB": 256 << 10, "python-lz4 4 MiB": 4 << 20,
                   "kafka-python": 64 << 10}[writer]
    if writer == "ours":
        framed = compress(Compression.LZ4, data)
    elif writer == "kafka-python":  # independent blocks and a content size (FLG 0x68)
        framed = lz4_encode(data)
        assert framed[4] == 0x68
    else:
        framed = lz4.frame.compress(
            data, block_size={64 << 10: lz4.frame.BLOCKSIZE_MAX64KB,
                              256 << 10: lz4.frame.BLOCKSIZE_MAX256KB,
                              4 << 20: lz4.frame.BLOCKSIZE_MAX4MB}[block_bytes],
            block_linked=False, content_checksum=False, store_size=False)
    _no_frame_decoder(monkeypatch)
    reserved = _Reserved()
    budget = DecompressionBudget(8 * MIB)
    assert budget.decompress_into(Compression.LZ4, framed, reserved) == len(data)
    assert bytes(reserved.last[:len(data)]) == data
    assert budget.spent_bytes == len(data)
    blocks = -(-len(data) // block_bytes)
    # One reservation: the most the blocks can hold (a stored block counts its own size).
    assert len(reserved.sizes) == 1
    assert len(data) <= reserved.sizes[0] <= blocks * block_bytes


def test_lz4_into_a_content_size_the_blocks_do_not_match_is_a_decode_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    framed = bytearray(lz4_encode(_TEXT[:100_000]))
    struct.pack_into("<Q", framed, 6, 99_999)  # the frame's content size, one byte short
    _no_frame_decoder(monkeypatch)
    with pytest.raises(DecodeError, match="100000 bytes decoded, the frame header says 99999"):
        DecompressionBudget(MIB).decompress_into(Compression.LZ4, bytes(framed), _Reserved())


def test_lz4_into_a_corrupt_block_in_javas_layout_is_a_decode_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A block of one sequence whose match offset is 0, which no LZ4 block may hold.
    header = compress(Compression.LZ4, b"")[:7]
    framed = header + (3).to_bytes(4, "little") + b"\x0f\x00\x00" + bytes(4)
    _no_frame_decoder(monkeypatch)
    with pytest.raises(DecodeError, match=r"LZ4 compressed data.*block at byte 11"):
        DecompressionBudget(MIB).decompress_into(Compression.LZ4, framed, _Reserved())


def test_lz4_into_never_asks_for_more_than_the_budget_allows() -> None:
    # The bomb: 64 MiB of zeros in well under a MiB. Memory handed out stays within the budget
    # (plus the one byte that tells "exactly full" from "more"), and the error names the cap.
    bomb = compress(Compression.LZ4, bytes(64 * MIB))
    assert len(bomb) < MIB
    reserved = _Reserved()
    budget = DecompressionBudget(2 * MIB, name="fetch.max.decompressed.bytes")
    with pytest.raises(DecodeError, match=r"2097152 bytes \(fetch\.max\.decompressed\.bytes"):
        budget.decompress_into(Compression.LZ4, bomb, reserved)
    assert max(reserved.sizes) == 2 * MIB + 1
    assert budget.spent_bytes == 0


@pytest.mark.parametrize("spare", [0, 1])
def test_lz4_into_fills_the_budget_exactly(spare: int) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB
    budget = DecompressionBudget(len(data) + spare)
    reserved = _Reserved()
    assert budget.decompress_into(Compression.LZ4, compress(Compression.LZ4, data),
                                  reserved) == len(data)
    assert bytes(reserved.last[:len(data)]) == data
    with pytest.raises(DecodeError, match="bytes"):  # nothing, or one byte, is left
        budget.decompress_into(Compression.LZ4, compress(Compression.LZ4, b"xy"), _Reserved())


def test_lz4_into_a_parent_budget_limits_too() -> None:
    response = DecompressionBudget(MIB, name="response cap")
    partition = DecompressionBudget(8 * MIB, parent=response)
    with pytest.raises(DecodeError, match="response cap"):
        partition.decompress_into(Compression.LZ4, compress(Compression.LZ4, bytes(2 * MIB)),
                                  _Reserved())


def test_lz4_into_corrupt_input_is_a_decode_error() -> None:
    framed = compress(Compression.LZ4, bytes(range(256)) * 100)
    with pytest.raises(DecodeError, match="LZ4"):
        DecompressionBudget(MIB).decompress_into(Compression.LZ4, framed[:len(framed) // 2],
                                                 _Reserved())


def _zstd_stream(data: bytes) -> bytes:
    """A zstd frame as the Java producer writes it (a stream: no content size in the header)."""
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    return compressor.compress(data) + compressor.flush()


_TEXT = b"".join(b"%08d " % index + os.urandom(8).hex().encode() * 3 for index in range(20_000))


@pytest.mark.parametrize("frames", ["stream", "sized", "two", "skippable"])
def test_zstd_into_writes_straight_into_the_reserved_views(frames: str) -> None:
    half = len(_TEXT) // 2
    data, expected = {
        "stream": (_zstd_stream(_TEXT), _TEXT),
        "sized": (compress(Compression.ZSTD, _TEXT), _TEXT),
        "two": (_zstd_stream(_TEXT[:half]) + _zstd_stream(_TEXT[half:]), _TEXT),
        # A skippable frame (magic 0x184D2A5?, a size, that many bytes) carries no output.
        "skippable": (bytes.fromhex("5a2a4d18") + (5).to_bytes(4, "little") + b"12345"
                      + _zstd_stream(_TEXT), _TEXT),
    }[frames]
    reserved = _Reserved()
    budget = DecompressionBudget(8 * MIB)
    assert budget.decompress_into(Compression.ZSTD, data, reserved) == len(expected)
    assert bytes(reserved.last[:len(expected)]) == expected
    assert budget.spent_bytes == len(expected)
    if frames == "sized":  # the frame states its size: one view, one byte to spare
        assert reserved.sizes == [len(expected) + 1]
    else:  # guessed (256 KiB or 4x the input), then doubled; what was written is carried over
        assert reserved.sizes[0] == max(256 * 1024, 4 * len(data))
        assert all(b == 2 * a for a, b in zip(reserved.sizes, reserved.sizes[1:], strict=False))


def test_zstd_into_stops_a_bomb_at_the_budget() -> None:
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(256 * MIB))
    reserved = _Reserved()
    budget = DecompressionBudget(2 * MIB, name="fetch.max.decompressed.bytes")
    with pytest.raises(DecodeError, match=r"2097152 bytes \(fetch\.max\.decompressed\.bytes"):
        budget.decompress_into(Compression.ZSTD, bomb, reserved)
    assert max(reserved.sizes) == 2 * MIB + 1
    assert budget.spent_bytes == 0
    sized = compress(Compression.ZSTD, bytes(4 * MIB))  # states its size: refused up front
    reserved = _Reserved()
    with pytest.raises(DecodeError, match=r"fetch\.max\.decompressed\.bytes"):
        budget.decompress_into(Compression.ZSTD, sized, reserved)
    assert reserved.sizes == []


@pytest.mark.parametrize("damage", ["truncated", "cut in the header", "trailing bytes",
                                    "not zstd", "reserved block type"])
def test_zstd_into_damaged_input_is_a_decode_error(damage: str) -> None:
    frame = _zstd_stream(_TEXT)
    data = {
        "truncated": frame[:-100],  # the stream reader alone would return a short output
        "cut in the header": frame[:5],
        "trailing bytes": frame + b"\x00\x01",
        "not zstd": b"\x00" * 100,
        # After magic, descriptor and window byte, the first block header: type 3 is reserved.
        "reserved block type": frame[:6] + bytes([frame[6] | 0b110]) + frame[7:],
    }[damage]
    with pytest.raises(DecodeError, match="ZSTD"):
        DecompressionBudget(8 * MIB).decompress_into(Compression.ZSTD, data, _Reserved())


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY], ids=lambda c: c.name)
def test_other_codecs_into_are_copied_under_the_same_budget(codec: Compression) -> None:
    data = bytes(range(256)) * 1000
    reserved = _Reserved()
    budget = DecompressionBudget(MIB)
    assert budget.decompress_into(codec, compress(codec, data), reserved) == len(data)
    assert reserved.sizes == [len(data)] and bytes(reserved.last) == data
    with pytest.raises(DecodeError, match="bytes"):
        DecompressionBudget(1000).decompress_into(codec, compress(codec, data), _Reserved())


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD], ids=["lz4", "zstd"])
def test_threads_sharing_a_response_budget_never_spend_the_same_bytes(
        codec: Compression) -> None:
    """Two decode threads, each within what remained when it started, must not both be charged
    the response budget's last bytes. The reserve callback holds both threads until each has
    checked what remains (what a pool on two cores does by chance), so the race always occurs.
    """
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    data = compress(codec, bytes(600_000))  # the real lz4 / zstandard libraries' output
    response = DecompressionBudget(1_000_000, name="fetch.max.decompressed.response.bytes",
                                   lock=threading.Lock())
    both_checked = threading.Barrier(2, timeout=60)

    def decode() -> int:
        budget = DecompressionBudget(10_000_000, parent=response)
        out = np.empty(2_000_000, dtype=np.uint8)
        waited = False

        def reserve(size: int) -> memoryview:
            nonlocal waited
            if not waited:  # called after remaining() was read, before the charge
                waited = True
                both_checked.wait()
            return out[:size].data

        return budget.decompress_into(codec, data, reserve)

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(decode), pool.submit(decode)]
        outcomes = [f.exception() for f in futures]
    errors = [e for e in outcomes if e is not None]
    assert len(errors) == 1, outcomes
    assert isinstance(errors[0], DecodeError)
    assert "fetch.max.decompressed.response.bytes" in str(errors[0])
    assert response.spent_bytes == 600_000
