"""How many bytes an offset takes in a partition, from a small sessionless Fetch.

Layer: client.

A byte-based rate limit (the Spark source's ``maxBytesPerTrigger``) must turn bytes into
offsets before anything is read. ``bytes_per_offset`` asks each partition's leader for a
little data at a given offset (``sample_bytes`` per partition, ``max_wait_ms`` 0, no fetch
session: session id 0, epoch -1), walks the record batches' headers without decoding them, and
divides the bytes of the complete batches by the offsets they span. The figure is bytes as
stored (compressed batches, headers included), the same bytes a fetch moves.

Partitions that return no complete batch (nothing there yet, or an error) are left out; the
caller falls back to a default for them.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from kafka_ds.client.cluster import Cluster
from kafka_ds.net.future import RequestFuture
from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.errors import KafkaDsError
from kafka_ds.protocol.fetch_session import FINAL_EPOCH, INVALID_SESSION_ID, TOPIC_ID_VERSION
from kafka_ds.protocol.messages.fetch import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
)
from kafka_ds.protocol.types import TopicPartition

_FRAME = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23
_V2_HEADER_BYTES = 61


def _span(records: Any, fetch_offset: int) -> tuple[int, int]:
    """(bytes, offsets) of the complete batches in ``records`` at or after ``fetch_offset``."""
    size = len(records)
    pos = 0
    total_bytes = 0
    first: int | None = None
    next_offset: int | None = None
    while size - pos > 16:
        base_offset, length = _FRAME.unpack_from(records, pos)
        end = pos + 12 + length
        if end > size or length < 5:
            break
        if records[pos + 16] >= 2 and length + 12 >= _V2_HEADER_BYTES:
            last = base_offset + _LAST_OFFSET_DELTA.unpack_from(records, pos +
                                                                 _LAST_OFFSET_DELTA_AT)[0]
        else:
            last = base_offset
        if last >= fetch_offset:
            first = base_offset if first is None else first
            total_bytes += end - pos
            next_offset = last + 1
        pos = end
    if first is None or next_offset is None:
        return 0, 0
    return total_bytes, next_offset - max(first, 0)


def bytes_per_offset(cluster: Cluster, positions: Mapping[TopicPartition, int],
                     isolation_level: int = 0, *, sample_bytes: int = 256 * 1024,
                     timeout_ms: int | None = None) -> dict[TopicPartition, float]:
    """Average stored bytes per offset of each partition, sampled at ``positions``."""
    if not positions:
        return {}
    client = cluster.client
    by_leader: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
    for tp, offset in positions.items():
        try:
            by_leader[cluster.leader_for(tp.topic, tp.partition)][tp] = offset
        except KafkaDsError:
            continue  # gone or leaderless: no estimate
    futures: list[tuple[RequestFuture[Any], dict[TopicPartition, int]]] = []
    for leader, wanted in by_leader.items():
        if leader < 0:
            continue
        version = min(client.connection(leader).version_for(ApiKey.FETCH), TOPIC_ID_VERSION - 1)
        topics: dict[str, FetchTopic] = {}
        for tp, offset in wanted.items():
            fetch_topic = topics.setdefault(tp.topic, FetchTopic(topic=tp.topic))
            fetch_topic.partitions.append(FetchPartition(
                partition=tp.partition, fetch_offset=offset, partition_max_bytes=sample_bytes))
        request = FetchRequest(max_wait_ms=0, min_bytes=0,
                               max_bytes=sample_bytes * max(1, len(wanted)),
                               isolation_level=isolation_level, session_id=INVALID_SESSION_ID,
                               session_epoch=FINAL_EPOCH, topics=list(topics.values()),
                               forgotten_topics_data=[])
        futures.append((client.send(leader, request, version, timeout_ms=timeout_ms), wanted))
    client.poll_until(lambda: all(f.done() for f, _ in futures), timeout_ms)
    estimates: dict[TopicPartition, float] = {}
    for future, wanted in futures:
        if not future.done() or future.failed():
            continue
        response: FetchResponse = future.result()
        for answer in response.responses:
            for data in answer.partitions:
                tp = TopicPartition(answer.topic, data.partition_index)
                if data.error_code or tp not in wanted or data.records is None:
                    continue
                size, offsets = _span(data.records, wanted[tp])
                if offsets > 0:
                    estimates[tp] = size / offsets
    return estimates
