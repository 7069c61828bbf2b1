"""Offset lookups: earliest, latest, last stable, and by timestamp (ListOffsets).

Layer: client.

The Spark source plans every micro-batch from these: ``latest`` under read_committed is the
last stable offset (LSO), so a batch never plans past an open transaction, exactly as the JVM
connector does by passing its isolation level to the admin lookup.

Requests go to each partition's leader, one request per leader, all in flight at once.
Partitions whose answer is a retriable error (leader moved, election under way:
OFFSET_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER ...) are asked again after a metadata refresh
until ``timeout_ms``; other errors are raised with the partition named.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from kafka_ds.client.cluster import Cluster
from kafka_ds.net.future import RequestFuture
from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.errors import BrokerError, KafkaDsError, KafkaTimeoutError, NetworkError
from kafka_ds.protocol.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)
from kafka_ds.protocol.types import IsolationLevel, TopicPartition

# ListOffsets timestamp sentinels.
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3  # the offset of the record with the largest timestamp (v7+, KIP-734)


class OffsetAndTimestamp(NamedTuple):
    """Answer for one partition; ``offset`` -1 means no record at or after the timestamp."""

    offset: int
    timestamp_ms: int
    leader_epoch: int


def list_offsets(cluster: Cluster, targets: Mapping[TopicPartition, int], *,
                 isolation_level: int = IsolationLevel.READ_UNCOMMITTED,
                 timeout_ms: int | None = None) -> dict[TopicPartition, OffsetAndTimestamp]:
    """Look up offsets: ``targets`` maps each partition to a timestamp in ms or a sentinel."""
    clock = cluster.client.clock
    timeout = cluster.client.config.request_timeout_ms if timeout_ms is None else timeout_ms
    deadline_ms = clock.monotonic_ms() + timeout
    pending = dict(targets)
    results: dict[TopicPartition, OffsetAndTimestamp] = {}
    last_error: KafkaDsError | None = None
    while pending:
        retry, last_error = _attempt(cluster, pending, isolation_level, results, deadline_ms)
        pending = retry
        if not pending:
            break
        if clock.monotonic_ms() >= deadline_ms:
            names = ", ".join(str(tp) for tp in sorted(pending))
            raise KafkaTimeoutError(f"offset lookup for {names} did not complete in {timeout} ms"
                                    + (f"; last error: {last_error}" if last_error else ""))
        cluster.invalidate()
        clock.sleep_ms(cluster.retry_backoff_ms)
    return results


def _attempt(cluster: Cluster, pending: Mapping[TopicPartition, int], isolation_level: int,
             results: dict[TopicPartition, OffsetAndTimestamp],
             deadline_ms: int) -> tuple[dict[TopicPartition, int], KafkaDsError | None]:
    """One round: send per leader, collect answers; returns what must be retried."""
    by_leader: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
    retry: dict[TopicPartition, int] = {}
    last_error: KafkaDsError | None = None
    for tp, timestamp in pending.items():
        leader = cluster.leader_for(tp.topic, tp.partition)
        if leader < 0:
            retry[tp] = timestamp
        else:
            by_leader[leader][tp] = timestamp
    client = cluster.client
    in_flight: list[tuple[RequestFuture[Any], dict[TopicPartition, int]]] = []
    for leader, wanted in by_leader.items():
        topics: dict[str, list[ListOffsetsPartition]] = defaultdict(list)
        for tp, timestamp in wanted.items():
            topics[tp.topic].append(ListOffsetsPartition(
                partition_index=tp.partition, timestamp=timestamp,
                current_leader_epoch=cluster.leader_epoch(tp.topic, tp.partition)))
        request = ListOffsetsRequest(
            replica_id=-1, isolation_level=isolation_level,
            topics=[ListOffsetsTopic(name=name, partitions=parts)
                    for name, parts in topics.items()])
        version = _version(cluster, leader, wanted, isolation_level)
        in_flight.append((client.send(leader, request, version), wanted))
    client.poll_until(lambda: all(future.done() for future, _ in in_flight),
                      max(0, deadline_ms - client.clock.monotonic_ms()))
    for future, wanted in in_flight:
        if not future.done() or future.failed():
            error = future.error if future.done() else None
            if error is not None and not isinstance(error, NetworkError | KafkaTimeoutError):
                raise error
            last_error = error if isinstance(error, KafkaDsError) else last_error
            retry.update(wanted)
            continue
        response: ListOffsetsResponse = future.result()
        for topic in response.topics:
            for part in topic.partitions:
                tp = TopicPartition(topic.name, part.partition_index)
                if tp not in wanted:
                    continue
                if part.error_code:
                    error = BrokerError(part.error_code, f"listing offsets of {tp}")
                    if not error.retriable:
                        raise error
                    last_error = error
                    retry[tp] = wanted[tp]
                else:
                    results[tp] = OffsetAndTimestamp(part.offset, part.timestamp,
                                                     part.leader_epoch)
        for tp in wanted:
            if tp not in results and tp not in retry:
                retry[tp] = wanted[tp]  # the broker left it out: ask again
    return retry, last_error


def _version(cluster: Cluster, leader: int, wanted: Mapping[TopicPartition, int],
             isolation_level: int) -> int:
    version = cluster.client.connection(leader).version_for(ApiKey.LIST_OFFSETS)
    if isolation_level and version < 2:
        raise KafkaDsError("the broker is too old for read_committed offset lookups "
                           "(ListOffsets v2+, Kafka 0.11+)")
    if any(timestamp == MAX_TIMESTAMP for timestamp in wanted.values()) and version < 7:
        raise KafkaDsError("looking up the max-timestamp offset needs ListOffsets v7 (Kafka 3.0+)")
    return version


def earliest_offsets(cluster: Cluster, partitions: Iterable[TopicPartition], *,
                     timeout_ms: int | None = None) -> dict[TopicPartition, int]:
    """The log start offset of each partition."""
    answers = list_offsets(cluster, dict.fromkeys(partitions, EARLIEST), timeout_ms=timeout_ms)
    return {tp: answer.offset for tp, answer in answers.items()}


def latest_offsets(cluster: Cluster, partitions: Iterable[TopicPartition], *,
                   isolation_level: int = IsolationLevel.READ_UNCOMMITTED,
                   timeout_ms: int | None = None) -> dict[TopicPartition, int]:
    """The high watermark, or under read_committed the last stable offset."""
    answers = list_offsets(cluster, dict.fromkeys(partitions, LATEST),
                           isolation_level=isolation_level, timeout_ms=timeout_ms)
    return {tp: answer.offset for tp, answer in answers.items()}


def offsets_for_times(cluster: Cluster, timestamps_ms: Mapping[TopicPartition, int], *,
                      isolation_level: int = IsolationLevel.READ_UNCOMMITTED,
                      timeout_ms: int | None = None) -> dict[TopicPartition, int | None]:
    """The first offset whose timestamp is >= the given one, or None when there is none."""
    for tp, timestamp in timestamps_ms.items():
        if timestamp < 0:
            raise ValueError(f"timestamp for {tp} must be >= 0 ms, got {timestamp}")
    answers = list_offsets(cluster, timestamps_ms, isolation_level=isolation_level,
                           timeout_ms=timeout_ms)
    return {tp: (answer.offset if answer.offset >= 0 else None) for tp, answer in answers.items()}


def partitions_of(cluster: Cluster, topics: Iterable[str]) -> list[TopicPartition]:
    """Every partition of ``topics`` (raises ``UnknownTopicError`` for a missing topic)."""
    return [TopicPartition(topic, partition) for topic in topics
            for partition in cluster.partitions_for(topic)]
