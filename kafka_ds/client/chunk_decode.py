"""Decoding one fetched chunk (a partition's records bytes) into ``RecordColumns``.

Layer: client. Split from ``fetch_loop`` because it is the one part of a read that runs off
the fetching thread: with ``decode.threads`` a pool calls ``decode_chunk`` while the loop goes
on with the network. It touches nothing but its arguments and a per-thread ``DecodeArea``
(numpy, Arrow, zstd, lz4 and crc32c release the GIL for most of it, which is what a decode
thread overlaps with the network and the caller).
"""

from __future__ import annotations

import threading
import time

from kafka_ds.client.fetch_config import FetchConfig
from kafka_ds.client.fetch_state import Chunk
from kafka_ds.protocol.read_committed import filter_committed
from kafka_ds.protocol.record_columns import DecodeArea, RecordColumns, decode_columns

# Each thread decompresses into one DecodeArea, kept from one response (and read) to the next.
_decode_areas = threading.local()


def _decode_area() -> DecodeArea:
    area: DecodeArea | None = getattr(_decode_areas, "area", None)
    if area is None:
        area = _decode_areas.area = DecodeArea()
    return area


def decode_chunk(chunk: Chunk, config: FetchConfig,
                 include_headers: bool) -> tuple[RecordColumns, int]:
    """Decode one chunk (aborted transactions dropped under read_committed); returns the
    columns and the nanoseconds it took."""
    started_ns = time.perf_counter_ns()
    part = chunk.part
    assert part is not None
    columns = decode_columns(
        chunk.records, start_offset=chunk.fetch_offset, end_offset=part.end,
        include_headers=include_headers,
        max_decompressed_bytes=config.max_decompressed_bytes, topic=part.tp.topic,
        partition=part.tp.partition, verify_crc=config.check_crcs, budget=chunk.budget,
        area=_decode_area())
    if config.read_committed and chunk.aborted:
        columns = filter_committed(columns, chunk.aborted)
    return columns, time.perf_counter_ns() - started_ns
