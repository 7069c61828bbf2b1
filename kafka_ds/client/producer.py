"""The Kafka producer: batching, idempotent by default, optionally transactional.

Layer: client (never pyspark). Specs: KIP-98 (idempotence, transactions), KIP-360, KIP-480 /
KIP-794 (sticky partitioning), KIP-890 (transactions v2); the Java ``KafkaProducer`` API,
with Python names.

::

    with Producer({"bootstrap.servers": "localhost:9092"}) as producer:
        future = producer.send("events", b"value", key=b"user-1")
        producer.flush()
        print(future.result())  # RecordMetadata(topic, partition, offset, timestamp_ms)

``send()`` only appends to the accumulator; the sender thread (``sender.py``) encodes,
compresses, sends and retries. A record with a ``bytes`` value and no headers or timestamp
takes a lane: unkeyed, it joins its topic's open sticky batch; keyed (``bytes`` key) or given a
partition, the open batch of that partition (``producer_lanes``; keys hashed with Java's
murmur2, recent keys' hashes cached). One lock, a clock read and a few list appends, and its
future is a small tuple (at 100 bytes per record, Python's cost per call is what limits
``send()``). Transactions::

    producer = Producer({..., "transactional.id": "sink-7"})
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(...)
    producer.commit_transaction()          # or abort_transaction()

or, to finish elsewhere (the exactly-once Spark sink)::

    token = producer.prepare_transaction()  # every record acknowledged; not ended
    complete_transaction(config, token, commit=True)   # in another process
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kafka_ds.client.delivery import (
    BatchResult,
    BulkFuture,
    RecordFuture,
    RecordMetadata,
    RecordTooLargeError,
    check_record_size,
)
from kafka_ds.client.producer_config import ProducerConfig
from kafka_ds.client.producer_lanes import KeyHashes, PartitionLanes
from kafka_ds.client.producer_transactions import ProducerTransactions
from kafka_ds.client.sender import Sender, TopicMeta
from kafka_ds.client.sticky_lane import StickyLane
from kafka_ds.client.transactions import TransactionManager, complete_transaction
from kafka_ds.net.clock import SYSTEM_CLOCK, Clock
from kafka_ds.protocol.accumulator import (
    RECORD_OVERHEAD_BOUND,
    RecordAccumulator,
    record_bytes_bound,
)
from kafka_ds.protocol.errors import KafkaDsError, KafkaTimeoutError
from kafka_ds.protocol.partitioner import StickyPartitioner, partitions_for_keys
from kafka_ds.protocol.producer_state import ProducerState
from kafka_ds.protocol.txn_state import (
    TransactionToken,
    TxnState,
)

__all__ = ["BulkFuture", "Producer", "RecordFuture", "RecordMetadata", "RecordTooLargeError",
           "TransactionToken", "complete_transaction"]

Header = tuple[str, bytes | None]
_time_ns = time.time_ns
# A module constant: reading an Enum member off its class costs ~50 ns in Python 3.11.
_IN_TRANSACTION = TxnState.IN_TRANSACTION


def _sleep_zero() -> None:
    time.sleep(0)


# Gives the GIL up for a moment (a waiting thread takes it) and returns. sched_yield() costs
# under a microsecond; time.sleep(0) also gives the GIL up, but Linux sleeps it for the
# thread's timer slack (50 µs by default, 74 µs measured per call). Windows has no
# sched_yield().
_yield_gil: Callable[[], None] = getattr(os, "sched_yield", _sleep_zero)
# send() sleeps 0 s at a new batch, instead of yielding, when a batch holds at least this many
# records. The sleep leaves the core to the sender (and a local broker) for its length, so the
# sender keeps up: with 100 B records in 256 KiB batches the sends ran 4-14% faster in 5 of 8
# interleaved sets (1-5% slower in 3), and flush() had 6-60 ms left at the end instead of
# 72-111 (medians, 3 sets). For batches of fewer, larger records its cost per record wins
# (1 KB: 0.3 µs per record; the sends 2-7% slower with it).
SLEEP_MIN_RECORDS_PER_BATCH = 1000
# Keys whose partition hash send() remembers (KeyHashes): ~150 bytes each.
KEY_HASHES_CAPACITY = 1 << 15


def _as_bytes(value: Any, what: str) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"record {what} must be bytes (or str, sent as UTF-8) or None, got "
                    f"{type(value).__name__}: serialise it first")


class Producer(ProducerTransactions):
    """Sends records to Kafka. Thread-safe: many threads may call ``send`` at once."""

    def __init__(self, config: Mapping[str, str] | ProducerConfig, *,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config if isinstance(config, ProducerConfig) else \
            ProducerConfig.from_properties(config)
        cfg = self.config
        self._clock = clock
        self._lock = threading.Lock()
        self._memory_freed = threading.Condition(self._lock)
        self._accumulator = RecordAccumulator(
            batch_size_bytes=max(cfg.batch_size_bytes, 1), linger_ms=cfg.linger_ms,
            buffer_memory_bytes=cfg.buffer_memory_bytes, compression=cfg.compression,
            retry_backoff_ms=cfg.retry_backoff_ms, delivery_timeout_ms=cfg.delivery_timeout_ms,
            new_result=BatchResult, now_source=clock.monotonic_ms,
            max_batch_uncompressed_bytes=cfg.max_request_size_bytes)
        state = None
        if cfg.enable_idempotence:
            state = ProducerState(transactional=cfg.transactional, max_in_flight=cfg.max_in_flight)
        self._sender = Sender(cfg, self._accumulator, self._lock, self._memory_freed, state,
                              clock)
        self._txn: TransactionManager | None = None
        if cfg.transactional_id is not None:
            assert state is not None
            self._txn = TransactionManager(cfg.transactional_id, cfg.transaction_timeout_ms,
                                           state, cfg.retry_backoff_ms)
            self._sender.txn = self._txn
        self._sticky = StickyPartitioner(max(cfg.batch_size_bytes, 1))
        # topic -> the sticky partition send() fills: send() counts its bytes here and asks
        # the partitioner only to switch.
        self._sticky_fast: dict[str, StickyLane] = {}
        # topic -> the open batch of each partition, for keyed records and records given a
        # partition (see producer_lanes).
        self._partition_lanes: dict[str, PartitionLanes] = {}
        self._key_hashes = KeyHashes(KEY_HASHES_CAPACITY)
        self._key_hash = self._key_hashes.get  # one attribute load in send(), not two
        self._batch_size_bytes = max(cfg.batch_size_bytes, 1)
        # Records above this cannot be sent at all: refused in send(), as Java does.
        self._size_limit = min(cfg.max_request_size_bytes, cfg.buffer_memory_bytes)
        self._ignore_keys = cfg.partitioner_ignore_keys
        self._closed = False
        self._sender.start()

    # --- sending -------------------------------------------------------------------------------

    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             headers: Sequence[Header] | None = None, partition: int | None = None,
             timestamp_ms: int | None = None,
             callback: Callable[[RecordMetadata | None, BaseException | None], Any] | None = None,
             ) -> RecordFuture:
        """Queue a record; the future resolves once the broker acknowledged it.

        ``callback(metadata, error)`` runs on the producer's I/O thread when the record is
        acknowledged or fails: keep it short and never wait on this producer inside it.
        Blocks (up to ``max.block.ms``) only to learn a new topic's partitions or while
        ``buffer.memory`` is full.
        """
        # A record with a bytes value and neither headers nor a timestamp takes a lane when
        # one is open: unkeyed, its topic's sticky lane (the open batch of the sticky
        # partition); keyed or with a partition given, the open batch of that partition. A
        # clock read, one lock and a few list appends. Anything else, or a record the lane
        # cannot take, goes to _send(), which makes every check in full (and opens lanes).
        if headers is None and timestamp_ms is None and type(value) is bytes:
            if key is None and partition is None:
                lane = self._sticky_fast.get(topic)
                if lane is None or (batch := lane.batch) is None:
                    return self._send(topic, value, key, headers, partition, timestamp_ms,
                                      callback)
                stop_bytes = lane.stop_bytes
                size = RECORD_OVERHEAD_BOUND + len(value)
            else:
                lanes = self._partition_lanes.get(topic)
                if lanes is None or lanes.topic_meta is not self._sender.topic_meta or (
                        key is not None and type(key) is not bytes):
                    return self._send(topic, value, key, headers, partition, timestamp_ms,
                                      callback)
                if partition is None:
                    if self._ignore_keys:
                        return self._send(topic, value, key, headers, partition, timestamp_ms,
                                          callback)
                    hashed = self._key_hash(key)  # type: ignore[arg-type]
                    if hashed is None:
                        hashed = self._key_hashes.positive_hash(key)  # type: ignore[arg-type]
                    batch = lanes.batches[hashed % lanes.partition_count]
                elif 0 <= partition < lanes.partition_count:
                    batch = lanes.batches[partition]
                else:
                    batch = None  # _send() names the partitions the topic has
                size = RECORD_OVERHEAD_BOUND + len(value) + (len(key) if key is not None else 0)
                if batch is None or size > self._size_limit:
                    return self._send(topic, value, key, headers, partition, timestamp_ms,
                                      callback)
                stop_bytes = batch.limit_bytes
            timestamp_ms = _time_ns() // 1_000_000
            accumulator = self._accumulator
            txn = self._txn
            lock = self._lock
            lock.acquire()  # cheaper than `with`, and this is once per record
            try:
                filled = batch.size_bytes + size
                if (filled <= stop_bytes and not batch.closed
                        and accumulator.used_bytes + size <= accumulator.buffer_memory_bytes
                        and (txn is None or txn.machine.state is _IN_TRANSACTION)):
                    values = batch.values
                    index = len(values)
                    values.append(value)
                    batch.timestamps.append(timestamp_ms)
                    keys = batch.keys
                    if keys is not None:
                        keys.append(key)
                    elif key is not None:  # the batch's first key: pad the earlier records
                        keys = batch.keys = [None] * index
                        keys.append(key)
                    if batch.headers is not None:
                        batch.headers.append(())
                    batch.size_bytes = filled
                    accumulator.used_bytes += size
                    if callback is not None:
                        batch.add_callback(index, callback)
                else:
                    index = -1
            finally:  # free when nothing raises (3.11's zero-cost try)
                lock.release()
            if index >= 0:
                return RecordFuture((batch, index))
        return self._send(topic, value, key, headers, partition, timestamp_ms, callback)

    def _send(self, topic: str, value: bytes | None, key: bytes | None,
              headers: Sequence[Header] | None, partition: int | None, timestamp_ms: int | None,
              callback: Callable[[RecordMetadata | None, BaseException | None], Any] | None,
              ) -> RecordFuture:
        """send() in full: any record, and the first of each batch."""
        if self._closed:
            raise KafkaDsError("send() on a closed producer")
        if value is not None and type(value) is not bytes:
            value = _as_bytes(value, "value")
        if key is not None and type(key) is not bytes:
            key = _as_bytes(key, "key")
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        if headers:
            headers = [(name, header if header is None or type(header) is bytes
                        else _as_bytes(header, "header value")) for name, header in headers]
            size = record_bytes_bound(key, value, headers)
        else:
            headers = None
            size = RECORD_OVERHEAD_BOUND + (len(value) if value is not None else 0) + (
                len(key) if key is not None else 0)
        sticky = None
        meta = None
        if partition is None:
            if key is None or self._ignore_keys:
                sticky = self._sticky_fast.get(topic)
                # A run of the sticky partition fills one batch: its limit, which the
                # compression-ratio estimate raises above batch.size (the Java client also
                # counts the estimated compressed bytes). It ends before the record that
                # would not fit, not after it: that record opened a second batch on the same
                # partition, and the run ended a record or two into it (the spill went out
                # alone when linger.ms passed before the partition's next run).
                if sticky is not None:
                    with self._lock:
                        sticky.close_lane()
                if sticky is None or (sticky.counted and sticky.counted + size >
                                      self._accumulator.batch_limit_bytes(topic)):
                    sticky = self._sticky_switch(topic, size)
                sticky.counted += size
                partition = sticky.partition
            else:
                meta = self._sender.topic_meta.get(topic) or self._topic_meta(topic)
                partition = self._key_hashes.positive(key) % meta.partition_count
        else:
            meta = self._sender.topic_meta.get(topic) or self._topic_meta(topic)
            if not 0 <= partition < meta.partition_count:
                raise ValueError(
                    f"partition {partition} does not exist: topic {topic!r} has "
                    f"{meta.partition_count} partitions (0..{meta.partition_count - 1})")
        if size > self._size_limit:
            check_record_size(size, self.config, topic)
        lock = self._lock
        lock.acquire()
        try:
            self._require_appendable("send()")
            appended = self._accumulator.append(topic, partition, key, value, timestamp_ms,
                                                headers, size)
            if appended is None:
                appended = self._wait_for_memory(topic, partition, key, value, timestamp_ms,
                                                 headers, size)
            batch, index, is_new = appended
            if callback is not None:
                batch.add_callback(index, callback)
            if not self._closed:
                if sticky is not None:
                    sticky.open_lane(batch, batch.limit_bytes, self._size_limit)
                else:
                    assert meta is not None
                    # Lanes only for the metadata this record was partitioned with.
                    topic_meta = self._sender.topic_meta
                    if topic_meta.get(topic) is meta:
                        lanes = self._partition_lanes.get(topic)
                        if lanes is None or lanes.topic_meta is not topic_meta:
                            lanes = self._partition_lanes[topic] = PartitionLanes(
                                topic_meta, meta.partition_count)
                        lanes.batches[partition] = batch
        finally:
            lock.release()
        if is_new:
            # A new batch means the previous one is full: a sleeping sender should send it
            # now; a busy one will find it on its next round without the syscall. Either
            # way, give the GIL up for a moment: the sender may be waiting for it with a
            # response to handle, and would otherwise wait out the interpreter's switch
            # interval (5 ms) while this thread appends.
            if self._sender.polling:
                self._sender.client.wakeup()
            if self._batch_size_bytes >= SLEEP_MIN_RECORDS_PER_BATCH * size:
                _sleep_zero()
            else:
                _yield_gil()
        return RecordFuture((batch, index))

    def send_many(self, topic: str, values: Sequence[bytes | None],
                  keys: Sequence[bytes | None] | None = None, partition: int | None = None,
                  timestamp_ms: int | None = None) -> BulkFuture:
        """Queue many records at once: the columnar path (one lock, no per-record objects).

        Keyed records are partitioned as ``send`` does (hashed in bulk), unkeyed ones fill the
        sticky partition batch by batch; ``partition`` sends them all to one partition. All
        get ``timestamp_ms`` (default: now). Values and keys must be ``bytes`` or None. The
        returned future completes when every record is acknowledged, and raises the first
        failure.
        """
        if self._closed:
            raise KafkaDsError("send_many() on a closed producer")
        count = len(values)
        if keys is not None and len(keys) != count:
            raise ValueError(f"send_many(): {len(keys)} keys for {count} values")
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        meta = self._sender.topic_meta.get(topic) or self._topic_meta(topic)
        txn = self._txn
        if txn is not None and txn.machine.state is not TxnState.IN_TRANSACTION:
            txn.machine.require(TxnState.IN_TRANSACTION, action="send_many()")
        overhead = RECORD_OVERHEAD_BOUND
        try:
            sizes = [len(value) + overhead for value in values]  # type: ignore[arg-type]
        except TypeError:
            sizes = [(len(v) if v is not None else 0) + overhead for v in values]
        if keys is not None:
            sizes = [size + (len(key) if key is not None else 0)
                     for size, key in zip(sizes, keys, strict=True)]
        if sizes and max(sizes) > self._size_limit:
            check_record_size(max(sizes), self.config, topic)
        timestamps = [timestamp_ms] * count
        touched: list[Any] = []
        groups: list[tuple[int | None, Sequence[bytes | None] | None, Sequence[bytes | None],
                           list[int], list[int]]]
        if partition is not None:
            if not 0 <= partition < meta.partition_count:
                raise ValueError(f"partition {partition} does not exist: topic {topic!r} has "
                                 f"{meta.partition_count} partitions")
            groups = [(partition, keys, values, timestamps, sizes)]
        elif keys is not None and not self._ignore_keys and None not in keys:
            chosen = partitions_for_keys(keys, meta.partition_count)  # type: ignore[arg-type]
            by_partition: dict[int, list[int]] = {}
            for index, chosen_partition in enumerate(chosen):
                by_partition.setdefault(chosen_partition, []).append(index)
            groups = [(p, [keys[i] for i in rows], [values[i] for i in rows],
                       timestamps[:len(rows)], [sizes[i] for i in rows])
                      for p, rows in by_partition.items()]
        elif keys is not None:  # some null keys: partition record by record
            futures = [self.send(topic, values[index], key=keys[index],
                                 timestamp_ms=timestamp_ms) for index in range(count)]
            return BulkFuture(list({id(f.batch): f.batch for f in futures}.values()), count)
        else:
            groups = [(None, None, values, timestamps, sizes)]
        if partition is None:
            self._sticky_sync(topic, meta.available)
        for group_partition, group_keys, group_values, group_stamps, group_sizes in groups:
            cumulative = list(itertools.accumulate(group_sizes, initial=0))
            self._append_many(topic, meta, group_partition, group_keys, group_values,
                              group_stamps, cumulative, touched)
        self._sender.client.wakeup()
        return BulkFuture(touched, count)

    def send_arrow(self, topic: str, values: Any, keys: Any = None, *, headers: Any = None,
                   timestamps_ms: Any = None, partitions: Any = None) -> BulkFuture:
        """Queue the records of Arrow columns: the columnar path, no Python object per record.

        ``values`` and ``keys`` are Arrow binary or string arrays (nulls allowed: a null key
        is an unkeyed record, a null value a tombstone); ``headers`` a
        ``list<struct<key: string, value: binary>>`` array; ``timestamps_ms`` one int, or
        int64 ms per record (an Arrow array may hold nulls: now); ``partitions`` int64 per
        record, -1 where the partitioner decides. Keyed records land where the Java producer
        puts them (murmur2, hashed in bulk), the rest fill the sticky partition. Records are
        encoded into sealed batches of at most ``batch.size`` here, in the caller's thread,
        while the sender sends the previous ones. The future completes when every record is
        acknowledged and raises the first failure.
        """
        from kafka_ds.protocol.arrow_batches import (
            ColumnarBatch,
            arrow_records,
            choose_partitions,
            encode_partitioned,
            record_sizes,
        )

        if self._closed:
            raise KafkaDsError("send_arrow() on a closed producer")
        now_ms = _time_ns() // 1_000_000
        records = arrow_records(values, keys, timestamps_ms=timestamps_ms, headers=headers,
                                now_ms=now_ms)
        meta = self._sender.topic_meta.get(topic) or self._topic_meta(topic)
        txn = self._txn
        if txn is not None and txn.machine.state is not TxnState.IN_TRANSACTION:
            txn.machine.require(TxnState.IN_TRANSACTION, action="send_arrow()")
        count = records.rows
        if not count:
            return BulkFuture([], 0)
        sizes = record_sizes(records)
        largest = int(sizes.max())
        if largest > self._size_limit:
            check_record_size(largest, self.config, topic)
        self._sticky_sync(topic, meta.available)
        limit_bytes = self._accumulator.batch_limit_bytes(topic)
        chosen = choose_partitions(records, sizes, topic, meta.partition_count, meta.available,
                                   self._sticky, explicit=partitions,
                                   ignore_keys=self._ignore_keys, limit_bytes=limit_bytes)
        touched: list[Any] = []
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        for partition, encoded in encode_partitioned(records, sizes, chosen, limit_bytes):
            created_ms = self._clock.monotonic_ms()
            batch = ColumnarBatch(topic, partition, created_ms, encoded,
                                  created_ms + self.config.delivery_timeout_ms, BatchResult())
            with self._lock:
                self._require_appendable("send_arrow()")
                while not self._accumulator.append_batch(batch):
                    self._await_free_memory(deadline, "send_arrow()")
            touched.append(batch)
            # The batch is full by construction: a sleeping sender should send it now (a busy
            # one finds it on its next round, without the syscall; one at the in-flight limit
            # for the leader cannot send it, and its next response wakes it).
            sender = self._sender
            if sender.polling and sender.could_send_to(sender.leader_of(topic, partition)):
                sender.client.wakeup()
        return BulkFuture(touched, count)

    def _append_many(self, topic: str, meta: TopicMeta, partition: int | None,
                     keys: Sequence[bytes | None] | None, values: Sequence[bytes | None],
                     timestamps: list[int], cumulative: list[int], touched: list[Any]) -> None:
        accumulator = self._accumulator
        start, end = 0, len(values)
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        while start < end:
            if partition is None:
                # A run fills one batch and ends before the record that would not fit.
                target, stop = self._sticky.fill(topic, meta.available, cumulative, start, end,
                                                 accumulator.batch_limit_bytes(topic))
            else:
                target, stop = partition, end
            with self._lock:
                self._require_appendable("send_many()")
                while True:
                    now_ms = self._clock.monotonic_ms()
                    start = accumulator.append_many(topic, target, keys, values, timestamps,
                                                    cumulative, start, now_ms, touched, stop)
                    if start >= stop:
                        break
                    self._await_free_memory(deadline, "send_many()")

    def _sticky_sync(self, topic: str, available: tuple[int, ...]) -> None:
        """Give the bytes counted by send() to the partitioner, drop the cache."""
        with self._lock:
            state = self._sticky_fast.pop(topic, None)
            if state is not None:
                state.close_lane()
        if state is not None and state.counted > state.known:
            # The bytes went to the lane's partition: counted there, never against the next.
            self._sticky.count(topic, state.counted - state.known)

    def _sticky_switch(self, topic: str, size: int) -> StickyLane:
        """Ask the partitioner where the next ``size`` bytes of ``topic`` go, in runs of the
        batch's limit; cache it."""
        meta = self._sender.topic_meta.get(topic) or self._topic_meta(topic)
        self._sticky_sync(topic, meta.available)
        partition = self._sticky.partition(topic, meta.available, size,
                                           self._accumulator.batch_limit_bytes(topic))
        # The partitioner counted ``size`` already; send() counts it again (and tells the
        # partitioner only the difference at the next sync).
        known = self._sticky.used_bytes(topic)
        state = self._sticky_fast[topic] = StickyLane(partition, known - size, known)
        return state

    def _wait_for_memory(self, topic: str, partition: int, key: bytes | None,
                         value: bytes | None, timestamp_ms: int, headers: Any, size: int
                         ) -> tuple[Any, int, bool]:
        # Called with the lock held: wait on the condition that shares it.
        check_record_size(size, self.config, topic)
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        while True:
            self._await_free_memory(deadline, "send()")
            appended = self._accumulator.append(topic, partition, key, value, timestamp_ms,
                                                headers, size, self._clock.monotonic_ms())
            if appended is not None:
                return appended

    def _await_free_memory(self, deadline: float, call: str) -> None:
        """With the lock held and the accumulator full: wake the sender and wait until it
        frees memory, or raise once ``max.block.ms`` (``deadline``, monotonic s) has passed."""
        self._sender.client.wakeup()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise KafkaTimeoutError(
                f"buffer.memory ({self.config.buffer_memory_bytes} bytes) stayed full for "
                f"max.block.ms ({self.config.max_block_ms} ms) in {call}: the brokers take "
                "records slower than they are sent; raise buffer.memory or max.block.ms, or "
                "check the brokers")
        self._memory_freed.wait(remaining)
        self._require_appendable(call)

    def _require_appendable(self, call: str) -> None:
        """(With the lock held.) Refuse an append once ``close()`` or the end of the
        transaction (commit, prepare, abort) has begun. Both say so under this lock, so a
        record is either queued before they flush, or refused: never left behind by a flush
        that EndTxn, the token or the sender's exit then follows (a send() that waited for
        buffer.memory through a ``close(0)`` returned a future nothing would complete)."""
        if self._closed:
            raise KafkaDsError(f"{call}: the producer was closed")
        if self._sender.stopped:
            error = self._sender.fatal_error
            raise KafkaDsError(f"{call}: the producer's sender thread stopped"
                               + (f" after an error ({error!r}): close this producer and make "
                                  "a new one" if error is not None else ""))
        txn = self._txn
        if txn is not None and txn.machine.state is not _IN_TRANSACTION:
            txn.machine.require(TxnState.IN_TRANSACTION, action=call)

    def _topic_meta(self, topic: str) -> TopicMeta:
        if not topic:
            raise ValueError("topic must be a non-empty string")
        timeout_ms = self.config.max_block_ms
        future = self._sender.submit(lambda sender: sender.topic_metadata(topic, timeout_ms))
        try:
            meta: TopicMeta = future.result(timeout_ms / 1000 + 1)
        except TimeoutError:
            raise KafkaTimeoutError(f"metadata of topic {topic!r} not available within "
                                    f"max.block.ms ({timeout_ms} ms)") from None
        return meta

    def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of ``topic`` (fetching its metadata if needed)."""
        meta = self._sender.topic_meta.get(topic) or self._topic_meta(topic)
        return list(range(meta.partition_count))

    def flush(self, timeout_ms: int | None = None) -> None:
        """Send everything queued now and wait until each record is acknowledged or failed."""
        with self._lock:
            self._accumulator.flushes_in_progress += 1
            pending = list(self._accumulator.incomplete)
        self._sender.client.wakeup()
        try:
            deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
            for batch in pending:
                remaining = None if deadline is None else max(deadline - time.monotonic(), 0)
                if not batch.result.wait(remaining):
                    raise KafkaTimeoutError(f"flush() did not complete within {timeout_ms} ms")
        finally:
            with self._lock:
                self._accumulator.flushes_in_progress -= 1

    def close(self, timeout_ms: int | None = None) -> None:
        """Send what is queued (waiting up to ``timeout_ms``), then stop. 0 drops it at once."""
        if self._closed:
            return
        with self._lock:
            self._closed = True
            self._accumulator.closing = True
            for lane in self._sticky_fast.values():
                lane.close_lane()  # send() now reaches _send(), which refuses
            for lanes in self._partition_lanes.values():
                lanes.close()
        force = timeout_ms == 0
        self._sender.initiate_close(force=force)
        self._sender.thread.join(None if timeout_ms is None else timeout_ms / 1000)
        if self._sender.thread.is_alive():
            self._sender.initiate_close(force=True)
            self._sender.thread.join()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(0 if exc_type is not None and self._txn is not None else None)

    def metrics(self) -> dict[str, float]:
        """Java-named metrics: rates per second since the producer started."""
        m = self._sender.metrics
        elapsed_s = max((self._clock.monotonic_ms() - m.started_ms) / 1000, 1e-3)
        batches = max(m.batches_sent, 1)
        return {
            "record-send-total": float(m.records_sent),
            "record-send-rate": m.records_sent / elapsed_s,
            "batch-size-avg": m.batch_bytes / batches,
            "compression-rate-avg": (m.compressed_bytes / m.uncompressed_bytes
                                     if m.uncompressed_bytes else 1.0),
            "record-retry-total": float(m.record_retries),
            "record-error-total": float(m.record_errors),
            "request-latency-avg": m.request_latency_ms_total / max(m.requests, 1),
            "request-total": float(m.requests),
            "batch-split-total": float(m.batch_splits),
            "epoch-bump-total": float(m.epoch_bumps),
            "buffer-available-bytes": float(self.config.buffer_memory_bytes
                                            - self._accumulator.used_bytes),
        }
