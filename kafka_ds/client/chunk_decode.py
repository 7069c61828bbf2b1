"""Decoding one fetched chunk (a partition's records bytes) into ``RecordColumns``.

Layer: client. Split from ``fetch_loop`` because part of it runs off the fetching thread.
Decoding has two steps (``record_columns``): ``scan_chunk`` walks the batch headers, checks
the CRCs and decompresses into a ``DecodeArea``, nearly all of it GIL-free C (crc32c, lz4,
zstd); ``finish_chunk`` then parses the records and builds the Arrow columns, mostly
GIL-bound Python and numpy. With ``decode.threads`` a pool scans the chunks of the responses
as they arrive while the fetching thread finishes the chunk before them, so decompression
overlaps record parsing, the network and the caller instead of queueing behind them (two
threads each decoding whole chunks would fight for the GIL over the parsing instead). Only
chunks where decompression weighs go to the pool (``worth_scanning_ahead``); ``decode_chunk``
does both steps in the calling thread.
"""

from __future__ import annotations

import time

from kafka_ds.client.fetch_config import FetchConfig
from kafka_ds.client.fetch_state import Chunk
from kafka_ds.protocol.compression import Buffer, Compression
from kafka_ds.protocol.read_committed import filter_committed
from kafka_ds.protocol.record_columns import (
    DecodeArea,
    DecodeOptions,
    RecordColumns,
    ScannedBuffer,
    finish_columns,
    scan_buffer,
)
from kafka_ds.protocol.records import (
    COMPRESSION_MASK,
    HEADER_BYTES,
    HEADER_STRUCT,
    MAGIC_OFFSET,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    RecordBatchHeader,
)

# Areas kept between chunks (a kept area is already mapped: a fresh multi-MiB one costs a page
# fault per 4 KiB). A scanned chunk owns its area until it is finished, so several may be out
# at once; list.pop and list.append are atomic, so the pool needs no lock.
_free_areas: list[DecodeArea] = []
_KEEP_AREAS = 4

Scanned = ScannedBuffer | RecordColumns

# Scanning ahead in a thread pays where decompression is a large share of decoding and runs in
# long GIL-free calls: zstd and gzip batches whose records take this many compressed bytes or
# more each (1 KB zstd records: the fetching thread's CPU per record 900 -> 500 ns). Not lz4 or
# snappy: they decompress about 3x faster (lz4 7 GB/s here), so the thread's many short
# GIL-free calls each wait for the GIL while the fetching thread parses; 1 KB lz4 records lost
# 20-40 % that way, and 100 B records of any codec up to 20 % to the hand-off.
AHEAD_MIN_RECORD_BYTES = 128
_SLOW_CODECS = frozenset({Compression.ZSTD, Compression.GZIP})


# Chunks of at least this many bytes are decoded while a helper thread receives the response
# in flight (``fetch_receive``), when their first batch is compressed: the helper then gets the
# GIL while decompression releases it. Uncompressed 1 KB records lost 10 % that way (the
# helper waited for the GIL and forced switches: 600 -> 780 ns CPU per record), and below
# 1 MiB the hand-off costs about what it saves.
RECEIVE_AHEAD_MIN_BYTES = 1 << 20


def _first_batch(records: Buffer) -> RecordBatchHeader | None:
    if len(records) < HEADER_BYTES or records[MAGIC_OFFSET] != MAGIC_V2:
        return None
    return RecordBatchHeader._make(HEADER_STRUCT.unpack_from(records))


def worth_scanning_ahead(records: Buffer) -> bool:
    """Should a decode thread scan this chunk? Judged by its first batch: zstd or gzip, with
    at least ``AHEAD_MIN_RECORD_BYTES`` of compressed data per record."""
    header = _first_batch(records)
    if header is None or header.attributes & COMPRESSION_MASK not in _SLOW_CODECS:
        return False
    records_bytes = header.batch_length - MIN_BATCH_LENGTH
    return 0 < header.record_count * AHEAD_MIN_RECORD_BYTES <= records_bytes


def worth_receiving_ahead(records: Buffer) -> bool:
    """Should a helper thread receive while this chunk is decoded? At least
    ``RECEIVE_AHEAD_MIN_BYTES``, and its first batch compressed."""
    if len(records) < RECEIVE_AHEAD_MIN_BYTES:
        return False
    header = _first_batch(records)
    return header is not None and header.attributes & COMPRESSION_MASK != Compression.NONE


def _take_area() -> DecodeArea:
    try:
        return _free_areas.pop()
    except IndexError:
        return DecodeArea()


def _give_back(area: DecodeArea) -> None:
    if len(_free_areas) < _KEEP_AREAS:
        _free_areas.append(area)


def scan_chunk(chunk: Chunk, config: FetchConfig, include_headers: bool, *,
               walk_records: bool) -> tuple[Scanned, int]:
    """Step 1 of decoding ``chunk``; returns what ``finish_chunk`` takes and the nanoseconds.

    ``walk_records`` (``scan_buffer``) only where step 2 follows in the same thread: the
    decode pool passes False and leaves the Python record walk to the fetching thread. No
    default, as each caller's answer depends on which thread it runs in."""
    started_ns = time.perf_counter_ns()
    part = chunk.part
    assert part is not None
    area = _take_area()
    try:
        options = DecodeOptions(
            start_offset=chunk.fetch_offset, end_offset=part.end, include_headers=include_headers,
            max_decompressed_bytes=config.max_decompressed_bytes, topic=part.tp.topic,
            partition=part.tp.partition, verify_crc=config.check_crcs)
        scanned = scan_buffer(chunk.records, options, budget=chunk.budget, area=area,
                              walk_records=walk_records)
    except BaseException:
        area.release()
        _give_back(area)
        raise
    if isinstance(scanned, RecordColumns):  # a legacy message set, already decoded
        _give_back(area)
    return scanned, time.perf_counter_ns() - started_ns


def finish_chunk(chunk: Chunk, scanned: Scanned, config: FetchConfig) -> tuple[RecordColumns, int]:
    """Step 2: the chunk's columns (aborted transactions dropped under
    read_committed) and the nanoseconds it took. Gives the scanned chunk's area back."""
    started_ns = time.perf_counter_ns()
    if isinstance(scanned, RecordColumns):
        columns = scanned
    else:
        try:
            columns = finish_columns(scanned)
        finally:
            _give_back(scanned.area)
    if config.read_committed and chunk.aborted:
        columns = filter_committed(columns, chunk.aborted)
    return columns, time.perf_counter_ns() - started_ns


def decode_chunk(chunk: Chunk, config: FetchConfig,
                 include_headers: bool) -> tuple[RecordColumns, int]:
    """Both steps in the calling thread: the columns and the nanoseconds it took."""
    scanned, scan_ns = scan_chunk(chunk, config, include_headers, walk_records=True)
    columns, finish_ns = finish_chunk(chunk, scanned, config)
    return columns, scan_ns + finish_ns
