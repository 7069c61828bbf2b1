"""Encoding a producer batch's record columns into a record batch, fast.

Layer: protocol (sans-IO: ``record_builder``, ``record_encoder``, ``primitives``). The
producer keeps each batch as columns (values, timestamps, optional keys and headers) and
encodes it once, when the sender drains it. The bytes are exactly ``records.encode_batch``'s
(KIP-98 record format v2); tests hold the two together.

Which encoder, by batch shape:

- up to a few thousand records (``batch.size`` 16 KiB-1 MiB of small records): varints are
  lookups in a table of the first 2**14 values, and ``bytes.join`` copies the small pieces,
  keys and values once, in C. Unkeyed records (the common case) go by runs that share a
  timestamp, laid out by slice assignments with pieces kept from batch to batch: ~75 ns
  each when values have one length, ~95 ns when lengths vary (2,300-record batches of 100 B
  spanning 4 ms), ~170 ns keyed; other batches take a loop per record, ~0.2-0.4 us each.
  numpy's fixed costs per call would exceed that at these sizes.
- larger batches: ``record_encoder.encode_records_section`` (numpy + Arrow, no Python work
  per record).
- batches with headers: the plain per-record encoder.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TypeVar

from kafka_ds.protocol.primitives import write_varint, write_varlong
from kafka_ds.protocol.record_builder import NewRecord, encode_records

Header = tuple[str, bytes | None]
_Shape = TypeVar("_Shape", int, tuple[int, int])  # what a run's first piece depends on

# Below this many records a table-driven Python loop beats numpy's fixed costs per call.
_VECTOR_MIN_RECORDS = 1 << 14  # the table covers offset deltas up to here
# Varint bytes of every zigzag value below 2**14 (2 bytes at most): lengths, offset deltas
# and small timestamp deltas are looked up instead of encoded.
_TABLE_SIZE = 1 << 14


def encode_section(values: Sequence[bytes | None], timestamps: Sequence[int],
                   keys: Sequence[bytes | None] | None = None,
                   headers: Sequence[Sequence[Header]] | None = None) -> bytes:
    """The records section (uncompressed) of a batch whose first timestamp is the base."""
    count = len(values)
    if headers is not None and any(headers):
        return encode_section_simple(values, timestamps, keys, headers)
    if count < _VECTOR_MIN_RECORDS:
        return _encode_table(values, timestamps, keys)
    import numpy as np

    from kafka_ds.protocol.record_encoder import encode_records_section

    stamps = np.fromiter(timestamps, dtype=np.int64, count=count)
    section = encode_records_section(keys if keys is not None else [None] * count, values,
                                     stamps - stamps[0])
    return bytes(section)


def _varint(value: int) -> bytes:
    out = bytearray()
    write_varint(out, value) if -(1 << 31) <= value < (1 << 31) else write_varlong(out, value)
    return bytes(out)


_TABLE = [_varint(value) for value in range(_TABLE_SIZE)]
# A run's records begin with [0 (the previous record's headers count), length, attributes,
# timestamp delta], which depends on the value length, the timestamp delta and the offset
# delta's width, and carry [null key, value length] after the offset delta. Both are kept
# across runs and batches: values of varying length give a run of a few hundred records ~100
# distinct lengths, and building their pieces for every run cost about as much as the rest of
# the encoding. (timestamp delta bytes, offset width) -> value length -> first piece; the
# deltas of a batch are its few milliseconds of linger, so few keys, bounded all the same.
_HEADS: dict[tuple[bytes, int], dict[int, bytes]] = {}
_HEADS_MAX_KEYS = 32
_HEADS_MAX_SHAPES = 2048  # per key: at most ~6 MB in all, typically a few hundred KB
_TAILS: dict[int, bytes] = {}  # value length -> [null key, value length]; < _TABLE_SIZE keys
# The same for keyed runs: (key length, value length) -> [0, length, attributes, delta].
_KEYED_HEADS: dict[tuple[bytes, int], dict[tuple[int, int], bytes]] = {}


def _encode_table(values: Sequence[bytes | None], timestamps: Sequence[int],
                  keys: Sequence[bytes | None] | None) -> bytes:
    """The per-record path for batches too small for numpy: varints from ``_TABLE``."""
    try:
        return _encode_table_runs(values, timestamps, keys)  # type: ignore[arg-type]
    except (TypeError, IndexError):  # a null key or value, or a field past the table
        pass
    table = _TABLE
    size = _TABLE_SIZE
    base = timestamps[0]
    parts: list[bytes] = []
    append = parts.append
    key: bytes | None = None
    for index, value in enumerate(values):
        delta = timestamps[index] - base
        delta_bytes = table[delta] if 0 <= delta < size else _varint(delta)
        offset_bytes = table[index] if index < size else _varint(index)
        if value is None:
            value_bytes = b"\x01"
            value_length = 0
        else:
            value_length = len(value)
            value_bytes = table[value_length] if value_length < size else _varint(value_length)
        if keys is not None and (key := keys[index]) is not None:
            key_length = len(key)
            key_bytes = table[key_length] if key_length < size else _varint(key_length)
        else:
            key_length = 0
            key_bytes = b"\x01"
        body = (2 + len(delta_bytes) + len(offset_bytes) + len(key_bytes) + key_length
                + len(value_bytes) + value_length)
        head = table[body] if body < size else _varint(body)
        if key_length:
            append(head + b"\x00" + delta_bytes + offset_bytes + key_bytes)
            append(key)  # type: ignore[arg-type]
            append(value_bytes)
        else:
            append(head + b"\x00" + delta_bytes + offset_bytes + key_bytes + value_bytes)
        if value_length:
            append(value)  # type: ignore[arg-type]
        append(b"\x00")
    return b"".join(parts)


def _encode_table_runs(values: Sequence[bytes], timestamps: Sequence[int],
                       keys: Sequence[bytes] | None = None) -> bytes:
    """The hot shape (no nulls, no headers; no keys, or a key on every record); raises on
    anything else.

    A record is four pieces: [0 (the previous record's headers count), length, attributes,
    timestamp delta], offset delta, [null key, value length], value. The batch is cut into
    runs of records that share their timestamp and the width of their offset delta (which
    widens at 64 and 8192); within a run the first and third pieces depend on the value
    length alone, so they are made once per distinct length, and a long run is laid out by
    four slice assignments (C loops) instead of a Python loop per record. With keys, the
    third piece is the key length, then come the key and the value length (``_encode_run_keyed``).
    """
    count = len(values)
    if len(timestamps) != count:
        raise ValueError(f"{count} values but {len(timestamps)} timestamps")
    if count > _TABLE_SIZE:
        raise IndexError(count)
    table = _TABLE
    base = timestamps[0]
    lengths = list(map(len, values))  # TypeError on a null value
    key_lengths = None if keys is None else list(map(len, keys))  # TypeError on a null key
    parts: list[bytes] = []
    start = 0
    while start < count:
        stamp = timestamps[start]
        delta = stamp - base
        if delta < 0:
            raise IndexError(delta)
        # Timestamps usually rise: the run ends where a later one starts. Where they do not,
        # the run is checked and cut short to its first record.
        stop = min(bisect.bisect_right(timestamps, stamp, start), _offset_width_end(start))
        if timestamps[start:stop].count(stamp) != stop - start:
            stop = start + 1
        if keys is None or key_lengths is None:
            _encode_run(parts, values, lengths, start, stop, table[delta])
        else:
            _encode_run_keyed(parts, keys, key_lengths, values, lengths, start, stop,
                              table[delta])
        start = stop
    parts[0] = parts[0][1:]  # the first record has no record before it
    parts.append(b"\x00")  # the last record's headers count
    return b"".join(parts)


def _offset_width_end(index: int) -> int:
    """Where the offset-delta varint of ``index`` stops having its width (in the table)."""
    return 64 if index < 64 else 8192 if index < 8192 else _TABLE_SIZE


def _encode_run(parts: list[bytes], values: Sequence[bytes], lengths: list[int], start: int,
                stop: int, delta_bytes: bytes) -> None:
    """Append records ``start:stop``, which share a timestamp delta and offset width."""
    table = _TABLE
    offset_width = len(table[start])
    run_lengths = lengths[start:stop]
    heads = _heads_for(_HEADS, delta_bytes, offset_width)
    tails = _TAILS
    try:
        first, third = _run_pieces(heads, tails, run_lengths)
    except KeyError:  # a length not seen with this delta and width yet (or just evicted)
        heads, tails = _learn_lengths(heads, run_lengths, delta_bytes, offset_width)
        first, third = _run_pieces(heads, tails, run_lengths)
    run: list[bytes] = [b""] * (4 * (stop - start))
    run[0::4] = first
    run[1::4] = table[start:stop]
    run[2::4] = third
    run[3::4] = values[start:stop]
    parts += run


def _heads_for(cache: dict[tuple[bytes, int], dict[_Shape, bytes]], delta_bytes: bytes,
               offset_width: int) -> dict[_Shape, bytes]:
    """The cached first pieces for a timestamp delta and offset width (see ``_HEADS``)."""
    heads = cache.get((delta_bytes, offset_width))
    if heads is None:
        if len(cache) >= _HEADS_MAX_KEYS:
            cache.clear()
        heads = cache[(delta_bytes, offset_width)] = {}
    return heads


def _remember(heads: dict[_Shape, bytes], learned: dict[_Shape, bytes]) -> None:
    """Keep a run's first pieces in its cache, emptied first when they would take it past
    ``_HEADS_MAX_SHAPES`` (a run with more shapes than that is not kept). The run itself
    uses ``learned``: a sender thread of another producer may empty the cache meanwhile."""
    if len(learned) > _HEADS_MAX_SHAPES:
        return
    if len(heads) + len(learned) > _HEADS_MAX_SHAPES:
        heads.clear()
    heads.update(learned)


def _run_pieces(heads: dict[int, bytes], tails: dict[int, bytes], run_lengths: list[int]
                ) -> tuple[list[bytes], list[bytes]]:
    """The first and third pieces of each record of a run; KeyError for a length not held."""
    length = run_lengths[0]
    records = len(run_lengths)
    if run_lengths.count(length) == records:  # values of one length: no lookup each
        return [heads[length]] * records, [tails[length]] * records
    return list(map(heads.__getitem__, run_lengths)), list(map(tails.__getitem__, run_lengths))


def _learn_lengths(heads: dict[int, bytes], run_lengths: list[int], delta_bytes: bytes,
                   offset_width: int) -> tuple[dict[int, bytes], dict[int, bytes]]:
    """The first and third pieces of every value length of a run, also kept for the next
    runs; IndexError past the table (the caller's fallback)."""
    table = _TABLE
    tails = {length: b"\x01" + table[length]  # null key, then the value length
             for length in set(run_lengths)}
    fixed = 2 + len(delta_bytes) + offset_width
    learned = {length: b"\x00" + table[fixed + len(tail) + length] + b"\x00" + delta_bytes
               for length, tail in tails.items()}
    _TAILS.update(tails)  # at most one per length below _TABLE_SIZE: never emptied
    _remember(heads, learned)
    return learned, tails


def _encode_run_keyed(parts: list[bytes], keys: Sequence[bytes], key_lengths: list[int],
                      values: Sequence[bytes], lengths: list[int], start: int, stop: int,
                      delta_bytes: bytes) -> None:
    """``_encode_run`` for keyed records: six pieces per record, [0, length, attributes,
    timestamp delta] (kept per key and value length, as ``_encode_run`` keeps its own),
    offset delta, key length, key, value length, value; laid out by slice assignments."""
    table = _TABLE
    offset_width = len(table[start])
    run_key_lengths = key_lengths[start:stop]
    run_lengths = lengths[start:stop]
    pairs = list(zip(run_key_lengths, run_lengths, strict=True))
    heads = _heads_for(_KEYED_HEADS, delta_bytes, offset_width)
    try:
        first = list(map(heads.__getitem__, pairs))
    except KeyError:  # a pair of lengths not seen with this delta and width yet
        fixed = 2 + len(delta_bytes) + offset_width
        learned = {(key_length, length): b"\x00" + table[
            fixed + len(table[key_length]) + key_length + len(table[length]) + length
        ] + b"\x00" + delta_bytes for key_length, length in set(pairs)}
        _remember(heads, learned)
        first = list(map(learned.__getitem__, pairs))
    run: list[bytes] = [b""] * (6 * (stop - start))
    run[0::6] = first
    run[1::6] = table[start:stop]
    run[2::6] = list(map(table.__getitem__, run_key_lengths))
    run[3::6] = keys[start:stop]
    run[4::6] = list(map(table.__getitem__, run_lengths))
    run[5::6] = values[start:stop]
    parts += run


def encode_section_simple(values: Sequence[bytes | None], timestamps: Sequence[int],
                          keys: Sequence[bytes | None] | None = None,
                          headers: Sequence[Sequence[Header]] | None = None) -> bytes:
    """The same bytes as ``encode_section``, one record at a time (headers, tiny batches)."""
    records = [NewRecord(keys[index] if keys is not None else None, value, timestamps[index],
                         headers[index] if headers is not None else ())
               for index, value in enumerate(values)]
    return bytes(encode_records(records, timestamps[0] if timestamps else 0))
