"""Choosing the partition of a record: Java's default partitioner, byte for byte.

Layer: protocol (sans-IO: stdlib, plus numpy for the bulk hash). Specs: the Java client's
``BuiltInPartitioner`` / ``Utils.murmur2``, KIP-480 (sticky partitioning of unkeyed records)
and KIP-794 (switch after ``batch.size`` bytes rather than on every new batch).

Three rules, in order:

1. An explicit partition wins.
2. A keyed record goes to ``(murmur2(key) & 0x7fffffff) % partitions``: the same partition a
   JVM producer (or librdkafka's ``murmur2_random``) picks for the same key bytes, so mixed
   producers keep per-key ordering.
3. An unkeyed record (or any record when ``partitioner.ignore.keys``) goes to the topic's
   *sticky* partition, which changes once a batch's worth went to it, before the record that
   would not fit: ``batch.size`` bytes, or for the producer the batch's limit, ``batch.size``
   on the wire as the compression-ratio estimate judges it. Spreading records one by one
   would make many small batches; sticking fills one batch at a time.

``murmur2`` returns Java's signed 32-bit ``int``; ``murmur2_many`` hashes many keys at once
for the columnar send path.
"""

from __future__ import annotations

import bisect
import random
import struct
from collections.abc import Sequence
from typing import Any

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF
# struct unpackers of n little-endian 32-bit words, made once for keys up to 256 bytes.
_WORDS = [struct.Struct(f"<{n}I").unpack_from for n in range(65)]


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's MurmurHash2 of ``data`` as Java's signed int (``Utils.murmur2``)."""
    # Constants are literals and steps are merged: each name lookup and temporary costs
    # tens of ns, and send() hashes every keyed record it has not seen recently.
    length = len(data)
    h = _SEED ^ length
    words = length >> 2
    if words:
        unpack = _WORDS[words] if words <= 64 else struct.Struct(f"<{words}I").unpack_from
        for k in unpack(data):
            k = (k * 0x5BD1E995) & 0xFFFFFFFF
            h = ((h * 0x5BD1E995) & 0xFFFFFFFF) ^ (((k ^ (k >> 24)) * 0x5BD1E995) & 0xFFFFFFFF)
    tail = length & 3
    if tail:
        base = length - tail
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h = ((h ^ data[base]) * 0x5BD1E995) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0x5BD1E995) & 0xFFFFFFFF
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The Java default partition of a keyed record: positive murmur2 modulo the count."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def murmur2_many(keys: Sequence[bytes]) -> list[int]:
    """``murmur2`` of each key, vectorised with numpy over keys of equal length.

    Keys are grouped by length, so each group is a 2-D array of 32-bit words hashed column by
    column; the cost is a few numpy operations per 4 bytes of the longest key, whatever the
    number of keys. Falls back to the scalar hash for a handful of keys.
    """
    if len(keys) < 64:
        return [murmur2(key) for key in keys]
    import numpy as np

    out = np.empty(len(keys), dtype=np.int64)
    by_length: dict[int, list[int]] = {}
    for index, key in enumerate(keys):
        by_length.setdefault(len(key), []).append(index)
    for length, rows in by_length.items():
        blob = np.frombuffer(b"".join(keys[i] for i in rows), dtype=np.uint8)
        out[rows] = _murmur2_matrix(blob.reshape(len(rows), length))
    return out.tolist()


def _murmur2_matrix(matrix: Any) -> Any:
    """murmur2 of each row of a (keys, length) uint8 matrix: keys of one length, hashed
    column by column (a few numpy operations per 4 bytes, whatever the number of keys)."""
    import numpy as np

    rows, length = matrix.shape
    m = np.uint64(_M)
    mask = np.uint64(_MASK32)
    h = np.full(rows, (_SEED ^ length) & _MASK32, dtype=np.uint64)
    words = length >> 2
    if words:
        # Little-endian 32-bit words, widened so products fit before masking.
        word_matrix = np.ascontiguousarray(matrix[:, : words * 4]).view("<u4").astype(np.uint64)
        for column in range(words):
            k = (word_matrix[:, column] * m) & mask
            k ^= k >> np.uint64(24)
            k = (k * m) & mask
            h = ((h * m) & mask) ^ k
    tail = length & 3
    if tail:
        base = length & ~3
        if tail == 3:
            h ^= matrix[:, base + 2].astype(np.uint64) << np.uint64(16)
        if tail >= 2:
            h ^= matrix[:, base + 1].astype(np.uint64) << np.uint64(8)
        h ^= matrix[:, base].astype(np.uint64)
        h = (h * m) & mask
    h ^= h >> np.uint64(13)
    h = (h * m) & mask
    h ^= h >> np.uint64(15)
    signed = h.astype(np.int64)
    signed[signed >= 0x80000000] -= 0x100000000
    return signed


def murmur2_buffers(offsets: Any, data: Any, rows: Any) -> Any:
    """``murmur2`` of the keys ``rows`` of a binary column given as numpy buffers.

    ``offsets`` (int32 or int64, one more than the column's length) and ``data`` (uint8) are
    an Arrow binary array's buffers; ``rows`` the indexes to hash (e.g. the non-null keys).
    Returns Java's signed hashes as int64, in ``rows`` order. Keys are gathered into one
    matrix per key length, so no Python object is made per key.
    """
    import numpy as np

    rows = np.asarray(rows, dtype=np.int64)
    out = np.empty(len(rows), dtype=np.int64)
    if not len(rows):
        return out
    starts = offsets[rows].astype(np.int64)
    lengths = offsets[rows + 1].astype(np.int64) - starts
    for length in np.unique(lengths).tolist():
        chosen = np.flatnonzero(lengths == length)
        if length:
            matrix = data[starts[chosen, None] + np.arange(length, dtype=np.int64)]
        else:
            matrix = np.empty((len(chosen), 0), dtype=np.uint8)
        out[chosen] = _murmur2_matrix(matrix)
    return out


def partitions_for_keys(keys: Sequence[bytes], num_partitions: int) -> list[int]:
    """``partition_for_key`` for many keys at once (see ``murmur2_many``)."""
    return [(h & 0x7FFFFFFF) % num_partitions for h in murmur2_many(keys)]


class StickyPartitioner:
    """The sticky partition of each topic for unkeyed records (KIP-480 / KIP-794).

    ``partition(topic, partitions, record_bytes)`` returns the current sticky partition and
    counts ``record_bytes`` against it; a record that would take the partition's run past
    ``batch_size_bytes`` (or the ``full_bytes`` given: a batch's limit) picks another
    partition at random instead (uniformly among ``partitions``, never the one just left when
    there is a choice), so that a run fills one batch and leaves no spill of a record or two.
    ``run`` and ``fill`` place many records by the same rule. ``partitions`` is the list of
    partitions that have a leader, so a partition that is offline is not chosen.
    """

    __slots__ = ("_batch_size_bytes", "_random", "_state")

    def __init__(self, batch_size_bytes: int, rng: random.Random | None = None) -> None:
        self._batch_size_bytes = batch_size_bytes
        self._random = rng or random.Random()
        # topic -> [partition, bytes produced to it since it was chosen]
        self._state: dict[str, list[int]] = {}

    def partition(self, topic: str, partitions: Sequence[int], record_bytes: int,
                  full_bytes: int | None = None) -> int:
        full = self._batch_size_bytes if full_bytes is None else full_bytes
        # A run holding anything switches when this record would take it past ``full``; an
        # empty one takes the record, however large.
        state = self._run_state(topic, partitions, max(full - record_bytes + 1, 1))
        state[1] += record_bytes
        return state[0]

    def _next(self, previous: int, partitions: Sequence[int]) -> int:
        if len(partitions) == 1:
            return partitions[0]
        while True:
            choice = self._random.choice(partitions)
            if choice != previous:
                return choice

    def _run_state(self, topic: str, partitions: Sequence[int], full_bytes: int) -> list[int]:
        """``[partition, bytes counted]`` for the next run of ``topic``: a new sticky partition
        when there is none (or it is no longer available) or it holds ``full_bytes``."""
        state = self._state.get(topic)
        if state is None or state[0] not in partitions:
            state = self._state[topic] = [self._random.choice(partitions), 0]
        elif state[1] >= full_bytes:
            state[:] = [self._next(state[0], partitions), 0]
        return state

    def run(self, topic: str, partitions: Sequence[int], cumulative: Sequence[int],
            start: int, end: int) -> tuple[int, int]:
        """``fill`` with ``batch.size`` as the limit."""
        return self.fill(topic, partitions, cumulative, start, end, self._batch_size_bytes)

    def fill(self, topic: str, partitions: Sequence[int], cumulative: Sequence[int],
             start: int, end: int, limit_bytes: int) -> tuple[int, int]:
        """As ``run``, for records sealed into batches of at most ``limit_bytes`` as they are
        placed (``send_arrow``): the run stops before the first record that would not fit, so
        that it makes one batch, not a full one and a spill of a record or two (which halved
        the records per batch at 100 B). The partition then counts as full: the next record
        switches. The threshold is ``limit_bytes``: below ``batch.size`` by the batch header,
        above it by the compression-ratio estimate (the Java client counts estimated
        compressed bytes too)."""
        state = self._run_state(topic, partitions, limit_bytes)
        fits = bisect.bisect_right(cumulative, cumulative[start] + limit_bytes - state[1],
                                   start + 1, end + 1) - 1
        if fits <= start and state[1]:  # not one more record fits: start the next partition
            state[:] = [self._next(state[0], partitions), 0]
            fits = bisect.bisect_right(cumulative, cumulative[start] + limit_bytes, start + 1,
                                       end + 1) - 1
        stop = min(max(fits, start + 1), end)  # a record larger than the limit goes alone
        state[1] += cumulative[stop] - cumulative[start]
        if stop < end:
            state[1] = max(state[1], limit_bytes)
        return state[0], stop

    def count(self, topic: str, record_bytes: int) -> None:
        """Count bytes that went to the current sticky partition of ``topic`` without
        choosing (those a caller placed there itself, such as send()'s lane)."""
        state = self._state.get(topic)
        if state is not None:
            state[1] += record_bytes

    def used_bytes(self, topic: str) -> int:
        """Bytes counted against the current sticky partition of ``topic``."""
        state = self._state.get(topic)
        return 0 if state is None else state[1]

    def current(self, topic: str) -> int | None:
        """The sticky partition of ``topic``, or None before its first unkeyed record."""
        state = self._state.get(topic)
        return None if state is None else state[0]
