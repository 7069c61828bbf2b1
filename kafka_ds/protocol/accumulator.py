"""The record accumulator: per-partition queues of batches waiting to be sent.

Layer: protocol (sans-IO: no socket, thread or clock; every method takes ``now_ms``). The
client layer wraps it in one lock. Specs: the Java client's ``RecordAccumulator`` and
``ProducerBatch``; KIP-98 (sequences live on batches); seeds 001/003 (batching, retries).

::

    send() --append--> [tp0: batch batch batch]  --ready/drain--> sender: one Produce per broker
                       [tp1: batch]                                (one batch per partition)
                       [tp2: ...]   <--reenqueue (retry, in sequence order) / split--

- ``append`` adds a record to the tail batch of its partition, opening a new batch when the
  tail's estimated size would pass ``batch.size``. Records are kept as columns (values,
  timestamps, keys and headers only when some record has them) and encoded once, when the
  sender drains the batch, so the per-record cost of ``send()`` is a few list appends.
- Estimated sizes are upper bounds of the encoded record (see ``record_bytes_bound``). For
  compressed batches the limit is scaled by the topic/codec compression-ratio estimate
  (``CompressionRatioEstimator``), so a batch of compressible data holds more records.
- A batch is *ready* when it is full (a later batch exists or it reached its limit),
  ``linger.ms`` has passed since it opened, a flush or close is in progress, or it is a retry
  whose backoff has passed. ``drain`` takes ready head batches for the given brokers, one per
  partition, up to ``max.request.size`` per request.
- ``buffer.memory`` bounds the estimated bytes of all batches not yet completed; ``append``
  returns None instead of appending when a record would pass it (the client then waits up to
  ``max.block.ms`` for the sender to free memory).
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.records import HEADER_BYTES

Header = tuple[str, bytes | None]

# Upper bound of a record's bytes beyond its key and value, for keys and values under 1 MiB
# and timestamp/offset deltas under 2**20: length prefix 3 + attributes 1 + timestamp delta 3
# + offset delta 3 + key length 3 + value length 3 + header count 1 (varints of those sizes).
# Longer fields are rare and only make the estimate a few bytes short, which costs nothing but
# a batch marginally over batch.size (the broker limit is checked on the encoded batch).
RECORD_OVERHEAD_BOUND = 17


def record_bytes_bound(key: bytes | None, value: bytes | None,
                       headers: Sequence[Header] | None) -> int:
    """The estimate ``append`` counts for one record (encoded size, or a little more)."""
    size = RECORD_OVERHEAD_BOUND + (len(value) if value is not None else 0)
    if key is not None:
        size += len(key)
    if headers:
        for header_key, header_value in headers:
            size += 6 + len(header_key) * 3 + (len(header_value) if header_value else 0)
    return size


class CompressionRatioEstimator:
    """Estimated compressed/uncompressed ratio per (topic, codec), as the Java client keeps it.

    Starts at 1.0. After each compressed batch the estimate moves towards the observed ratio,
    down by at most 0.005 and up by at most 0.05 per batch (quick to back off when data gets
    less compressible, slow to trust good ratios), and it is applied with a 1.05 margin. A
    batch rejected as too large resets it to max(1.0, observed).
    """

    DOWN_STEP = 0.005
    UP_STEP = 0.05
    MARGIN = 1.05

    def __init__(self) -> None:
        self._ratios: dict[tuple[str, int], float] = {}

    def estimate(self, topic: str, codec: int) -> float:
        return self._ratios.get((topic, codec), 1.0)

    def observe(self, topic: str, codec: int, observed_ratio: float) -> float:
        key = (topic, codec)
        current = self._ratios.get(key, 1.0)
        if observed_ratio < current:
            current = max(current - self.DOWN_STEP, observed_ratio)
        elif observed_ratio > current:
            current = min(current + self.UP_STEP, observed_ratio)
        self._ratios[key] = current
        return current

    def reset(self, topic: str, codec: int, observed_ratio: float) -> None:
        self._ratios[(topic, codec)] = max(1.0, observed_ratio)

    def batch_limit_bytes(self, topic: str, codec: int, batch_size_bytes: int) -> int:
        """Uncompressed bytes a new batch may hold to end near ``batch_size_bytes`` on the wire."""
        room = max(batch_size_bytes - HEADER_BYTES, 1)
        if codec == Compression.NONE:
            return room
        return int(room / (self.estimate(topic, codec) * self.MARGIN))


class ProducerBatch:
    """Records for one partition that travel together, with their delivery bookkeeping.

    ``result`` is an opaque completion handle made by the client layer (futures, callbacks);
    this layer only stores it. Sequence fields are set when the sender first drains the batch
    and cleared when ``producer_state`` decides the batch must be renumbered.
    """

    __slots__ = (
        "attempts", "base_sequence", "callbacks", "closed", "compression_ratio", "created_ms",
        "delivery_deadline_ms", "encoded", "fate_unknown", "headers", "is_transactional", "keys",
        "last_attempt_ms", "limit_bytes", "order", "partition", "producer_epoch", "producer_id",
        "result", "retry_at_ms", "size_bytes", "split_count", "timestamps", "topic", "values",
    )

    def __init__(self, topic: str, partition: int, created_ms: int, limit_bytes: int,
                 delivery_deadline_ms: int, result: Any = None) -> None:
        self.topic = topic
        self.partition = partition
        self.created_ms = created_ms
        self.limit_bytes = limit_bytes
        self.delivery_deadline_ms = delivery_deadline_ms
        self.result = result
        self.values: list[bytes | None] = []
        self.timestamps: list[int] = []
        # Filled (padded with None / ()) from the first record that has a key / headers.
        self.keys: list[bytes | None] | None = None
        self.headers: list[Sequence[Header]] | None = None
        self.callbacks: list[tuple[int, Callable[..., Any]]] | None = None
        self.size_bytes = 0  # estimated uncompressed record bytes (record_bytes_bound sum)
        # Never appended to again: drained, removed from its queue, or no longer the newest
        # of its partition (the producer's fast path appends to a batch while it is open).
        self.closed = False
        self.attempts = 0
        self.last_attempt_ms = -1
        # An attempt's reply was lost (timeout, cut connection): the broker may hold it.
        self.fate_unknown = False
        self.retry_at_ms = 0
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.is_transactional = False
        self.encoded: bytes | None = None
        self.compression_ratio = 1.0
        self.split_count = 0
        # Position among the partition's batches: creation order, then piece order after a
        # split ((7,) < (7, 0) < (7, 1) < (8,)). Retries and split pieces go back in this order.
        self.order: tuple[int, ...] = ()

    @property
    def record_count(self) -> int:
        return len(self.values)

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + len(self.values) - 1

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def __repr__(self) -> str:
        return (f"ProducerBatch({self.topic}-{self.partition}, {len(self.values)} records, "
                f"seq {self.base_sequence}, attempts {self.attempts})")

    def add(self, key: bytes | None, value: bytes | None, timestamp_ms: int,
            headers: Sequence[Header] | None, size: int) -> int:
        """Append one record (no size checks); returns its index in the batch."""
        index = len(self.values)
        self.values.append(value)
        self.timestamps.append(timestamp_ms)
        if key is not None or self.keys is not None:
            if self.keys is None:
                self.keys = [None] * index
            self.keys.append(key)
        if headers or self.headers is not None:
            if self.headers is None:
                self.headers = [()] * index
            self.headers.append(headers or ())
        self.size_bytes += size
        return index

    def add_many(self, keys: Sequence[bytes | None] | None, values: Sequence[bytes | None],
                 timestamps: Sequence[int], size: int) -> int:
        """Append records column-wise (no size checks); returns the first one's index."""
        index = len(self.values)
        self.values.extend(values)
        self.timestamps.extend(timestamps)
        if keys is not None or self.keys is not None:
            if self.keys is None:
                self.keys = [None] * index
            self.keys.extend(keys if keys is not None else [None] * len(values))
        if self.headers is not None:
            self.headers.extend([()] * len(values))
        self.size_bytes += size
        return index

    def record(self, index: int) -> tuple[bytes | None, bytes | None, int, Sequence[Header]]:
        return (self.keys[index] if self.keys is not None else None, self.values[index],
                self.timestamps[index], self.headers[index] if self.headers is not None else ())

    def add_callback(self, index: int, callback: Callable[..., Any]) -> None:
        """Run ``callback`` for record ``index`` when the batch completes."""
        if self.callbacks is None:
            self.callbacks = []
        self.callbacks.append((index, callback))

    def release_payload(self) -> None:
        """The batch is done: drop its encoded bytes (the records stay for the futures)."""
        self.encoded = None

    def reset_sequence(self) -> None:
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.encoded = None


