"""OffsetCommit (key 8): store consumer offsets with a group coordinator (outside transactions).

A client that is not a group member commits with the default generation -1 and an empty
member id (the "simple" consumer case). The field carrying the generation became the member
epoch for groups using the new consumer protocol (KIP-848, v9+). v10 names topics by id
instead of by name. ``retention_time_ms`` (v2-4; -1 means the broker's default) is gone from
v5 (KIP-211): from then on only the broker's ``offsets.retention.minutes`` decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID as Uuid

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.schema import (
    INT16,
    INT32,
    INT64,
    STRING,
    UUID,
    Array,
    Request,
    Response,
    Struct,
    f,
)


@dataclass(kw_only=True, slots=True)
class OffsetCommitResponsePartition(Struct):
    partition_index: int = f(INT32)
    error_code: int = f(INT16)


@dataclass(kw_only=True, slots=True)
class OffsetCommitResponseTopic(Struct):
    name: str = f(STRING, "0-9", ignorable=True)
    topic_id: Uuid = f(UUID, "10+", ignorable=True)
    partitions: list[OffsetCommitResponsePartition] = f(Array(OffsetCommitResponsePartition))


@dataclass(kw_only=True, slots=True)
class OffsetCommitResponse(Response):
    API_KEY = ApiKey.OFFSET_COMMIT
    VALID_VERSIONS = (2, 10)
    FLEXIBLE_VERSIONS = "8+"

    throttle_time_ms: int = f(INT32, "3+", ignorable=True)
    topics: list[OffsetCommitResponseTopic] = f(Array(OffsetCommitResponseTopic))


@dataclass(kw_only=True, slots=True)
class OffsetCommitRequestPartition(Struct):
    partition_index: int = f(INT32)
    committed_offset: int = f(INT64)
    committed_leader_epoch: int = f(INT32, "6+", default=-1, ignorable=True)
    committed_metadata: str | None = f(STRING, nullable="0+")


@dataclass(kw_only=True, slots=True)
class OffsetCommitRequestTopic(Struct):
    name: str = f(STRING, "0-9", ignorable=True)
    topic_id: Uuid = f(UUID, "10+", ignorable=True)
    partitions: list[OffsetCommitRequestPartition] = f(Array(OffsetCommitRequestPartition))


@dataclass(kw_only=True, slots=True)
class OffsetCommitRequest(Request):
    API_KEY = ApiKey.OFFSET_COMMIT
    VALID_VERSIONS = (2, 10)
    FLEXIBLE_VERSIONS = "8+"
    RESPONSE = OffsetCommitResponse

    group_id: str = f(STRING)
    generation_id_or_member_epoch: int = f(INT32, "1+", default=-1, ignorable=True)
    member_id: str = f(STRING, "1+", ignorable=True)
    group_instance_id: str | None = f(STRING, "7+", nullable="7+", default=None)
    retention_time_ms: int = f(INT64, "2-4", default=-1, ignorable=True)
    topics: list[OffsetCommitRequestTopic] = f(Array(OffsetCommitRequestTopic))
