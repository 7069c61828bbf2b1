"""Commit offsets to a consumer group without joining it (OffsetCommit, "simple consumer").

Layer: client.

A reader that tracks its own progress (the Spark source keeps it in its checkpoint) can still
publish that progress to a group, so that ordinary lag tools (``kafka-consumer-groups.sh
--describe``, Burrow, exporters) see it. The commit uses generation -1 and an empty member id,
which the coordinator accepts for a group with no active members; a group that has members
answers UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION, and those errors are raised as they come.

Requests go to the group's coordinator (FindCoordinator, cached by ``Cluster``); a moved or
loading coordinator (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS)
is looked up again and the commit retried within ``timeout_ms``.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafka_ds.client.cluster import Cluster, CoordinatorType
from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.errors import BrokerError, ErrorCode, KafkaTimeoutError
from kafka_ds.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from kafka_ds.protocol.types import TopicPartition

# v10 names topics by id; every version up to 9 names them, which is all a commit needs.
_MAX_VERSION_BY_NAME = 9
_COORDINATOR_MOVED = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)


def commit_offsets(cluster: Cluster, group_id: str, offsets: Mapping[TopicPartition, int], *,
                   metadata: str = "", timeout_ms: int | None = None) -> None:
    """Store ``offsets`` (the next offset to read, per partition) for ``group_id``."""
    if not offsets:
        return
    clock = cluster.client.clock
    timeout = cluster.client.config.request_timeout_ms if timeout_ms is None else timeout_ms
    deadline_ms = clock.monotonic_ms() + timeout
    topics: dict[str, list[OffsetCommitRequestPartition]] = {}
    for tp in sorted(offsets):
        topics.setdefault(tp.topic, []).append(OffsetCommitRequestPartition(
            partition_index=tp.partition, committed_offset=int(offsets[tp]),
            committed_metadata=metadata))
    request = OffsetCommitRequest(
        group_id=group_id,
        topics=[OffsetCommitRequestTopic(name=name, partitions=parts)
                for name, parts in topics.items()])
    while True:
        remaining_ms = max(1, deadline_ms - clock.monotonic_ms())
        node_id = cluster.coordinator(CoordinatorType.GROUP, group_id, timeout_ms=remaining_ms)
        version = min(cluster.client.connection(node_id).version_for(ApiKey.OFFSET_COMMIT),
                      _MAX_VERSION_BY_NAME)
        response: OffsetCommitResponse = cluster.client.request(
            node_id, request, timeout_ms=remaining_ms, version=version)
        error = _first_error(response, group_id)
        if error is None:
            return
        if error.code in _COORDINATOR_MOVED:
            cluster.forget_coordinator(CoordinatorType.GROUP, group_id)
        if not error.retriable:
            raise error
        if clock.monotonic_ms() >= deadline_ms:
            raise KafkaTimeoutError(f"committing offsets of group {group_id!r} did not succeed "
                                    f"within {timeout} ms; last error: {error}")
        clock.sleep_ms(cluster.retry_backoff_ms)


def _first_error(response: OffsetCommitResponse, group_id: str) -> BrokerError | None:
    for topic in response.topics:
        for part in topic.partitions:
            if part.error_code:
                return BrokerError(part.error_code, f"committing offsets of group {group_id!r} "
                                                    f"for {topic.name}-{part.partition_index}")
    return None
