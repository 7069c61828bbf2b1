"""Read offset ranges of partitions: Fetch sessions, prefetch, data loss, read_committed, Arrow.

Layer: client (over ``net.NetworkClient`` via ``Cluster``; never pyspark). Specs: KIP-74
(response size limits), KIP-227 (fetch sessions, ``protocol.fetch_session``), KIP-98
(read_committed), KIP-320 (leader epochs), KIP-392 (``client.rack``), KIP-516 (topic ids, Fetch
v13+).

``Fetcher.read_arrow(ranges)`` reads ``[start, end)`` of each ``(topic, partition, start, end)``
and yields ``pyarrow.RecordBatch``es in Spark's Kafka source schema; ``read_records`` yields
``(TopicPartition, Record)`` for code that wants objects. Both end exactly at ``end``. The
engine (``fetch_loop``) works like this::

    +-- per broker: one FetchSession, at most one request in flight ------------------+
    |  dispatch: for every broker without a request in flight, send the next Fetch     |
    |            for its partitions at their current positions (incremental: only     |
    |            what changed; finished or moved partitions are forgotten)            |
    |  collect:  a response arrives -> walk batch headers only -> advance positions    |
    |            -> queue each partition's bytes (not yet decoded)                     |
    |  decode:   dispatch first (the next request goes on the wire), then decode one   |
    |            queued chunk (numpy/Arrow, ``record_columns``) and hand it out       |
    +----------------------------------------------------------------------------------+

Positions advance when a response *arrives* (from the batch headers, before any decoding), so
the request sent while a response is decoded asks for the data after it: nothing is fetched
twice, and decode time overlaps the broker's and the network's. A broker gets its next request
only once its previous response is being decoded, so buffered data is at most one response
being decoded plus one in flight per broker (each bounded by ``fetch.max.bytes`` and
``max.partition.fetch.bytes`` per partition; the broker may exceed them by one batch, KIP-74),
plus small Arrow pieces being joined (below ``arrow.batch.rows`` and ``_MAX_PENDING_BYTES``),
whatever the size of the topic. With ``decode.threads`` N > 1, N responses may be decoding at
once: N + 1 responses per broker.

Offset gaps (compaction, transaction markers, aborted records) are normal: a range ends when
the fetch position reaches ``end``, even if the last offsets hold no visible record.

read_committed and the last stable offset (LSO): the broker answers only below the LSO. The
Spark source plans ``end`` with ListOffsets at the same isolation level, so ``end <= LSO`` and
the LSO never moves back. A range ending above the LSO (planned read_uncommitted, or a new
leader briefly behind) waits for the transaction to end, within ``fetch.timeout.ms``, then
fails naming the LSO. It never stops early at the LSO: the next range would start at ``end``,
so the committed records in ``[LSO, end)`` would be lost without a word.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping

import pyarrow as pa

from kafka_ds.client.cluster import Cluster
from kafka_ds.client.config import ClientConfig
from kafka_ds.client.fetch_config import FETCH_PROPERTIES, FetchConfig, FetchMetrics
from kafka_ds.client.fetch_loop import FetchLoop
from kafka_ds.client.fetch_state import SentFetch
from kafka_ds.client.offset_range import OffsetRange
from kafka_ds.protocol.fetch_session import FetchSession
from kafka_ds.protocol.record_columns import (
    SPARK_SCHEMA,
    SPARK_SCHEMA_WITH_HEADERS,
    RecordColumns,
    to_arrow,
)
from kafka_ds.protocol.records import Record
from kafka_ds.protocol.types import TopicPartition

log = logging.getLogger(__name__)

# Small pieces being joined are handed out once they hold this many bytes, whatever their rows.
_MAX_PENDING_BYTES = 16 * 1024 * 1024
# A decoded piece this large is handed out as it is, never copied into a larger batch.
_MIN_DIRECT_BYTES = 4 * 1024 * 1024

__all__ = ["FETCH_PROPERTIES", "FetchConfig", "FetchMetrics", "Fetcher", "OffsetRange",
           "SentFetch", "read_arrow"]


def _ranges(ranges: Iterable[OffsetRange | tuple[str, int, int, int]]) -> list[OffsetRange]:
    checked: list[OffsetRange] = []
    seen: set[TopicPartition] = set()
    for item in ranges:
        offset_range = OffsetRange(*item)
        topic, partition, start, end = offset_range
        if not isinstance(start, int) or not isinstance(end, int) or start < 0 or end < start:
            raise ValueError(f"offset range of {topic}-{partition} must have 0 <= start <= end, "
                             f"got [{start}, {end}): resolve earliest/latest to offsets first")
        tp = offset_range.topic_partition
        if tp in seen:
            raise ValueError(f"{tp} appears twice in one read: give each partition one range")
        seen.add(tp)
        checked.append(offset_range)
    return checked


class Fetcher:
    """Reads offset ranges from a cluster. Single-threaded; reuse it for many reads, one at a
    time (a read abandoned half-way is ended when the next one starts).

    ``cluster`` is shared unless ``owns_cluster`` (``from_properties`` makes its own). With
    ``keep_sessions`` the fetch session of each broker outlives a read: the next read
    continues it incrementally (no close and no full request per read), as a consumer does
    between polls; ``close`` ends them. Without it each read closes its sessions; with
    ``use_sessions=False`` it opens none (full requests outside any session): for one-off
    reads of a few records, which a session would cost one more round trip, to close it.
    ``config`` may be replaced between reads.
    """

    def __init__(self, cluster: Cluster, config: FetchConfig | None = None, *,
                 owns_cluster: bool = False, keep_sessions: bool = False,
                 use_sessions: bool = True) -> None:
        self.cluster = cluster
        self.config = config or FetchConfig()
        self.metrics = FetchMetrics()
        self._owns_cluster = owns_cluster
        self._keep_sessions = keep_sessions and use_sessions
        self._use_sessions = use_sessions
        self._sessions: dict[int, FetchSession] = {}  # by node id, with keep_sessions
        self._loop: FetchLoop | None = None

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], *,
                        keep_sessions: bool = False) -> Fetcher:
        """A fetcher with its own connections, from Java-style client and fetch properties."""
        client_config = ClientConfig.from_properties(properties)
        fetch_config = FetchConfig.from_properties(properties)
        return cls(Cluster.connect(client_config), fetch_config, owns_cluster=True,
                   keep_sessions=keep_sessions)

    def close(self, session_timeout_ms: int = 2_000) -> None:
        """Close the fetch sessions (waiting at most ``session_timeout_ms`` for the brokers'
        answers: closing is a courtesy, a broker expires them anyway), then the cluster if
        owned."""
        try:
            if self._loop is not None:
                self._loop.end()
                if self._keep_sessions:
                    self._loop.close_sessions(session_timeout_ms)
                self._loop = None
                self._sessions.clear()
        finally:
            if self._owns_cluster:
                self.cluster.close()

    @property
    def open_sessions(self) -> int:
        """Fetch sessions kept open for the next read (``keep_sessions``)."""
        return sum(1 for session in self._sessions.values() if session.is_open)

    def __enter__(self) -> Fetcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def sent_requests(self) -> list[SentFetch]:
        """The last read's Fetch requests, oldest first (at most the last 1000): for tests,
        debugging and the curious (session ids, epochs, which partitions each one carried)."""
        return [] if self._loop is None else list(self._loop.sent_requests)

    # --- reading ---------------------------------------------------------------------------

    def _columns(self, ranges: Iterable[OffsetRange | tuple[str, int, int, int]],
                 include_headers: bool) -> Iterator[tuple[TopicPartition, RecordColumns | None]]:
        if self._loop is not None:
            self._loop.end()  # ends a previous read abandoned half-way; else does nothing
        loop = FetchLoop(self.cluster, self.config, self.metrics, include_headers,
                         sessions=self._sessions if self._keep_sessions else {},
                         keep_sessions=self._keep_sessions, use_sessions=self._use_sessions)
        self._loop = loop
        return loop.run(_ranges(ranges))

    def read_arrow(self, ranges: Iterable[OffsetRange | tuple[str, int, int, int]], *,
                   include_headers: bool | None = None) -> Iterator[pa.RecordBatch]:
        """Arrow batches of Spark's Kafka schema for ``ranges``, in offset order per partition.

        Batches hold at most ``arrow.batch.rows`` rows and may mix partitions. A decoded
        response is handed out as it is (sliced if larger): copying it into a bigger batch
        would cost more than it saves. Only small pieces (under a quarter of
        ``arrow.batch.rows`` and of ``_MIN_DIRECT_BYTES``, as a slow trickle of data gives)
        are joined, up to the row target, until the fetcher must wait for the network. With
        ``include_headers`` (default: the ``include.headers`` option) the ``headers`` column
        is added: null for a record without headers.
        """
        headers = self.config.include_headers if include_headers is None else include_headers
        target_rows = self.config.arrow_batch_rows
        small_rows = max(1, target_rows // 4)
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        pending_bytes = 0
        for tp, columns in self._columns(ranges, headers):
            if columns is None:  # the engine is about to wait for the network: flush
                if pending:
                    yield _concat(pending, headers)
                    pending, pending_rows, pending_bytes = [], 0, 0
                continue
            started_ns = time.perf_counter_ns()
            batch = to_arrow(columns, tp.topic, tp.partition, include_headers=headers)
            self.metrics.decode_ns += time.perf_counter_ns() - started_ns
            for start in range(0, batch.num_rows, target_rows):
                piece = batch.slice(start, target_rows)
                piece_bytes = piece.nbytes
                if piece.num_rows >= small_rows or piece_bytes >= _MIN_DIRECT_BYTES:
                    if pending:
                        yield _concat(pending, headers)
                        pending, pending_rows, pending_bytes = [], 0, 0
                    yield piece
                    continue
                if pending and pending_rows + piece.num_rows > target_rows:
                    yield _concat(pending, headers)
                    pending, pending_rows, pending_bytes = [], 0, 0
                pending.append(piece)
                pending_rows += piece.num_rows
                pending_bytes += piece_bytes
                if pending_rows >= target_rows or pending_bytes >= _MAX_PENDING_BYTES:
                    yield _concat(pending, headers)
                    pending, pending_rows, pending_bytes = [], 0, 0
        if pending:
            yield _concat(pending, headers)

    def read_records(self, ranges: Iterable[OffsetRange | tuple[str, int, int, int]]
                     ) -> Iterator[tuple[TopicPartition, Record]]:
        """``(TopicPartition, Record)`` for every record of ``ranges`` (headers included)."""
        for tp, columns in self._columns(ranges, True):
            if columns is None:
                continue
            offsets = columns.offsets.tolist()
            timestamps = columns.timestamps_ms.tolist()
            types = columns.timestamp_types.tolist()
            keys = columns.keys.to_pylist()
            values = columns.values.to_pylist()
            headers = columns.headers.to_pylist() if columns.headers is not None else None
            for index, offset in enumerate(offsets):
                record_headers = [] if headers is None or headers[index] is None else [
                    (item["key"], item["value"]) for item in headers[index]]
                yield tp, Record(offset, timestamps[index], types[index], keys[index],
                                 values[index], record_headers)


def _concat(batches: list[pa.RecordBatch], include_headers: bool) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    concat = getattr(pa, "concat_batches", None)
    if concat is not None:
        return concat(batches)
    schema = SPARK_SCHEMA_WITH_HEADERS if include_headers else SPARK_SCHEMA
    table = pa.Table.from_batches(batches, schema=schema).combine_chunks()
    return table.to_batches()[0]


def read_arrow(properties: Mapping[str, str],
               ranges: Iterable[OffsetRange | tuple[str, int, int, int]]
               ) -> Iterator[pa.RecordBatch]:
    """One-shot: connect with ``properties``, read ``ranges`` as Arrow, close."""
    with Fetcher.from_properties(properties) as fetcher:
        yield from fetcher.read_arrow(ranges)