class RecordAccumulator:
    """Queues of ``ProducerBatch`` per partition, with memory accounting; not thread-safe."""

    def __init__(self, *, batch_size_bytes: int, linger_ms: int, buffer_memory_bytes: int,
                 compression: int = Compression.NONE, retry_backoff_ms: int = 100,
                 delivery_timeout_ms: int = 120_000,
                 new_result: Callable[[], Any] = lambda: None,
                 ratios: CompressionRatioEstimator | None = None,
                 now_source: Callable[[], int] | None = None,
                 max_batch_uncompressed_bytes: int | None = None) -> None:
        self.batch_size_bytes = batch_size_bytes
        # Records wait here uncompressed (and count so against buffer.memory) until the
        # sender encodes their batch. Data that compresses 100:1 would let the ratio estimate
        # open batches of ~100 x batch.size: tens of MB held, encoded and compressed in one
        # piece (the sender holds the GIL while it encodes), and as much for the broker and
        # every consumer to decompress at once. The producer bounds them by max.request.size.
        self.max_batch_uncompressed_bytes = max(
            max_batch_uncompressed_bytes or (1 << 62), batch_size_bytes)
        self.linger_ms = linger_ms
        self.buffer_memory_bytes = buffer_memory_bytes
        self.compression = int(compression)
        self.retry_backoff_ms = retry_backoff_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.new_result = new_result
        self.ratios = ratios or CompressionRatioEstimator()
        # The client's monotonic clock, read only when ``append`` gets no ``now_ms`` and must
        # open a batch (so that send() reads the clock once per batch, not per record).
        self.now_source = now_source
        self.used_bytes = 0  # estimated bytes of every batch not yet deallocated
        self.flushes_in_progress = 0
        self.closing = False
        # topic -> partition -> deque of batches, oldest first.
        self._queues: dict[str, dict[int, deque[ProducerBatch]]] = {}
        self._drain_start = 0
        self._created = itertools.count()
        # Batches created since the last ``take_new_batches`` (the transaction layer learns
        # new partitions from them without a per-record check).
        self.new_partitions: set[tuple[str, int]] = set()
        self.incomplete: set[ProducerBatch] = set()

    # --- appending (the user threads, under the client's lock) ---------------------------

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
               timestamp_ms: int, headers: Sequence[Header] | None, size: int,
               now_ms: int | None = None) -> tuple[ProducerBatch, int, bool] | None:
        """Add a record of estimated ``size`` bytes; returns (batch, index, batch_is_new).

        Returns None, appending nothing, when the record does not fit in ``buffer.memory``.
        """
        used = self.used_bytes
        if used + size > self.buffer_memory_bytes and used > 0:
            return None
        partitions = self._queues.get(topic)
        if partitions is None:
            partitions = self._queues[topic] = {}
        queue = partitions.get(partition)
        if queue is None:
            queue = partitions[partition] = deque()
        if queue:
            batch = queue[-1]
            if not batch.closed and batch.size_bytes + size <= batch.limit_bytes:
                # The hot path, inlined from ProducerBatch.add.
                self.used_bytes = used + size
                batch.size_bytes += size
                values = batch.values
                index = len(values)
                values.append(value)
                batch.timestamps.append(timestamp_ms)
                if key is not None or batch.keys is not None:
                    if batch.keys is None:
                        batch.keys = [None] * index
                    batch.keys.append(key)
                if headers or batch.headers is not None:
                    if batch.headers is None:
                        batch.headers = [()] * index
                    batch.headers.append(headers or ())
                return batch, index, False
            batch.closed = True  # full: the new batch takes the partition's records
        if now_ms is None:
            assert self.now_source is not None, "append() needs now_ms or a now_source"
            now_ms = self.now_source()
        batch = self._new_batch(topic, partition, now_ms)
        queue.append(batch)
        self.used_bytes += size
        return batch, batch.add(key, value, timestamp_ms, headers, size), True

    def append_many(self, topic: str, partition: int, keys: Sequence[bytes | None] | None,
                    values: Sequence[bytes | None], timestamps: Sequence[int],
                    cumulative: Sequence[int], start: int, now_ms: int,
                    touched: list[ProducerBatch], end: int | None = None) -> int:
        """Append records ``start:`` of the columns to ``partition``, batch by batch.

        ``cumulative[i]`` is the estimated size of records ``0:i`` (``cumulative[0] == 0``).
        Returns where it stopped: ``len(values)``, or earlier when ``buffer.memory`` is full.
        Each batch written to is added to ``touched`` (once). ``end`` defaults to all records.
        """
        end = len(values) if end is None else end
        partitions = self._queues.setdefault(topic, {})
        queue = partitions.get(partition)
        if queue is None:
            queue = partitions[partition] = deque()
        position = start
        while position < end:
            base = cumulative[position]
            memory_room = self.buffer_memory_bytes - self.used_bytes
            stop = bisect.bisect_right(cumulative, base + memory_room, position, end + 1) - 1
            if stop == position:
                if self.used_bytes > 0:
                    return position  # full: the caller waits for the sender to free memory
                stop = position + 1
            batch = queue[-1] if queue and not queue[-1].closed else None
            fit = position
            if batch is not None:
                room = batch.limit_bytes - batch.size_bytes
                fit = bisect.bisect_right(cumulative, base + room, position, stop + 1) - 1
            if fit == position:
                if batch is not None:
                    batch.closed = True
                batch = self._new_batch(topic, partition, now_ms)
                queue.append(batch)
                fit = max(bisect.bisect_right(cumulative, base + batch.limit_bytes, position,
                                              stop + 1) - 1, position + 1)
            assert batch is not None
            size = cumulative[fit] - base
            batch.add_many(keys[position:fit] if keys is not None else None,
                           values[position:fit], timestamps[position:fit], size)
            self.used_bytes += size
            if not touched or touched[-1] is not batch:
                touched.append(batch)
            position = fit
        return position

    def append_batch(self, batch: ProducerBatch) -> bool:
        """Queue a batch built whole elsewhere (``arrow_batches.ColumnarBatch``) at the tail
        of its partition; False, queueing nothing, when it does not fit in ``buffer.memory``.

        It goes after the partition's open batch, which therefore takes no more records:
        records keep the order in which they were handed to the producer.
        """
        used = self.used_bytes
        if used + batch.size_bytes > self.buffer_memory_bytes and used > 0:
            return False
        queue = self._queues.setdefault(batch.topic, {}).setdefault(batch.partition, deque())
        if queue:
            queue[-1].closed = True
        batch.order = (next(self._created),)
        queue.append(batch)
        self.used_bytes = used + batch.size_bytes
        self.new_partitions.add((batch.topic, batch.partition))
        self.incomplete.add(batch)
        return True

    def batch_limit_bytes(self, topic: str) -> int:
        """The estimated uncompressed bytes a new batch of ``topic`` may hold: ``batch.size``
        on the wire (the compression-ratio estimate scales it), at most
        ``max_batch_uncompressed_bytes``."""
        limit = self.ratios.batch_limit_bytes(topic, self.compression, self.batch_size_bytes)
        return min(limit, self.max_batch_uncompressed_bytes)

    def _new_batch(self, topic: str, partition: int, now_ms: int) -> ProducerBatch:
        limit = self.batch_limit_bytes(topic)
        batch = ProducerBatch(topic, partition, now_ms, limit,
                              now_ms + self.delivery_timeout_ms, self.new_result())
        batch.order = (next(self._created),)
        self.new_partitions.add((topic, partition))
        self.incomplete.add(batch)
        return batch

    # --- the sender's side ---------------------------------------------------------------

    def has_undrained(self) -> bool:
        return any(queue for partitions in self._queues.values() for queue in partitions.values())

    def partitions_with_data(self) -> list[tuple[str, int]]:
        return [(topic, partition) for topic, partitions in self._queues.items()
                for partition, queue in partitions.items() if queue]

    def _head_ready(self, queue: deque[ProducerBatch], now_ms: int) -> tuple[bool, int]:
        """(ready, when it will be ready) for the head batch of a non-empty queue."""
        batch = queue[0]
        if batch.attempts > 0:
            return now_ms >= batch.retry_at_ms, batch.retry_at_ms
        if (len(queue) > 1 or batch.closed or self.flushes_in_progress or self.closing
                or batch.size_bytes >= batch.limit_bytes):
            return True, now_ms
        ready_at = batch.created_ms + self.linger_ms
        return now_ms >= ready_at, ready_at

    def ready(self, now_ms: int, leader_of: Callable[[str, int], int]
              ) -> tuple[set[int], int | None, set[str]]:
        """Brokers with a ready batch, the next time another may become ready, and topics
        whose partitions have no known leader (the caller refreshes metadata)."""
        nodes: set[int] = set()
        next_ms: int | None = None
        unknown: set[str] = set()
        for topic, partitions in self._queues.items():
            for partition, queue in partitions.items():
                if not queue:
                    continue
                leader = leader_of(topic, partition)
                if leader < 0:
                    unknown.add(topic)
                    continue
                is_ready, at_ms = self._head_ready(queue, now_ms)
                if is_ready:
                    nodes.add(leader)
                elif next_ms is None or at_ms < next_ms:
                    next_ms = at_ms
        return nodes, next_ms, unknown

    def drain(self, nodes: Iterable[int], leader_of: Callable[[str, int], int],
              max_request_bytes: int, now_ms: int,
              can_send: Callable[[ProducerBatch], bool] = lambda batch: True,
              ) -> dict[int, list[ProducerBatch]]:
        """Pop ready head batches led by ``nodes``: per node one batch per partition, as many
        as fit in ``max_request_bytes`` (the first always goes, however large)."""
        wanted = set(nodes)
        queues = [(topic, partition, queue) for topic, partitions in self._queues.items()
                  for partition, queue in partitions.items() if queue]
        if not queues or not wanted:
            return {}
        # Rotate the starting partition so that a request filling max.request.size does not
        # starve the partitions listed last.
        start = self._drain_start % len(queues)
        self._drain_start += 1
        out: dict[int, list[ProducerBatch]] = {}
        sizes: dict[int, int] = {}
        for topic, partition, queue in queues[start:] + queues[:start]:
            leader = leader_of(topic, partition)
            if leader not in wanted or not self._head_ready(queue, now_ms)[0]:
                continue
            batch = queue[0]
            if not can_send(batch):
                continue
            size = self._wire_estimate(batch)
            used = sizes.get(leader, 0)
            if used and used + size > max_request_bytes:
                continue
            queue.popleft()
            batch.closed = True
            sizes[leader] = used + size
            out.setdefault(leader, []).append(batch)
        return out

    def _wire_estimate(self, batch: ProducerBatch) -> int:
        if batch.encoded is not None:
            return len(batch.encoded)
        ratio = 1.0 if self.compression == Compression.NONE else \
            self.ratios.estimate(batch.topic, self.compression)
        return HEADER_BYTES + int(batch.size_bytes * ratio)

    def reenqueue(self, batch: ProducerBatch, now_ms: int) -> None:
        """Put a batch back for a retry, at the front of its queue in sequence order."""
        batch.attempts += 1
        batch.last_attempt_ms = now_ms
        batch.retry_at_ms = now_ms + self.retry_backoff_ms
        queue = self._queues.setdefault(batch.topic, {}).setdefault(batch.partition, deque())
        insert_in_order(queue, batch)

    def split(self, batch: ProducerBatch, now_ms: int) -> list[ProducerBatch]:
        """Split a batch the broker found too large into batches of ``batch.size``; they go
        to the front of the queue, unsequenced, and keep the original's delivery deadline."""
        pieces: list[ProducerBatch] = []
        limit = max(self.batch_limit_bytes(batch.topic), 1)
        current: ProducerBatch | None = None
        for index in range(batch.record_count):
            key, value, timestamp, headers = batch.record(index)
            size = record_bytes_bound(key, value, headers)
            if current is None or (current.record_count and current.size_bytes + size > limit):
                current = ProducerBatch(batch.topic, batch.partition, batch.created_ms, limit,
                                        batch.delivery_deadline_ms, self.new_result())
                current.closed = True
                current.split_count = batch.split_count + 1
                current.attempts = batch.attempts
                current.order = (*batch.order, len(pieces))
                pieces.append(current)
            current.add(key, value, timestamp, headers, size)
        if len(pieces) == 1:
            # Nothing to split by batch.size (records fit one batch by our estimate but not
            # by the broker's limit): halve, down to single records.
            pieces = self._halve(batch)
        self.used_bytes += sum(piece.size_bytes for piece in pieces)
        queue = self._queues.setdefault(batch.topic, {}).setdefault(batch.partition, deque())
        for piece in reversed(pieces):
            insert_in_order(queue, piece)
            self.incomplete.add(piece)
        return pieces

    def _halve(self, batch: ProducerBatch) -> list[ProducerBatch]:
        middle = batch.record_count // 2
        pieces: list[ProducerBatch] = []
        for indexes in (range(0, middle), range(middle, batch.record_count)):
            piece = ProducerBatch(batch.topic, batch.partition, batch.created_ms,
                                  batch.limit_bytes, batch.delivery_deadline_ms, self.new_result())
            piece.closed = True
            piece.split_count = batch.split_count + 1
            piece.attempts = batch.attempts
            piece.order = (*batch.order, len(pieces))
            for index in indexes:
                key, value, timestamp, headers = batch.record(index)
                piece.add(key, value, timestamp, headers, record_bytes_bound(key, value, headers))
            pieces.append(piece)
        return pieces

    def expired(self, now_ms: int) -> list[ProducerBatch]:
        """Remove and return queued batches past ``delivery.timeout.ms``."""
        out: list[ProducerBatch] = []
        for partitions in self._queues.values():
            for queue in partitions.values():
                while queue and queue[0].delivery_deadline_ms <= now_ms:
                    batch = queue.popleft()
                    batch.closed = True
                    out.append(batch)
                # A later batch can expire before an earlier retry's deadline only if the
                # clock jumped; checking the heads keeps this O(partitions).
        return out

    def remove_queued(self, predicate: Callable[[ProducerBatch], bool]) -> list[ProducerBatch]:
        """Remove and return every queued batch for which ``predicate`` holds."""
        out: list[ProducerBatch] = []
        for partitions in self._queues.values():
            for partition, queue in partitions.items():
                keep: deque[ProducerBatch] = deque()
                for batch in queue:
                    if predicate(batch):
                        batch.closed = True
                        out.append(batch)
                    else:
                        keep.append(batch)
                partitions[partition] = keep
        return out

    def queued(self, topic: str, partition: int) -> Sequence[ProducerBatch]:
        return self._queues.get(topic, {}).get(partition, deque())

    def deallocate(self, batch: ProducerBatch) -> None:
        """A batch is complete (acked, failed or expired): free its memory."""
        batch.release_payload()  # futures keep the batch, not its bytes
        if batch in self.incomplete:
            self.incomplete.discard(batch)
            self.used_bytes -= batch.size_bytes

    def next_expiry_ms(self) -> int | None:
        heads = [queue[0].delivery_deadline_ms for partitions in self._queues.values()
                 for queue in partitions.values() if queue]
        return min(heads) if heads else None


def insert_in_order(queue: deque[ProducerBatch], batch: ProducerBatch) -> None:
    """Put ``batch`` back into ``queue`` before every batch created after it.

    Retries and split pieces must go out in the order their records were sent: for an
    idempotent producer that is also sequence order, which the broker enforces.
    """
    order = batch.order
    for position, queued in enumerate(queue):
        if queued.order > order:
            queue.insert(position, batch)
            return
    queue.append(batch)
