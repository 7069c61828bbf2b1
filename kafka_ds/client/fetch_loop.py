"""The fetch engine behind ``Fetcher``: sessions per broker, prefetch, errors, data loss.

Layer: client. ``fetcher`` explains the pipeline and the memory bound; this module is the
mechanism. One ``FetchLoop`` serves one read (a set of offset ranges) and is driven by
iterating ``run``, which yields ``(TopicPartition, RecordColumns)`` per decoded chunk and
``(tp, None)`` just before it must wait for the network (the caller's cue to flush output).

Fetch sessions (one per broker) are closed when a read ends, or with ``keep_sessions`` left
open in ``sessions`` (owned by the ``Fetcher``) for its next read: that read's first request
to a broker is then incremental (its partitions and positions as changes, the previous
read's partitions as forgotten) instead of a full request, and no close round trip ends each
read. A session the broker evicted meanwhile answers FETCH_SESSION_ID_NOT_FOUND and is
opened again with a full request (below); nothing is lost, as positions only move on data.

Error handling, per partition unless said otherwise:

* NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION,
  OFFSET_NOT_AVAILABLE and other retriable errors, a lost connection or a request timeout (all
  of that broker's partitions): refresh metadata, wait ``retry.backoff.ms``, find the leader
  again and continue from the same position. Bounded by ``fetch.timeout.ms`` of no progress.
* The topic is not in a Metadata answer (``topic_errors``): TOPIC_AUTHORIZATION_FAILED (there
  or in a Fetch) is ``TopicAuthorizationError``, raised after the data before it, never
  skipped. UNKNOWN_TOPIC_OR_PARTITION is retried (a lagging broker, a topic created a moment
  ago) and becomes ``UnknownTopicError`` after ``fetch.timeout.ms``; only a topic this read
  has already seen that no broker knows any more (or that came back with another topic id)
  was deleted: ``TopicDeletedError``, data loss.
* FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH (the whole response): the session
  resets and the next request is full; no data is lost because positions did not move.
* OFFSET_OUT_OF_RANGE: ListOffsets decides. Below the log start, or beyond the log end, is
  data loss; inside the log it was a race (leader change): retry.
* Data returned from above the requested offset while the log start is above it too: the
  records in between were deleted (retention, DeleteRecords): data loss. The same gap with
  the log start below the requested offset is compaction or markers: normal.
* KIP-392: with ``client.rack`` set, the leader may name a replica in that rack to read from
  (``preferred_read_replica``, when the brokers run a rack-aware ``replica.selector.class``).
  The partition then reads from it until ``metadata.max.age.ms`` passes. Any error from it,
  OFFSET_OUT_OF_RANGE included (a follower behind), a lost connection, or its absence from
  the metadata sends the partition back to the leader, as Java's ``AbstractFetch`` does.
* A Fetch response that does not decode (``DecodeError``; the connection closes under it):
  raised at once, naming the node and the partitions and offsets the Fetch asked for. Nothing
  of it is handed out: damaged bytes are not guessed at, and a CRC failure inside the records
  (``CorruptRecordError``) is raised by the decoder naming the partition and the batch offset.
* Data loss raises ``DataLossError`` (topic, partition, both offsets) once the data before it
  has been handed out, or with ``fail.on.data.loss=false`` skips to the earliest available
  offset, logging a warning and counting ``offsets_skipped``.

Which replica a partition reads from is ``read_replica``'s (KIP-392); whether missing offsets
are a loss, and where the read resumes, is ``log_gaps``'; the wording of the errors that stop
a read (no progress, a response that does not parse) is ``fetch_errors``'.

Decoding (``chunk_decode``) runs in the calling thread, or with ``decode.threads`` in two
steps for chunks of large zstd or gzip records: a small pool scans them (CRC, decompression)
as responses arrive, and the calling thread finishes them (records, Arrow) in arrival order
(``Chunk.decoding``). Otherwise, with ``receive.ahead``, a helper thread receives the response
in flight while the calling thread decodes a large compressed chunk (``fetch_receive``).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kafka_ds.client import log_gaps, read_replica
from kafka_ds.client.chunk_decode import (
    decode_chunk,
    finish_chunk,
    scan_chunk,
    worth_receiving_ahead,
    worth_scanning_ahead,
)
from kafka_ds.client.cluster import Cluster
from kafka_ds.client.fetch_config import FetchConfig, FetchMetrics
from kafka_ds.client.fetch_errors import stalled_error, undecodable_response
from kafka_ds.client.fetch_receive import ReceiveAhead
from kafka_ds.client.fetch_state import (
    BrokerFetch,
    Chunk,
    PartitionRead,
    SentFetch,
    scan_batches,
)
from kafka_ds.client.topic_errors import (
    TopicAuthorizationError,
    TopicDeletedError,
    UnknownTopicError,
)
from kafka_ds.net.future import RequestFuture
from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.decompression_budget import DecompressionBudget
from kafka_ds.protocol.errors import (
    BrokerError,
    DataLossError,
    DecodeError,
    ErrorCode,
    KafkaDsError,
    KafkaTimeoutError,
    NetworkError,
)
from kafka_ds.protocol.fetch_session import (
    TOPIC_ID_VERSION,
    ZERO_UUID,
    FetchSession,
    PartitionFetch,
    PendingFetch,
)
from kafka_ds.protocol.messages.fetch import FetchResponse, PartitionData
from kafka_ds.protocol.record_columns import RecordColumns
from kafka_ds.protocol.types import TopicPartition

log = logging.getLogger(__name__)

_SESSION_ERRORS = (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                   ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
_NO_TP = TopicPartition("", -1)
# Waiting for the network wakes up at least this often to check backoffs and timeouts.
_POLL_SLICE_MS = 200


@dataclass(eq=False)
class FetchLoop:
    cluster: Cluster
    config: FetchConfig
    metrics: FetchMetrics
    include_headers: bool
    sent_requests: deque[SentFetch] = field(default_factory=lambda: deque(maxlen=1000))
    # Fetch sessions by node id: shared with the owner's next reads when ``keep_sessions``.
    sessions: dict[int, FetchSession] = field(default_factory=dict)
    keep_sessions: bool = False
    use_sessions: bool = True  # False: sessionless full requests (see FetchSession)

    def __post_init__(self) -> None:
        self.client = self.cluster.client
        self.clock = self.client.clock
        self._nodes: dict[int, BrokerFetch] = {}
        self._parts: dict[TopicPartition, PartitionRead] = {}
        self._queue: deque[Chunk] = deque()
        self._request_timeout_ms = (self.client.config.request_timeout_ms
                                    + self.config.fetch_max_wait_ms)
        threads = self.config.decode_threads
        self._decoder = (ThreadPoolExecutor(threads, thread_name_prefix="kafka_ds-decode")
                         if threads else None)
        # Responses a broker may have queued or decoding when its next request goes out.
        self._max_buffered = max(1, threads)
        self._responses = 0
        self._receive_ahead = ReceiveAhead(self.client, self.clock, self._request_timeout_ms)
        self._ended = False  # a later read took the sessions over: this one must not resume

    # --- the driver ------------------------------------------------------------------------

    def run(self, ranges: list[Any]) -> Iterator[tuple[TopicPartition, RecordColumns | None]]:
        now_ms = self.clock.monotonic_ms()
        for topic, partition, start, end in ranges:
            tp = TopicPartition(topic, partition)
            self._parts[tp] = PartitionRead(tp, start, end, start, now_ms, done=start >= end)
        queue = self._queue
        idle = False
        try:
            while True:
                if self._ended:
                    raise KafkaDsError("this read was abandoned and a later read on the same "
                                       "Fetcher took over its fetch sessions: read to the end "
                                       "(or close) one read before starting the next")
                self._dispatch()
                if queue and self._take_head(queue[0]):
                    chunk = queue.popleft()
                    columns = self._result(chunk)
                    if columns is not None and len(columns):
                        assert chunk.part is not None
                        suspended_ms = self.clock.monotonic_ms()
                        yield chunk.part.tp, columns
                        self._resumed(suspended_ms)
                    continue
                if not queue and self._finished():
                    break
                if idle and not queue:  # caught up with the log: hand out what is pending
                    suspended_ms = self.clock.monotonic_ms()
                    yield _NO_TP, None
                    self._resumed(suspended_ms)
                idle = not self._collect(queue[0].decoding if queue else None)
        finally:
            for chunk in queue:
                if chunk.decoding is not None:
                    chunk.decoding.cancel()
            queue.clear()
            if self._decoder is not None:
                self._decoder.shutdown(wait=True, cancel_futures=True)
            self._receive_ahead.close()
            self.end()

    def _take_head(self, head: Chunk) -> bool:
        """Hand the head chunk out now, or first take in more responses while it decodes?"""
        if head.decoding is None or head.decoding.done():
            return True
        # Decoding in a thread: meanwhile receive the next response, if one may be buffered.
        return not any(node.in_flight is not None and not node.in_flight[1].is_close
                       for node in self._nodes.values())

    def _result(self, chunk: Chunk) -> RecordColumns | None:
        """The chunk's decoded columns (waiting for its thread), or raise its error."""
        if chunk.error is not None:
            raise chunk.error
        node = self._nodes.get(chunk.node_id)
        if node is not None:
            left = node.buffered.get(chunk.response_id, 0) - 1
            if left > 0:
                node.buffered[chunk.response_id] = left
            else:
                node.buffered.pop(chunk.response_id, None)
        if chunk.decoding is not None:  # scanned (decompressed) by a thread: finish here
            scanned, scan_ns = chunk.decoding.result()
            columns, elapsed_ns = finish_chunk(chunk, scanned, self.config)
            elapsed_ns += scan_ns
        elif (self.config.receive_ahead and chunk.records is not None
              and worth_receiving_ahead(chunk.records)):
            in_flight = [node.in_flight[0] for node in self._nodes.values()
                         if node.in_flight is not None]
            with self._receive_ahead.during(in_flight) as receiving:
                columns, elapsed_ns = decode_chunk(chunk, self.config, self.include_headers)
            self.metrics.received_ahead += receiving
        else:
            columns, elapsed_ns = decode_chunk(chunk, self.config, self.include_headers)
        # The decoded columns are copies: let the response buffer go before the caller gets
        # them, so it is not held while the caller works.
        chunk.records = chunk.decoding = None
        self.metrics.records += len(columns)
        self.metrics.decode_ns += elapsed_ns
        return columns

    def _resumed(self, suspended_ms: int) -> None:
        """Time the caller spent with a yielded batch is not time without progress."""
        paused_ms = self.clock.monotonic_ms() - suspended_ms
        if paused_ms > 0:
            for part in self._parts.values():
                part.last_progress_ms += paused_ms

    def _finished(self) -> bool:
        return all(p.done for p in self._parts.values()) and not any(
            node.in_flight is not None and not node.in_flight[1].is_close
            for node in self._nodes.values())

    # --- sending ---------------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Send the next Fetch to every broker that has partitions to read and none in flight."""
        now_ms = self.clock.monotonic_ms()
        wanted: dict[int, dict[TopicPartition, PartitionFetch]] = {}
        max_bytes = self.config.max_partition_fetch_bytes
        for part in self._parts.values():
            if part.done or part.retry_at_ms > now_ms:
                continue
            if now_ms - part.last_progress_ms > self.config.fetch_timeout_ms:
                if self._ends_below(part):
                    continue  # data loss: failed or skipped, as fail.on.data.loss says
                raise stalled_error(part, self.config)
            if part.preferred_node >= 0 and now_ms >= part.preferred_until_ms:
                part.node_id = -1  # the preferred replica's lease ran out: ask the leader
            if part.node_id < 0 and not self._locate(part, now_ms):
                continue
            wanted.setdefault(part.node_id, {})[part.tp] = PartitionFetch(
                part.position, max_bytes, part.topic_id, part.leader_epoch)
        # A broker with nothing left to read gets its session closed, unless sessions are kept
        # for the next read: then it is simply not asked (the next read forgets what it holds).
        idle_sessions = () if self.keep_sessions else [
            n for n, node in self._nodes.items() if node.session.is_open]
        for node_id in set(wanted).union(idle_sessions):
            node = self._nodes.get(node_id)
            if node is None:
                session = self.sessions.get(node_id)
                if session is None:
                    session = self.sessions[node_id] = FetchSession(
                        node_id, sessionless=not self.use_sessions)
                node = self._nodes[node_id] = BrokerFetch(node_id, session)
            if (node.in_flight is not None or node.retry_at_ms > now_ms
                    or len(node.buffered) > self._max_buffered):
                continue
            partitions = wanted.get(node_id)
            if partitions:
                self._send(node, partitions)
            else:  # nothing left to read there: close its session rather than leave it open
                self._send_close(node)

    def _send(self, node: BrokerFetch, partitions: dict[TopicPartition, PartitionFetch]) -> None:
        # Never wait for a connect here: a broker that is down or stalled must not hold up
        # the fetches to the others. ``_collect`` polls the connect along with them.
        try:
            failure = self.client.connect_failure(node.node_id)
            if failure is not None:
                raise failure
            if not self.client.ready(node.node_id):
                return
            version = self.client.connection(node.node_id).version_for(ApiKey.FETCH)
        except KafkaDsError as exc:
            if not isinstance(exc, NetworkError | KafkaTimeoutError):
                raise
            self._node_failed(node, list(partitions), exc)
            return
        if version >= TOPIC_ID_VERSION and any(s.topic_id == ZERO_UUID
                                               for s in partitions.values()):
            version = TOPIC_ID_VERSION - 1  # metadata without topic ids: name topics instead
        if version < 7:
            raise KafkaDsError(f"broker {node.node_id} speaks Fetch v{version} only; kafka_ds "
                               "needs v7+ (Kafka 1.1+) for fetch sessions")
        config = self.config
        pending = node.session.build(
            partitions, version=version, max_wait_ms=config.fetch_max_wait_ms,
            min_bytes=config.fetch_min_bytes, max_bytes=config.fetch_max_bytes,
            isolation_level=config.isolation_level, rack_id=config.client_rack)
        future = self.client.send(node.node_id, pending.request, version,
                                  timeout_ms=self._request_timeout_ms)
        node.in_flight = (future, pending)
        self.sent_requests.append(SentFetch(node.node_id, version, pending.is_full,
                                            pending.request))
        metrics = self.metrics
        metrics.fetch_requests += 1
        if pending.is_full:
            metrics.full_requests += 1
        else:
            metrics.incremental_requests += 1
        metrics.per_node_requests[node.node_id] = metrics.per_node_requests.get(node.node_id, 0) + 1

    def _send_close(self, node: BrokerFetch) -> None:
        if not self.client.is_connected(node.node_id):
            node.session.reset(close_existing=False)  # nothing to tell: the broker expires it
            return
        version = self.client.connection(node.node_id).version_for(ApiKey.FETCH)
        pending = node.session.close_request(version=version,
                                             isolation_level=self.config.isolation_level)
        if pending is not None:
            future = self.client.send(node.node_id, pending.request, version)
            node.in_flight = (future, pending)
            self.sent_requests.append(SentFetch(node.node_id, version, True, pending.request))

    def end(self) -> None:
        """The read is over (done, failed or abandoned): close or keep its sessions."""
        self._ended = True
        if self.keep_sessions:
            self.release_sessions()
        else:
            self.close_sessions()

    def release_sessions(self) -> None:
        """Leave the sessions open for the next read, sending nothing.

        A session with a request still in flight (the read was abandoned) starts over: the
        broker may or may not apply that request, so its epoch is unknown; the next request is
        full and retires the session (``FetchSession.reset``). The stale answer, when it comes,
        completes a future nobody waits for.
        """
        for node in self._nodes.values():
            if node.in_flight is not None:
                if not node.in_flight[1].is_close:
                    node.session.reset(close_existing=True)
                node.in_flight = None

    def close_sessions(self, timeout_ms: int = 2_000) -> None:
        """Close every open session (epoch -1) and wait briefly for the answers."""
        for node_id, session in self.sessions.items():  # kept from earlier reads
            if node_id not in self._nodes:
                self._nodes[node_id] = BrokerFetch(node_id, session)
        for node in self._nodes.values():
            if node.in_flight is None and node.session.is_open:
                try:
                    self._send_close(node)
                except KafkaDsError as exc:  # closing is a courtesy: the broker expires it
                    log.debug("closing the fetch session with node %s: %s", node.node_id, exc)
        futures = [node.in_flight[0] for node in self._nodes.values() if node.in_flight]
        if futures:
            with contextlib.suppress(KafkaDsError):
                self.client.poll_until(lambda: all(f.done() for f in futures),
                                       timeout_ms + self.config.fetch_max_wait_ms)
        for node in self._nodes.values():
            if node.in_flight is not None and node.in_flight[1].is_close:
                node.in_flight = None
            elif node.in_flight is not None:  # an abandoned fetch: its session is unusable
                node.in_flight = None
                node.session.reset(close_existing=True)
            # A session whose close was not confirmed may still be open on the broker: the
            # next full request (id, 0) retires it.

    # --- receiving -------------------------------------------------------------------------

    def _collect(self, decoding: Future[Any] | None = None) -> bool:
        """Wait for a response (or a backoff to pass, or ``decoding`` to finish) and take in
        every response that is done.

        Returns True when new data was queued.
        """
        futures = [node.in_flight[0] for node in self._nodes.values() if node.in_flight]
        started_ns = time.perf_counter_ns()
        if decoding is not None:
            # A decode thread finishing must interrupt a select() waiting for the network.
            decoding.add_done_callback(lambda _: self.client.wakeup())
        connects = self.client.connect_events
        if futures or self.client.connecting_count():
            # A connect that ends (either way) is news too: a fetch can go out, or fail over.
            self.client.poll_until(
                lambda: any(f.done() for f in futures) or (
                    decoding is not None and decoding.done())
                or self.client.connect_events != connects, _POLL_SLICE_MS)
        else:
            now_ms = self.clock.monotonic_ms()
            waits = [p.retry_at_ms - now_ms for p in self._parts.values() if not p.done]
            waits += [n.retry_at_ms - now_ms for n in self._nodes.values()]
            self.clock.sleep_ms(max(1, min([_POLL_SLICE_MS, *[w for w in waits if w > 0]])))
        self.metrics.fetch_wait_ns += time.perf_counter_ns() - started_ns
        queued = len(self._queue)
        for node in list(self._nodes.values()):
            if node.in_flight is not None and node.in_flight[0].done():
                future, pending = node.in_flight
                node.in_flight = None
                self._responses += 1
                before = len(self._queue)
                self._on_done(node, future, pending)
                new_chunks = [c for c in itertools.islice(self._queue, before, None)
                              if c.error is None]
                if new_chunks:
                    node.buffered[self._responses] = len(new_chunks)
                budget = DecompressionBudget(  # one for all partitions of this response
                    self.config.max_decompressed_response_bytes,
                    name="fetch.max.decompressed.response.bytes",
                    lock=threading.Lock() if self._decoder is not None else None)
                for chunk in new_chunks:
                    chunk.node_id, chunk.response_id = node.node_id, self._responses
                    chunk.budget = budget
                    if self._decoder is not None and worth_scanning_ahead(chunk.records):
                        chunk.decoding = self._decoder.submit(scan_chunk, chunk, self.config,
                                                             self.include_headers,
                                                             walk_records=False)
        return len(self._queue) > queued

    def _on_done(self, node: BrokerFetch, future: RequestFuture[Any],
                 pending: PendingFetch) -> None:
        if pending.is_close:
            return
        now_ms = self.clock.monotonic_ms()
        if future.failed():
            error = future.error
            node.session.on_failure(pending)
            if isinstance(error, DecodeError):
                raise undecodable_response(node.node_id, pending, error) from error
            if not isinstance(error, NetworkError | KafkaTimeoutError):
                raise error  # type: ignore[misc]
            self._node_failed(node, list(pending.next_partitions), error)
            return
        response: FetchResponse = future.result()
        outcome = node.session.on_response(pending, response)
        if response.throttle_time_ms > 0:  # KIP-219: the broker asks us to slow down
            node.retry_at_ms = now_ms + response.throttle_time_ms
        if not outcome.ok and outcome.throttled:
            return  # KIP-219: an empty full response asking us to wait; not a reset
        if not outcome.ok:
            self.metrics.session_resets += 1
            code = outcome.error_code
            why = outcome.problem or BrokerError(code).name
            log.info("fetch session with node %s reset: %s", node.node_id, why)
            if code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR:
                self.cluster.invalidate()
            if code and code not in _SESSION_ERRORS:
                error = BrokerError(code, f"Fetch from node {node.node_id}")
                if not error.retriable:
                    raise error
                self._node_failed(node, list(pending.next_partitions), error)
            return
        for tp, data in outcome.partitions:
            part = self._parts.get(tp)
            state = pending.next_partitions.get(tp)
            if (part is None or part.done or part.node_id != node.node_id or state is None
                    or state.fetch_offset != part.position):
                continue  # finished, moved or repositioned while this was in flight
            self._on_partition(part, data, now_ms)

    def _on_partition(self, part: PartitionRead, data: PartitionData, now_ms: int) -> None:
        code = data.error_code
        if code == ErrorCode.NONE:
            part.id_confirmed = True
            part.high_watermark = data.high_watermark
            part.last_stable_offset = data.last_stable_offset
            part.log_start_offset = data.log_start_offset
            if data.preferred_read_replica >= 0 and data.preferred_read_replica != part.node_id:
                read_replica.prefer(part, data.preferred_read_replica, now_ms,
                                    self.cluster.metadata_max_age_ms)
                return
            records = data.records
            if records is None or not len(records):
                return
            next_offset, first_offset = scan_batches(records)
            if next_offset is None:
                return  # only a cut-off batch: fetch again from the same position
            self.metrics.bytes += len(records)
            per_node = self.metrics.per_node_bytes
            per_node[part.node_id] = per_node.get(part.node_id, 0) + len(records)
            fetch_offset = part.position
            assert first_offset is not None
            gap = log_gaps.deleted_before_read(part, first_offset, data.log_start_offset)
            if gap is not None and not self._data_loss(part, *gap):
                return
            aborted = None
            if data.aborted_transactions:
                aborted = [(a.producer_id, a.first_offset) for a in data.aborted_transactions]
            self._queue.append(Chunk(part, records, fetch_offset, aborted))
            self._advance(part, max(next_offset, fetch_offset), now_ms)
            # Last in the next request (as the Java consumer does): a sessionless (full)
            # request is served in order, so a partition with large batches at its head
            # would otherwise take every response's fetch.max.bytes from those after it.
            self._parts[part.tp] = self._parts.pop(part.tp)
            return
        if code == ErrorCode.OFFSET_OUT_OF_RANGE and part.preferred_node == part.node_id >= 0:
            # A follower that has not caught up with the offset yet: read from the leader
            # rather than judge data loss by a replica's log (Java's FetchCollector does so).
            read_replica.fall_back_to_leader(part, self.metrics, "OFFSET_OUT_OF_RANGE")
            return
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            self._out_of_range(part)
            return
        if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            self._fail(part, TopicAuthorizationError(
                part.tp.topic, self.cluster.principal,
                f"fetching {part.tp} at offset {part.position}"))
            return
        error = BrokerError(code, f"fetching {part.tp} at offset {part.position}")
        if not error.retriable:
            raise error
        self._retry_later(part, error, now_ms)

    def _advance(self, part: PartitionRead, position: int, now_ms: int) -> None:
        if position > part.position:
            part.position = position
            part.last_progress_ms = now_ms
        if part.position >= part.end:
            part.done = True

    # --- errors ----------------------------------------------------------------------------

    def _retry_later(self, part: PartitionRead, error: KafkaDsError, now_ms: int) -> None:
        """Find the leader again after ``retry.backoff.ms``, continuing from the same position.

        A preferred read replica is dropped (KIP-392): after any error, or when the replica
        cannot be reached, the leader is asked again, and it names the replica to read from
        only while that one is alive and in sync, as in the Java consumer."""
        self.metrics.retries += 1
        if part.preferred_node >= 0:
            self.metrics.preferred_replica_fallbacks += 1
        part.last_error = str(error)
        part.topic_unknown = isinstance(error, UnknownTopicError)
        part.node_id = -1
        part.preferred_node = -1
        part.retry_at_ms = now_ms + self.cluster.retry_backoff_ms
        if not isinstance(error, BrokerError) or error.invalid_metadata or error.code in (
                ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
                ErrorCode.OFFSET_NOT_AVAILABLE):
            self.cluster.invalidate()

    def _node_failed(self, node: BrokerFetch, tps: list[TopicPartition],
                     error: KafkaDsError) -> None:
        log.info("fetching from node %s failed (%s); finding leaders again", node.node_id, error)
        now_ms = self.clock.monotonic_ms()
        node.retry_at_ms = now_ms + self.cluster.retry_backoff_ms
        for part in self._parts.values():
            if not part.done and (part.tp in tps or part.node_id == node.node_id):
                self._retry_later(part, error, now_ms)

    def _locate(self, part: PartitionRead, now_ms: int, *, looked_again: bool = False) -> bool:
        """Set the partition's node, leader epoch and topic id from metadata; False to wait.

        A partition the cached metadata lacks (it predates the partition: a connection kept
        between reads, or a long read while partitions were added) is looked up again at
        once; if fresh metadata lacks it too (a broker that has not heard of it yet), it is
        retried like UNKNOWN_TOPIC_OR_PARTITION, within ``fetch.timeout.ms``.
        """
        remaining_ms = self.config.fetch_timeout_ms - (now_ms - part.last_progress_ms)
        timeout_ms = max(1, min(self.client.config.request_timeout_ms, remaining_ms))
        try:
            info = self.cluster.topic(part.tp.topic, timeout_ms=timeout_ms)
        except TopicAuthorizationError as exc:
            self._fail(part, exc)
            return False
        except UnknownTopicError as exc:
            if part.seen_topic and self.cluster.known_by_any_broker(
                    part.tp.topic, timeout_ms) is False:
                # Seen in this read, and now no broker knows it: deleted. (A broker that
                # lags may not know a new topic yet, but none forgets an existing one.)
                self._data_loss(part, TopicDeletedError(part.tp.topic, part.tp.partition,
                                                        part.position), part.end)
            else:  # not (yet) known: retried within fetch.timeout.ms
                self._retry_later(part, exc, self.clock.monotonic_ms())
            return False
        except (NetworkError, KafkaTimeoutError) as exc:
            self._retry_later(part, exc, self.clock.monotonic_ms())
            return False
        if part.topic_id != ZERO_UUID and info.topic_id != part.topic_id and \
                not part.id_confirmed and part.position == part.start:
            # The id came from metadata cached before this read (a connection kept between
            # reads) and no broker has accepted it: the topic was recreated before the range
            # was planned. Read the topic that has the name now, as the JVM connector would
            # (it reads by name); the range's offsets are checked against it as any others.
            log.info("%s: topic %s was recreated (id %s, cached %s); reading the new one",
                     part.tp, part.tp.topic, info.topic_id, part.topic_id)
        elif part.topic_id != ZERO_UUID and info.topic_id != part.topic_id:
            self._data_loss(part, TopicDeletedError(
                part.tp.topic, part.tp.partition, part.position,
                reason="the topic was deleted and recreated"), part.end)
            return False
        partition = info.partitions.get(part.tp.partition)
        if partition is None:
            if not looked_again:
                self.cluster.invalidate()
                return self._locate(part, now_ms, looked_again=True)
            self._retry_later(part, BrokerError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"{part.tp.topic} has no partition {part.tp.partition} (it has "
                f"{info.partition_count})"), now_ms)
            return False
        if partition.leader_id < 0:
            self._retry_later(part, KafkaDsError(f"{part.tp} has no leader"), now_ms)
            return False
        part.topic_id = info.topic_id
        part.seen_topic = True
        part.topic_unknown = False
        part.leader_epoch = partition.leader_epoch
        part.node_id = read_replica.select(part, partition.leader_id, now_ms, self.cluster,
                                           self.metrics)
        return True

    def _ends_below(self, part: PartitionRead) -> bool:
        """A stalled partition whose log ends below the range: data loss (``log_gaps``),
        rather than a timeout that every retry of the read would repeat."""
        if part.high_watermark < 0 or part.position < part.high_watermark:
            return False  # records exist past the position: a real stall
        try:
            _, log_end = self._log_bounds(part, with_start=False)
        except (NetworkError, KafkaTimeoutError, BrokerError):
            return False
        gap = log_gaps.ended_below(part, log_end)
        if gap is None:
            return False
        self._data_loss(part, *gap)
        return True

    def _out_of_range(self, part: PartitionRead) -> None:
        """OFFSET_OUT_OF_RANGE: data loss if the log no longer spans the position, else retry."""
        try:
            gap = log_gaps.outside_log(part, *self._log_bounds(part, with_start=True))
        except (NetworkError, KafkaTimeoutError, BrokerError) as exc:
            self._retry_later(part, exc, self.clock.monotonic_ms())
            return
        if gap is not None:
            self._data_loss(part, *gap)
        else:  # the offset exists: a leader change raced us
            self._retry_later(part, BrokerError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                                f"fetching {part.tp} at {part.position}"),
                              self.clock.monotonic_ms())

    def _log_bounds(self, part: PartitionRead, *, with_start: bool) -> tuple[int, int]:
        lookup_ms = min(self.client.config.request_timeout_ms, self.config.fetch_timeout_ms)
        return log_gaps.log_bounds(self.cluster, part.tp, lookup_ms, with_start=with_start)

    def _data_loss(self, part: PartitionRead, loss: DataLossError, resume_at: int) -> bool:
        """Fail (queue the error behind the data before it) or skip to ``resume_at``.

        Returns True when reading goes on (skip), False when the partition stops here.
        """
        self.metrics.data_loss_incidents += 1
        if self.config.fail_on_data_loss:
            self._fail(part, loss.with_hint("Set fail.on.data.loss=false (Spark: "
                                            "failOnDataLoss=false) to skip the missing offsets "
                                            "instead"))
            return False
        target = max(min(resume_at, part.end), part.position)
        log.warning("%s; skipping %d offsets to %d because fail.on.data.loss=false", loss,
                    target - part.position, target)
        self.metrics.offsets_skipped += target - part.position
        part.position = target
        part.last_progress_ms = self.clock.monotonic_ms()
        if part.position >= part.end:
            part.done = True
            return False
        return True

    def _fail(self, part: PartitionRead, error: KafkaDsError) -> None:
        """The partition stops here: ``error`` is raised once the data before it is out."""
        part.done = True
        self._queue.append(Chunk(None, None, part.position, None, error))


