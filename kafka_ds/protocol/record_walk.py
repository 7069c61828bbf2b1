"""Where the records of a records section start: the one per-record Python loop of decoding.

Layer: protocol (sans-IO). Imports ``records`` for a type. Used by ``record_columns_scan``
(each compressed batch walked right after it is decompressed, while its records are still in
the CPU cache) and ``record_columns_rows`` (the sections left to walk, and the exact walk that
names a fault).

Following the record length varints is sequential by nature: a record's start is known only
once the one before it has been read. The walk touches one cache line per record, so where the
bytes are matters: on 1 KB records it took 75 ns per record on bytes in the CPU cache and about
220 ns on bytes evicted to memory. Walked after the whole chunk was decompressed, 1 KB zstd
records cost 170-240 ns each to walk (zstd's window pushes them out of cache); walked batch by
batch during the scan, about 90 ns.
"""

from __future__ import annotations

from kafka_ds.protocol.records import Buffer

# Bytes a record occupies, read from the first byte b of its length varint: for a one-byte
# varint 1 + length; for a two-byte one, 2 + the low 6 length bits in b, and the second byte
# adds ``second << 6``. (Zigzag: length = varint >> 1; record lengths are never negative.)
_STEP = [1 + (b >> 1) if b < 0x80 else 2 + ((b & 0x7F) >> 1) for b in range(256)]


def walk_fast(area: Buffer, start: int, count: int, starts: list[int]) -> int:
    """Append to ``starts`` where each of ``count`` records from ``start`` begins; return where
    the last one ends, or -1 when the walk ran off ``area``.

    Assumes length varints of one or two bytes and does not look at their sign, so it decides
    nothing alone: callers accept the walk only when it ends exactly at the section's end, and
    every length is checked again by a full vectorised decode (``record_columns_rows``). Records
    of 8 KiB or more (three-byte lengths) miss the end and are walked exactly instead.
    """
    append = starts.append
    step = _STEP
    pos = start
    try:
        for _ in range(count):
            append(pos)
            byte = area[pos]
            if byte < 0x80:
                pos += step[byte]
            else:
                pos += step[byte] + (area[pos + 1] << 6)
    except IndexError:
        return -1
    return pos
