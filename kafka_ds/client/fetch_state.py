"""The fetch engine's bookkeeping: per-partition and per-broker state, queued chunks, and the
batch-header walk that moves positions before decoding.

Layer: client. Plain data used by ``fetch_loop``; no I/O.
"""

from __future__ import annotations

import struct
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kafka_ds.net.future import RequestFuture
from kafka_ds.protocol.decompression_budget import DecompressionBudget
from kafka_ds.protocol.errors import KafkaDsError
from kafka_ds.protocol.fetch_session import ZERO_UUID, FetchSession, PendingFetch
from kafka_ds.protocol.messages.fetch import FetchRequest
from kafka_ds.protocol.record_columns import RecordColumns, ScannedBuffer
from kafka_ds.protocol.types import TopicPartition

_FRAME = struct.Struct(">qi")  # baseOffset, batchLength: the start of every batch format
_INT32 = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23  # in a v2 batch header
_MIN_V2_BATCH_LENGTH = 49


def scan_batches(buf: Any) -> tuple[int | None, int | None]:
    """``(next offset, first batch's base offset)`` from the complete batches' headers only.

    Cheap (one ``unpack_from`` per batch, no CRC, no decompression): positions advance with this
    before decoding, so the next Fetch can go out first. A cut-off last batch is not counted
    (it is fetched again); a malformed one stops the walk and is reported by the decoder.
    """
    size = len(buf)
    pos = 0
    first: int | None = None
    next_offset: int | None = None
    while size - pos > 16:
        base_offset, length = _FRAME.unpack_from(buf, pos)
        end = pos + 12 + length
        if end > size or length < 5:
            break
        if buf[pos + 16] >= 2:
            if length < _MIN_V2_BATCH_LENGTH:
                break
            last = base_offset + _INT32.unpack_from(buf, pos + _LAST_OFFSET_DELTA_AT)[0]
        else:  # magic 0/1: a (wrapper) message's offset is its last inner offset
            last = base_offset
        if first is None:
            first = base_offset
        next_offset = last + 1
        pos = end
    return next_offset, first


class SentFetch(NamedTuple):
    """A Fetch request as it went out (recorded for tests and debugging)."""

    node_id: int
    version: int
    is_full: bool
    request: FetchRequest


@dataclass(eq=False)
class PartitionRead:
    """One range being read: where it is, who leads it, what the broker last said about it."""

    tp: TopicPartition
    start: int
    end: int
    position: int
    last_progress_ms: int  # when ``position`` last moved (``fetch.timeout.ms`` counts from it)
    node_id: int = -1  # -1: find the leader (again)
    preferred_node: int = -1  # KIP-392: a replica the leader told us to read from ...
    preferred_until_ms: int = 0  # ... until then (metadata.max.age.ms), as in Java
    leader_epoch: int = -1
    topic_id: uuid.UUID = ZERO_UUID
    retry_at_ms: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    last_error: str | None = None
    seen_topic: bool = False  # located through metadata at least once in this read
    id_confirmed: bool = False  # a Fetch answered NONE for ``topic_id`` in this read
    topic_unknown: bool = False  # the last lookup found no such topic (retried)
    done: bool = False


@dataclass(eq=False)
class BrokerFetch:
    """One broker: its fetch session and the (at most one) request in flight to it."""

    node_id: int
    session: FetchSession
    in_flight: tuple[RequestFuture[Any], PendingFetch] | None = None
    retry_at_ms: int = 0
    # Responses whose chunks are queued or decoding, by response id -> chunks left.
    buffered: dict[int, int] = field(default_factory=dict)


@dataclass(eq=False)
class Chunk:
    """One partition's bytes from one response, waiting to be decoded (or an error to raise)."""

    part: PartitionRead | None
    records: Any  # memoryview into the response buffer
    fetch_offset: int
    aborted: list[tuple[int, int]] | None
    error: KafkaDsError | None = None
    node_id: int = -1
    response_id: int = -1
    # Set when a decode thread scans it: (scanned chunk or columns, scan time in ns).
    decoding: Future[tuple[ScannedBuffer | RecordColumns, int]] | None = None
    # Decompression allowed for the whole response, shared by its chunks.
    budget: DecompressionBudget | None = None
