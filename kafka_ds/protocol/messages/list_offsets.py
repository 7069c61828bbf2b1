"""ListOffsets (key 2): the offset of a partition at a timestamp, or at one of its ends.

``timestamp`` is either a time in ms (asks for the first offset whose record timestamp is at
or after it) or a negative sentinel: -1 latest (the high watermark, or the last stable offset
under read_committed), -2 earliest, -3 the record with the largest timestamp (v7+, KIP-734),
-4 the start of the local log (v8+, KIP-405), -5 the last tiered offset (v9+, KIP-1005); v11
adds one for the earliest offset not yet uploaded to remote storage (KIP-1023). A broker
rejects a sentinel newer than the request version, so the version decides which queries can
be asked. Version 0 (several offsets per partition) is no longer part of the protocol.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.schema import (
    INT8,
    INT16,
    INT32,
    INT64,
    STRING,
    Array,
    Request,
    Response,
    Struct,
    f,
)


@dataclass(kw_only=True, slots=True)
class ListOffsetsPartitionResponse(Struct):
    partition_index: int = f(INT32)
    error_code: int = f(INT16)
    timestamp: int = f(INT64, "1+", default=-1)
    offset: int = f(INT64, "1+", default=-1)
    leader_epoch: int = f(INT32, "4+", default=-1)


@dataclass(kw_only=True, slots=True)
class ListOffsetsTopicResponse(Struct):
    name: str = f(STRING)
    partitions: list[ListOffsetsPartitionResponse] = f(Array(ListOffsetsPartitionResponse))


@dataclass(kw_only=True, slots=True)
class ListOffsetsResponse(Response):
    API_KEY = ApiKey.LIST_OFFSETS
    VALID_VERSIONS = (1, 11)
    FLEXIBLE_VERSIONS = "6+"

    throttle_time_ms: int = f(INT32, "2+", ignorable=True)
    topics: list[ListOffsetsTopicResponse] = f(Array(ListOffsetsTopicResponse))


@dataclass(kw_only=True, slots=True)
class ListOffsetsPartition(Struct):
    partition_index: int = f(INT32)
    current_leader_epoch: int = f(INT32, "4+", default=-1, ignorable=True)
    timestamp: int = f(INT64)


@dataclass(kw_only=True, slots=True)
class ListOffsetsTopic(Struct):
    name: str = f(STRING)
    partitions: list[ListOffsetsPartition] = f(Array(ListOffsetsPartition))


@dataclass(kw_only=True, slots=True)
class ListOffsetsRequest(Request):
    API_KEY = ApiKey.LIST_OFFSETS
    VALID_VERSIONS = (1, 11)
    FLEXIBLE_VERSIONS = "6+"
    RESPONSE = ListOffsetsResponse

    # -1 for a client; only followers send their broker id.
    replica_id: int = f(INT32)
    # 0: read_uncommitted; 1: read_committed (then "latest" is the last stable offset).
    isolation_level: int = f(INT8, "2+")
    topics: list[ListOffsetsTopic] = f(Array(ListOffsetsTopic))
    # How long the broker may wait for offsets held in remote storage (KIP-1075).
    timeout_ms: int = f(INT32, "10+", ignorable=True)
