"""The producer's background I/O thread: drains batches into Produce requests and settles them.

Layer: client (owns a ``net.NetworkClient`` and its ``Cluster``; the state machines it drives
are sans-IO: ``accumulator``, ``producer_state``, ``txn_state``). Specs: KIP-98 (idempotent
and transactional produce), KIP-360 (epoch bump), KIP-890 (Produce v12 inside transactions
v2), KIP-951 (new leader in Produce errors); seeds 000, 001, 003.

One loop, on one thread, does all network I/O of a producer (the NetworkClient is not
thread-safe; user threads only append under the shared lock and call ``wakeup``)::

    loop:
        run queued tasks (metadata for send(), transaction requests) -- blocking, here
        refresh metadata when stale; get or bump the producer id
        [lock] expire batches past delivery.timeout.ms; find brokers with batches ready
        keep those whose connection is ready (never waits: a connect is started and polled,
          so a dead or stalled broker holds up only its own batches); [lock] drain
        stamp sequences; encode + compress each batch (outside the lock)
        one Produce per broker, at most max.in.flight.requests.per.connection in flight
        poll: responses complete batches, or re-enqueue / split / fail them

Transactional control requests run as tasks on this thread too (``transactions.py``); they
block the loop while they wait, but their ``poll`` keeps serving Produce responses.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from kafka_ds.client.cluster import Cluster
from kafka_ds.client.delivery import (
    BatchResult,
    RecordTooLargeError,
    run_record_callbacks,
    summarize_record_errors,
)
from kafka_ds.client.producer_config import ProducerConfig
from kafka_ds.net.clock import SYSTEM_CLOCK, Clock
from kafka_ds.net.future import RequestFuture
from kafka_ds.net.pool import NetworkClient
from kafka_ds.protocol.accumulator import ProducerBatch, RecordAccumulator
from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.batch_encoder import encode_section
from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.errors import (
    AuthenticationError,
    BrokerError,
    ErrorCode,
    KafkaDsError,
    KafkaTimeoutError,
    is_invalid_metadata,
    is_retriable,
)
from kafka_ds.protocol.messages.init_producer_id import InitProducerIdRequest
from kafka_ds.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from kafka_ds.protocol.producer_state import Decision, ProducerState
from kafka_ds.protocol.record_builder import assemble_batch
from kafka_ds.protocol.records import HEADER_BYTES, TRANSACTIONAL_BIT

if TYPE_CHECKING:
    from kafka_ds.client.transactions import TransactionManager
    from kafka_ds.protocol.schema import Request

log = logging.getLogger(__name__)

_NETWORK_CODE = ErrorCode.NETWORK_EXCEPTION
_TIMEOUT_CODE = ErrorCode.REQUEST_TIMED_OUT
_IDLE_POLL_MS = 200


class TopicMeta(NamedTuple):
    """What ``send()`` needs to partition records of a topic (published by the sender)."""

    partition_count: int
    available: tuple[int, ...]  # partitions that have a leader


class Metrics:
    """Counters behind ``Producer.metrics()``; written by the sender thread only."""

    def __init__(self, now_ms: int) -> None:
        self.started_ms = now_ms
        self.records_sent = 0
        self.batches_sent = 0
        self.batch_bytes = 0
        self.compressed_bytes = 0
        self.uncompressed_bytes = 0
        self.record_retries = 0
        self.record_errors = 0
        self.requests = 0
        self.request_latency_ms_total = 0
        self.batch_splits = 0
        self.epoch_bumps = 0


class Sender:
    """The producer's I/O loop; ``start()`` runs it in a daemon thread."""

    def __init__(self, config: ProducerConfig, accumulator: RecordAccumulator,
                 lock: threading.Lock, memory_freed: threading.Condition,
                 producer_state: ProducerState | None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.accumulator = accumulator
        self.lock = lock
        self.memory_freed = memory_freed
        self.state = producer_state
        self.clock = clock
        self.client = NetworkClient(config.client.bootstrap_servers,
                                    config.client.connection, clock)
        self.cluster = Cluster(self.client, metadata_max_age_ms=config.client.metadata_max_age_ms,
                               retry_backoff_ms=config.retry_backoff_ms)
        self.txn: TransactionManager | None = None
        self.metrics = Metrics(clock.monotonic_ms())
        # Published for send(): replaced whole (never mutated) so readers need no lock.
        self.topic_meta: dict[str, TopicMeta] = {}
        self._topics: set[str] = set()
        self._metadata_stale = False
        # Topics are fetched when first sent to (topic_metadata); the periodic refresh counts
        # from the producer's start. From 0, the loop's first pass refreshed at once, and when
        # the first send's metadata task ran in that pass (a transactional producer's init,
        # begin and first send all do), its topic was asked for a second time before the
        # first Produce.
        self._metadata_at_ms = clock.monotonic_ms()
        self._tasks: deque[tuple[Callable[[Sender], Any], Future[Any]]] = deque()
        self._in_flight: dict[int, int] = {}
        self._in_flight_batches: set[ProducerBatch] = set()
        self._running = True
        self.polling = True  # read by send() without a lock: wake the sender if it may sleep
        self._force_close = False
        self._pid_retry_at_ms = 0
        self.fatal_error: BaseException | None = None
        # Set (under the lock) once the thread's loop has ended: nothing appended after it
        # would ever be sent or failed, so appends check it (Producer._require_appendable).
        self.stopped = False
        self.thread = threading.Thread(target=self._run, name="kafka-ds-producer-sender",
                                       daemon=True)

    # --- thread control (any thread) -------------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def wakeup(self) -> None:
        self.client.wakeup()

    def submit(self, task: Callable[[Sender], Any]) -> Future[Any]:
        """Run ``task(sender)`` on the sender thread; its result arrives in the future."""
        future: Future[Any] = Future()
        if not self.thread.is_alive() and self.thread.ident is not None:
            future.set_exception(KafkaDsError("the producer is closed"))
            return future
        self._tasks.append((task, future))
        self.client.wakeup()
        return future

    def initiate_close(self, force: bool = False) -> None:
        self._running = False
        self._force_close = self._force_close or force
        self.client.wakeup()

    # --- the loop --------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._running:
                self.run_once()
            # Graceful close: send what is left (and wait for answers) unless forced.
            while not self._force_close and (self._has_pending()):
                self.run_once()
        except BaseException as exc:  # a bug: fail everything rather than hang callers
            log.exception("producer sender thread failed")
            self.fatal_error = exc
        finally:
            with self.lock:
                self.stopped = True
            self._fail_everything(self.fatal_error or KafkaDsError(
                "the producer was closed before these records were sent"))
            for _, future in self._tasks:
                if not future.done():
                    future.set_exception(KafkaDsError("the producer is closed"))
            self.client.close()

    def _has_pending(self) -> bool:
        with self.lock:
            return bool(self.accumulator.incomplete) or bool(self._tasks)

    def run_once(self) -> None:
        self._run_tasks()
        now_ms = self.clock.monotonic_ms()
        if self._metadata_stale or now_ms - self._metadata_at_ms >= \
                self.config.client.metadata_max_age_ms:
            self._refresh_metadata(now_ms)
        with self.lock:
            expired = self._collect_expired(now_ms)
        if expired:
            self._expire(expired)
        if self.fatal_error is not None:  # e.g. not authorised: fail what arrives, at once
            self._fail_everything(self.fatal_error)
            self.client.poll(_IDLE_POLL_MS)
            return
        if self.state is not None and not self._ensure_producer_id(now_ms):
            self.client.poll(min(self.config.retry_backoff_ms, _IDLE_POLL_MS))
            return
        if self.txn is not None:
            self.txn.before_drain(self)
        # From here until the poll below returns, a send() that opens a batch wakes us:
        # set before looking at the queues, so that no new batch can be missed.
        self.polling = True
        with self.lock:
            nodes, next_ms, unknown = self.accumulator.ready(now_ms, self.leader_of)
        if unknown:
            self._metadata_stale = True
        # Outside the lock: starting a connect resolves the broker's name.
        connected = [node for node in nodes if self._connected(node)]
        with self.lock:
            limit = self.config.max_in_flight
            sendable = [node for node in connected if self._in_flight.get(node, 0) < limit]
            drained = self.accumulator.drain(sendable, self.leader_of,
                                             self.config.max_request_size_bytes, now_ms,
                                             self._can_send)
            if self.state is not None:
                for batches in drained.values():
                    for batch in batches:
                        self.state.assign(batch, self.txn is not None)
            else:
                self.accumulator.new_partitions.clear()
        for node, batches in drained.items():
            self._send_produce(node, batches, now_ms)
        timeout_ms = _IDLE_POLL_MS
        if next_ms is not None:
            timeout_ms = min(timeout_ms, max(0, next_ms - now_ms))
        if unknown:
            timeout_ms = min(timeout_ms, self.config.retry_backoff_ms)
        if drained or self._tasks:
            timeout_ms = 0
        try:
            self.client.poll(timeout_ms)
        finally:
            self.polling = False

    def _connected(self, node: int) -> bool:
        """Is ``node``'s connection ready for Produce? Never waits: a node still connecting
        (or dead, or stalled) keeps its batches queued while the others are served, as the
        Java producer's ``NetworkClient.ready`` does; they expire at delivery.timeout.ms."""
        error = self.client.connect_failure(node)
        if isinstance(error, AuthenticationError):
            self._fatal(error)
            return False
        if error is not None:
            log.info("cannot connect to broker %s (will retry): %s", node, error)
            self._metadata_stale = True  # the partitions may have moved elsewhere
        return self.client.ready(node)

    def _run_tasks(self) -> None:
        while self._tasks:
            task, future = self._tasks.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(task(self))
            except BaseException as exc:
                future.set_exception(exc)

    # --- metadata --------------------------------------------------------------------------

    def could_send_to(self, node: int) -> bool:
        """Whether the loop may send to ``node`` now (an unknown leader, -1, counts as yes).

        Read by other threads without the lock, to skip waking a sender that sits at the
        in-flight limit: the response it waits for wakes it, and it then drains what was
        queued meanwhile. A stale answer costs one useless wakeup, or leaves a batch to that
        response, never more (the count only drops inside ``poll``, which returns after it).
        """
        return node < 0 or self._in_flight.get(node, 0) < self.config.max_in_flight

    def leader_of(self, topic: str, partition: int) -> int:
        info = self.cluster.topics.get(topic)
        if info is None:
            return -1
        partition_info = info.partitions.get(partition)
        return -1 if partition_info is None else partition_info.leader_id

    def topic_metadata(self, topic: str, timeout_ms: int) -> TopicMeta:
        """(On the sender thread) metadata of ``topic``, fetched if unknown."""
        self._topics.add(topic)
        meta = self.topic_meta.get(topic)
        if meta is not None:
            return meta
        self.cluster.topic(topic, timeout_ms=timeout_ms)
        self._publish()
        return self.topic_meta[topic]

    def _refresh_metadata(self, now_ms: int) -> None:
        self._metadata_stale = False
        self._metadata_at_ms = now_ms
        if not self._topics:
            return
        try:
            self.cluster.refresh(sorted(self._topics))
        except KafkaDsError as exc:
            if isinstance(exc, AuthenticationError):
                self._fatal(exc)
                return
            log.warning("producer metadata refresh failed (will retry): %s", exc)
            self._metadata_stale = True
            self._metadata_at_ms = now_ms - self.config.client.metadata_max_age_ms \
                + self.config.retry_backoff_ms
            return
        self._publish()

    def _publish(self) -> None:
        meta = {}
        for name, info in self.cluster.topics.items():
            available = tuple(sorted(p for p, part in info.partitions.items()
                                     if part.leader_id >= 0))
            meta[name] = TopicMeta(info.partition_count, available or tuple(info.partitions))
        self.topic_meta = meta

    # --- producer id -----------------------------------------------------------------------

    def _ensure_producer_id(self, now_ms: int) -> bool:
        state = self.state
        assert state is not None
        if self.txn is not None:
            return state.has_producer_id  # transactions get theirs in init_transactions()
        if state.has_producer_id and not state.bump_required:
            return True
        if state.bump_required and not state.ready_to_bump():
            return True  # let in-flight batches settle first; can_send holds new ones
        if state.bump_required:
            reason = state.bump_reason
            if state.bump_epoch():  # KIP-360: same producer id, epoch + 1
                self._bumped(state, reason)
                return True
        if now_ms < self._pid_retry_at_ms:
            return state.has_producer_id and not state.bump_required
        try:
            self._init_producer_id(state)
        except KafkaDsError as exc:
            if isinstance(exc, AuthenticationError) or (
                    isinstance(exc, BrokerError) and not exc.retriable):
                self._fatal(exc)
                return False
            log.info("InitProducerId failed, will retry: %s", exc)
            self._pid_retry_at_ms = now_ms + self.config.retry_backoff_ms
            return False
        return True

    def _bumped(self, state: ProducerState, reason: str) -> None:
        log.warning("new epoch for the idempotent producer (producer id %s, epoch %s); "
                    "sequences restart at 0: %s", state.producer_id, state.producer_epoch,
                    reason)
        self.metrics.epoch_bumps += 1

    def _init_producer_id(self, state: ProducerState) -> None:
        """A producer id for the idempotent producer: the first one, or a new one when the
        epoch is exhausted (with no transactional id the broker cannot bump an epoch: it
        ignores the id and epoch sent and always hands out a new producer id)."""
        connection = self.client.any_connection()
        version = connection.version_for(ApiKey.INIT_PRODUCER_ID)
        request = InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=self.config.transaction_timeout_ms,
            producer_id=-1, producer_epoch=-1)
        response = self.client.request(connection.node_id, request, version=version)
        if response.error_code:
            raise BrokerError(response.error_code, "InitProducerId for the idempotent producer")
        reason = state.bump_reason if state.bump_required else ""
        state.set_producer_id(response.producer_id, response.producer_epoch)
        if reason:
            self._bumped(state, f"epoch exhausted, new producer id: {reason}")

    # --- draining and sending ----------------------------------------------------------------

    def _can_send(self, batch: ProducerBatch) -> bool:
        if self.txn is not None and not self.txn.can_send(batch):
            return False
        if self.state is None:
            return True
        rewind_to = self.state.needs_rewind(batch.topic, batch.partition)
        if rewind_to is not None:
            for queued in self.accumulator.queued(batch.topic, batch.partition):
                if queued.base_sequence >= rewind_to:
                    queued.reset_sequence()
            self.state.apply_rewind(batch.topic, batch.partition)
        return self.state.can_send(batch)

    def produce_version(self, node: int) -> int:
        version = self.client.connection(node).version_for(ApiKey.PRODUCE)
        if self.txn is not None:
            version = min(version, self.txn.produce_version_cap())
        return version

    def encode(self, batch: ProducerBatch) -> bytes:
        if batch.encoded is not None:
            return batch.encoded
        # A ColumnarBatch (send_arrow) arrives encoded by the caller's thread; looked up by
        # attribute so that the per-record producer never imports numpy and pyarrow.
        columnar = getattr(batch, "encoded_records", None)
        if columnar is not None:
            section: Any = columnar.section
            count, base_ms, max_ms = (columnar.record_count, columnar.base_timestamp_ms,
                                      columnar.max_timestamp_ms)
        else:
            section = encode_section(batch.values, batch.timestamps, batch.keys, batch.headers)
            timestamps = batch.timestamps
            count, base_ms, max_ms = len(timestamps), timestamps[0], max(timestamps)
        codec = self.config.compression
        encoded = assemble_batch(
            section, attributes=codec | (TRANSACTIONAL_BIT if batch.is_transactional else 0),
            record_count=count, last_offset_delta=count - 1, base_offset=0,
            base_timestamp_ms=base_ms, max_timestamp_ms=max_ms,
            producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence, compression_level=self.config.compression_level)
        if codec != Compression.NONE and section:
            batch.compression_ratio = (len(encoded) - HEADER_BYTES) / len(section)
            self.accumulator.ratios.observe(batch.topic, codec, batch.compression_ratio)
        metrics = self.metrics
        metrics.uncompressed_bytes += len(section) + HEADER_BYTES
        metrics.compressed_bytes += len(encoded)
        batch.encoded = encoded
        return encoded

    def _send_produce(self, node: int, batches: list[ProducerBatch], now_ms: int) -> None:
        try:
            version = self.produce_version(node)
        except KafkaDsError as exc:
            if isinstance(exc, AuthenticationError):
                self._fatal(exc)
                return
            for batch in batches:
                self._handle(batch, _NETWORK_CODE, -1, -1, str(exc), now_ms)
            return
        topics: dict[str, list[PartitionProduceData]] = {}
        by_partition: dict[tuple[str, int], ProducerBatch] = {}
        for batch in batches:
            topics.setdefault(batch.topic, []).append(
                PartitionProduceData(index=batch.partition, records=self.encode(batch)))
            by_partition[(batch.topic, batch.partition)] = batch
            batch.last_attempt_ms = now_ms
        # Produce v13 names topics by id (KIP-516): use it only when every topic has one, and
        # decide before building the request, which cannot mix names and ids.
        topic_ids = {name: info.topic_id for name in topics
                     if (info := self.cluster.topics.get(name)) is not None and info.topic_id.int}
        if len(topic_ids) < len(topics):
            version = min(version, 12)
        if version >= 13:
            topic_data = [TopicProduceData(topic_id=topic_ids[name], partition_data=partitions)
                          for name, partitions in topics.items()]
        else:
            topic_data = [TopicProduceData(name=name, partition_data=partitions)
                          for name, partitions in topics.items()]
        acks = self.config.acks
        request = ProduceRequest(
            transactional_id=self.config.transactional_id if self.txn is not None else None,
            acks=acks, timeout_ms=self.config.request_timeout_ms, topic_data=topic_data)
        self._in_flight[node] = self._in_flight.get(node, 0) + 1
        self._in_flight_batches.update(batches)
        self.metrics.requests += 1
        future = self.client.send(node, request, version, expect_response=acks != 0)
        future.add_callback(partial(self._on_produce_response, node, by_partition, now_ms))

    def _on_produce_response(self, node: int, batches: dict[tuple[str, int], ProducerBatch],
                             sent_ms: int, future: RequestFuture[Any]) -> None:
        self._in_flight[node] -= 1
        now_ms = self.clock.monotonic_ms()
        self.metrics.request_latency_ms_total += now_ms - sent_ms
        for batch in batches.values():
            self._in_flight_batches.discard(batch)
        if future.failed():
            error = future.error
            if isinstance(error, AuthenticationError):  # e.g. a failed re-authentication
                self._fatal(error)
                return
            code = _TIMEOUT_CODE if isinstance(error, KafkaTimeoutError) else _NETWORK_CODE
            self._metadata_stale = True
            for batch in batches.values():
                self._handle(batch, code, -1, -1, str(error), now_ms)
            return
        response: ProduceResponse | None = future.result()
        if response is None:  # acks=0: no answer comes
            for batch in batches.values():
                self._handle(batch, 0, -1, -1, None, now_ms)
            return
        by_id = {info.topic_id: name for name, info in self.cluster.topics.items()}
        for topic in response.responses:
            name = topic.name or by_id.get(topic.topic_id, "")
            for part in topic.partition_responses:
                batch = batches.pop((name, part.index), None)  # type: ignore[arg-type]
                if batch is None:
                    continue
                message = part.error_message
                if part.record_errors:
                    message = summarize_record_errors(part.record_errors, message)
                self._handle(batch, part.error_code, part.base_offset,
                             part.log_append_time_ms, message, now_ms)
        for batch in batches.values():  # the broker left some out: treat as retriable
            self._handle(batch, _NETWORK_CODE, -1, -1, "missing from the response", now_ms)

    # --- settling batches ------------------------------------------------------------------

    def _handle(self, batch: ProducerBatch, code: int, base_offset: int,
                log_append_time_ms: int, message: str | None, now_ms: int) -> None:
        state = self.state
        result: BatchResult = batch.result
        if result.done():  # expired while in flight: only the sequence bookkeeping is left
            if state is not None:
                if code == 0:
                    state.on_success(batch)
                else:
                    state.forget_in_flight(batch)
            return
        if code == 0:
            if state is not None:
                state.on_success(batch)
            self._complete(batch, base_offset, log_append_time_ms, None)
            return
        if is_invalid_metadata(code) or code == _NETWORK_CODE:
            self._metadata_stale = True
        can_retry = (batch.attempts < self.config.retries
                     and now_ms < batch.delivery_deadline_ms and not self._force_close)
        if state is not None:
            decision = state.on_error(batch, code, can_retry=can_retry)
        elif code == ErrorCode.MESSAGE_TOO_LARGE and batch.record_count > 1:
            decision = Decision.SPLIT
        elif can_retry and is_retriable(code):
            decision = Decision.RETRY
        else:
            decision = Decision.FAIL
        if decision is Decision.SUCCESS:
            self._complete(batch, -1, -1, None)
        elif decision is Decision.RETRY:
            log.debug("retrying %r after %s", batch, code)
            self.metrics.record_retries += batch.record_count
            with self.lock:
                self.accumulator.reenqueue(batch, now_ms)
        elif decision is Decision.SPLIT:
            self._split(batch, now_ms)
        else:
            self._complete(batch, -1, -1, self._error_for(batch, code, message))

    def _split(self, batch: ProducerBatch, now_ms: int) -> None:
        with self.lock:
            self.accumulator.ratios.reset(batch.topic, self.config.compression,
                                          batch.compression_ratio)
            pieces = self.accumulator.split(batch, now_ms)
            self.accumulator.deallocate(batch)
            self.memory_freed.notify_all()
        self.metrics.batch_splits += 1
        log.info("split a batch of %d records for %s-%d into %d after MESSAGE_TOO_LARGE",
                 batch.record_count, batch.topic, batch.partition, len(pieces))
        starts, start = [], 0
        for piece in pieces:
            starts.append((start, piece))
            start += piece.record_count
        result: BatchResult = batch.result
        result.split_into(starts)
        if batch.callbacks:
            result.add_callback(partial(run_record_callbacks, batch))

    def _error_for(self, batch: ProducerBatch, code: int, message: str | None) -> KafkaDsError:
        where = f"producing to {batch.topic}-{batch.partition}"
        if code == ErrorCode.MESSAGE_TOO_LARGE:
            size = len(batch.encoded) if batch.encoded is not None else batch.size_bytes
            return RecordTooLargeError(
                f"{where}: the broker rejected a record of {size} bytes (as a batch of one "
                "record, headers included) as MESSAGE_TOO_LARGE: it exceeds the topic's "
                f"max.message.bytes{self._topic_limit(batch.topic)}. Raise that limit or send "
                "smaller records")
        if code == _TIMEOUT_CODE and message and "request.timeout.ms" in message:
            return KafkaTimeoutError(f"{where}: {message}")
        return BrokerError(code, where, message)

    def _topic_limit(self, topic: str) -> str:
        """`` (N bytes)``: the topic's max.message.bytes, for an error message (rare path)."""
        from kafka_ds.client.admin import Admin

        try:
            value = Admin(self.cluster).describe_topic_config(
                topic, timeout_ms=self.config.request_timeout_ms).get("max.message.bytes")
        except KafkaDsError:
            return ""
        return f" ({value} bytes)" if value else ""

    def _complete(self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int,
                  error: BaseException | None) -> None:
        metrics = self.metrics
        if error is None:
            metrics.records_sent += batch.record_count
            metrics.batches_sent += 1
            if self.txn is not None:
                # The transaction's records (its token's record_count), counted here once a
                # batch rather than in send() once a record: when the transaction is
                # prepared or committed, every batch of it has been acknowledged.
                self.txn.record_count += batch.record_count
            metrics.batch_bytes += len(batch.encoded) if batch.encoded is not None else 0
        else:
            metrics.record_errors += batch.record_count
            if self.txn is not None:
                self.txn.on_batch_failed(batch, error)
        with self.lock:
            self.accumulator.deallocate(batch)
            self.memory_freed.notify_all()
        result: BatchResult = batch.result
        result.complete(base_offset, log_append_time_ms, error)
        if batch.callbacks:
            run_record_callbacks(batch)

    def _collect_expired(self, now_ms: int) -> list[ProducerBatch]:
        """(Under the lock) batches past delivery.timeout.ms, queued or in flight."""
        expired = self.accumulator.expired(now_ms)
        expired += [batch for batch in self._in_flight_batches
                    if batch.delivery_deadline_ms <= now_ms and not batch.result.done()]
        return expired

    def _expire(self, expired: list[ProducerBatch]) -> None:
        for batch in expired:
            if self.state is not None:
                self.state.on_expired(batch)
            leader = self.leader_of(batch.topic, batch.partition)
            connect_error = self.client.connection_error(leader) if leader >= 0 else None
            why = f" (connecting to its leader failed: {connect_error})" if connect_error else ""
            error = KafkaTimeoutError(
                f"{batch.record_count} records for {batch.topic}-{batch.partition} expired "
                f"after {self.config.delivery_timeout_ms} ms (delivery.timeout.ms) "
                f"{'waiting to be sent' if batch.attempts == 0 else 'of retries'}{why}; check "
                "that the brokers are reachable and the partition has a leader")
            self._complete(batch, -1, -1, error)

    def fail_queued(self, error: BaseException,
                    predicate: Callable[[ProducerBatch], bool] = lambda batch: True) -> int:
        """Fail queued (not in-flight) batches, e.g. when a transaction aborts."""
        with self.lock:
            batches = self.accumulator.remove_queued(predicate)
        for batch in batches:
            if self.state is not None:
                self.state.on_expired(batch)
            self._complete(batch, -1, -1, error)
        return len(batches)

    def _fatal(self, error: AuthenticationError | BrokerError) -> None:
        """Configuration no retry can fix (credentials, a certificate, a refused producer id):
        fail every unfinished batch, queued or sent, and every later send, at once rather
        than at delivery.timeout.ms, as the Java producer's fatal errors do."""
        log.error("producer failed: %s", error)
        self.fatal_error = error
        self._fail_everything(error)

    def _fail_everything(self, error: BaseException) -> None:
        with self.lock:
            batches = list(self.accumulator.incomplete)
            self.accumulator.remove_queued(lambda batch: True)
        for batch in batches:
            if not batch.result.done():
                self._complete(batch, -1, -1, error)

    def wait_until(self, condition: Callable[[], bool], timeout_ms: int | None) -> bool:
        """(On the sender thread, inside a task) run the loop until ``condition()``."""
        deadline = None if timeout_ms is None else self.clock.monotonic_ms() + timeout_ms
        while not condition():
            if deadline is not None and self.clock.monotonic_ms() >= deadline:
                return False
            self.run_once_without_tasks()
        return True

    def run_once_without_tasks(self) -> None:
        tasks, self._tasks = self._tasks, deque()
        try:
            self.run_once()
        finally:
            tasks.extend(self._tasks)
            self._tasks = tasks

    def request(self, node: int, request: Request, version: int | None = None,
                timeout_ms: int | None = None) -> Any:
        return self.client.request(node, request, timeout_ms=timeout_ms, version=version)

