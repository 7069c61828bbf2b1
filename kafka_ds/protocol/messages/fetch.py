"""Fetch (key 1): read record batches from partition leaders (or a preferred replica).

A consumer sends ``replica_id`` -1 (v15+ moved it into the tagged ``replica_state``, which only
followers set). Incremental fetch sessions (KIP-227, v7+): the first request opens a session
with ``session_id`` 0 and ``session_epoch`` 0 and lists every partition; the broker answers
with a session id, and later requests send that id with the epoch plus one and list only the
partitions that changed (``forgotten_topics_data`` removes partitions from the session). A
partition missing from an incremental response means "nothing new", not an error. Epoch -1
closes the session, or, with session id 0 (the defaults), asks for a fetch without one. v13
names topics by id instead of by name, in ``forgotten_topics_data`` as well.
``isolation_level`` 1 (read_committed) makes the broker stop at the last stable offset and
list the aborted transactions in the returned range, which the consumer must use to drop
aborted records. The ``records`` blob may start below the requested offset and end with a
partial batch; both are normal.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID as Uuid

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.primitives import Buffer
from kafka_ds.protocol.schema import (
    INT8,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    UUID,
    Array,
    Request,
    Response,
    Struct,
    f,
)


@dataclass(kw_only=True, slots=True)
class EpochEndOffset(Struct):
    epoch: int = f(INT32, "12+", default=-1)
    end_offset: int = f(INT64, "12+", default=-1)


@dataclass(kw_only=True, slots=True)
class LeaderIdAndEpoch(Struct):
    leader_id: int = f(INT32, "12+", default=-1)
    leader_epoch: int = f(INT32, "12+", default=-1)


@dataclass(kw_only=True, slots=True)
class SnapshotId(Struct):
    end_offset: int = f(INT64, "0+", default=-1)
    epoch: int = f(INT32, "0+", default=-1)


@dataclass(kw_only=True, slots=True)
class AbortedTransaction(Struct):
    producer_id: int = f(INT64, "4+")
    first_offset: int = f(INT64, "4+")


@dataclass(kw_only=True, slots=True)
class PartitionData(Struct):
    partition_index: int = f(INT32)
    error_code: int = f(INT16)
    high_watermark: int = f(INT64)
    last_stable_offset: int = f(INT64, "4+", default=-1, ignorable=True)
    log_start_offset: int = f(INT64, "5+", default=-1, ignorable=True)
    # Set when the follower's log diverged from the leader's (replication only).
    diverging_epoch: EpochEndOffset = f(EpochEndOffset, "12+", tag=0)
    current_leader: LeaderIdAndEpoch = f(LeaderIdAndEpoch, "12+", tag=1)
    snapshot_id: SnapshotId = f(SnapshotId, "12+", tag=2)
    # Only in read_committed: None when the broker had none to report.
    aborted_transactions: list[AbortedTransaction] | None = f(
        Array(AbortedTransaction), "4+", nullable="4+", ignorable=True)
    # Not -1: fetch this partition from that broker instead (KIP-392, rack-aware fetching).
    preferred_read_replica: int = f(INT32, "11+", default=-1)
    records: Buffer | None = f(RECORDS, nullable="0+")


@dataclass(kw_only=True, slots=True)
class FetchableTopicResponse(Struct):
    topic: str = f(STRING, "0-12", ignorable=True)
    topic_id: Uuid = f(UUID, "13+", ignorable=True)
    partitions: list[PartitionData] = f(Array(PartitionData))


@dataclass(kw_only=True, slots=True)
class NodeEndpoint(Struct):
    node_id: int = f(INT32, "16+")
    host: str = f(STRING, "16+")
    port: int = f(INT32, "16+")
    rack: str | None = f(STRING, "16+", nullable="16+", default=None)


@dataclass(kw_only=True, slots=True)
class FetchResponse(Response):
    API_KEY = ApiKey.FETCH
    VALID_VERSIONS = (4, 18)
    FLEXIBLE_VERSIONS = "12+"

    throttle_time_ms: int = f(INT32, "1+", ignorable=True)
    # Session-level error (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, ...).
    error_code: int = f(INT16, "7+", ignorable=True)
    session_id: int = f(INT32, "7+")
    responses: list[FetchableTopicResponse] = f(Array(FetchableTopicResponse))
    node_endpoints: list[NodeEndpoint] = f(Array(NodeEndpoint), "16+", tag=0)


@dataclass(kw_only=True, slots=True)
class ReplicaState(Struct):
    replica_id: int = f(INT32, "15+", default=-1)
    replica_epoch: int = f(INT64, "15+", default=-1)


@dataclass(kw_only=True, slots=True)
class FetchPartition(Struct):
    partition: int = f(INT32)
    # -1 skips the leader-epoch check (KIP-320); a known epoch gets FENCED_LEADER_EPOCH back.
    current_leader_epoch: int = f(INT32, "9+", default=-1, ignorable=True)
    fetch_offset: int = f(INT64)
    last_fetched_epoch: int = f(INT32, "12+", default=-1)
    log_start_offset: int = f(INT64, "5+", default=-1, ignorable=True)
    partition_max_bytes: int = f(INT32)
    replica_directory_id: Uuid = f(UUID, "17+", tag=0, ignorable=True)
    high_watermark: int = f(INT64, "18+", tag=1, default=2**63 - 1, ignorable=True)


@dataclass(kw_only=True, slots=True)
class FetchTopic(Struct):
    topic: str = f(STRING, "0-12", ignorable=True)
    topic_id: Uuid = f(UUID, "13+", ignorable=True)
    partitions: list[FetchPartition] = f(Array(FetchPartition))


@dataclass(kw_only=True, slots=True)
class ForgottenTopic(Struct):
    topic: str = f(STRING, "7-12", ignorable=True)
    topic_id: Uuid = f(UUID, "13+", ignorable=True)
    partitions: list[int] = f(Array(INT32), "7+")


@dataclass(kw_only=True, slots=True)
class FetchRequest(Request):
    API_KEY = ApiKey.FETCH
    VALID_VERSIONS = (4, 18)
    FLEXIBLE_VERSIONS = "12+"
    RESPONSE = FetchResponse

    cluster_id: str | None = f(STRING, "12+", nullable="12+", tag=0, default=None,
                               ignorable=True)
    replica_id: int = f(INT32, "0-14", default=-1)
    replica_state: ReplicaState = f(ReplicaState, "15+", tag=1)
    max_wait_ms: int = f(INT32)
    min_bytes: int = f(INT32)
    max_bytes: int = f(INT32, "3+", default=0x7FFFFFFF, ignorable=True)
    # 0: read_uncommitted; 1: read_committed.
    isolation_level: int = f(INT8, "4+", ignorable=True)
    session_id: int = f(INT32, "7+", ignorable=True)
    session_epoch: int = f(INT32, "7+", default=-1, ignorable=True)
    topics: list[FetchTopic] = f(Array(FetchTopic))
    forgotten_topics_data: list[ForgottenTopic] = f(Array(ForgottenTopic), "7+")
    rack_id: str = f(STRING, "11+", ignorable=True)
