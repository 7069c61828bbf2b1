"""OffsetFetch (key 9): read a consumer group's committed offsets from its coordinator.

Up to v7 a request names one group and the response has top-level ``topics`` and
``error_code``; from v8 both are per group, in ``groups``. A null topic list (v2+) asks for
every partition the group has committed. A partition with nothing committed comes back with
offset -1 and no error. With ``require_stable`` (v7+) a partition that has a pending
transactional commit answers UNSTABLE_OFFSET_COMMIT (retriable) instead of an offset that
may still change. v10 names topics by id instead of by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID as Uuid

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.schema import (
    BOOL,
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
class OffsetFetchResponsePartition(Struct):
    partition_index: int = f(INT32, "0-7")
    committed_offset: int = f(INT64, "0-7")
    committed_leader_epoch: int = f(INT32, "5-7", default=-1, ignorable=True)
    metadata: str | None = f(STRING, "0-7", nullable="0-7")
    error_code: int = f(INT16, "0-7")


@dataclass(kw_only=True, slots=True)
class OffsetFetchResponseTopic(Struct):
    name: str = f(STRING, "0-7")
    partitions: list[OffsetFetchResponsePartition] = f(Array(OffsetFetchResponsePartition), "0-7")


@dataclass(kw_only=True, slots=True)
class OffsetFetchResponsePartitions(Struct):
    partition_index: int = f(INT32, "8+")
    committed_offset: int = f(INT64, "8+")
    committed_leader_epoch: int = f(INT32, "8+", default=-1, ignorable=True)
    metadata: str | None = f(STRING, "8+", nullable="8+")
    error_code: int = f(INT16, "8+")


@dataclass(kw_only=True, slots=True)
class OffsetFetchResponseTopics(Struct):
    name: str = f(STRING, "8-9", ignorable=True)
    topic_id: Uuid = f(UUID, "10+", ignorable=True)
    partitions: list[OffsetFetchResponsePartitions] = f(
        Array(OffsetFetchResponsePartitions), "8+")


@dataclass(kw_only=True, slots=True)
class OffsetFetchResponseGroup(Struct):
    group_id: str = f(STRING, "8+")
    topics: list[OffsetFetchResponseTopics] = f(Array(OffsetFetchResponseTopics), "8+")
    error_code: int = f(INT16, "8+")


@dataclass(kw_only=True, slots=True)
class OffsetFetchResponse(Response):
    API_KEY = ApiKey.OFFSET_FETCH
    VALID_VERSIONS = (1, 10)
    FLEXIBLE_VERSIONS = "6+"

    throttle_time_ms: int = f(INT32, "3+", ignorable=True)
    topics: list[OffsetFetchResponseTopic] = f(Array(OffsetFetchResponseTopic), "0-7")
    error_code: int = f(INT16, "2-7", ignorable=True)
    groups: list[OffsetFetchResponseGroup] = f(Array(OffsetFetchResponseGroup), "8+")


@dataclass(kw_only=True, slots=True)
class OffsetFetchRequestTopic(Struct):
    name: str = f(STRING, "0-7")
    partition_indexes: list[int] = f(Array(INT32), "0-7")


@dataclass(kw_only=True, slots=True)
class OffsetFetchRequestTopics(Struct):
    name: str = f(STRING, "8-9", ignorable=True)
    topic_id: Uuid = f(UUID, "10+", ignorable=True)
    partition_indexes: list[int] = f(Array(INT32), "8+")


@dataclass(kw_only=True, slots=True)
class OffsetFetchRequestGroup(Struct):
    group_id: str = f(STRING, "8+")
    member_id: str | None = f(STRING, "9+", nullable="9+", default=None, ignorable=True)
    member_epoch: int = f(INT32, "9+", default=-1, ignorable=True)
    # None asks for every partition the group has committed.
    topics: list[OffsetFetchRequestTopics] | None = f(
        Array(OffsetFetchRequestTopics), "8+", nullable="8+")


@dataclass(kw_only=True, slots=True)
class OffsetFetchRequest(Request):
    API_KEY = ApiKey.OFFSET_FETCH
    VALID_VERSIONS = (1, 10)
    FLEXIBLE_VERSIONS = "6+"
    RESPONSE = OffsetFetchResponse

    group_id: str = f(STRING, "0-7")
    # None (v2+) asks for every partition the group has committed.
    topics: list[OffsetFetchRequestTopic] | None = f(
        Array(OffsetFetchRequestTopic), "0-7", nullable="2-7")
    groups: list[OffsetFetchRequestGroup] = f(Array(OffsetFetchRequestGroup), "8+")
    require_stable: bool = f(BOOL, "7+")
