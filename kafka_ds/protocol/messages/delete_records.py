"""DeleteRecords (key 21): move a partition's log start offset forward, sent to its leader.

Records below ``offset`` become unreadable (and are later removed from disk); -1 means the
high watermark, i.e. everything. The response gives each partition's new low watermark.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.schema import (
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
class DeleteRecordsPartitionResult(Struct):
    partition_index: int = f(INT32)
    low_watermark: int = f(INT64)
    error_code: int = f(INT16)


@dataclass(kw_only=True, slots=True)
class DeleteRecordsTopicResult(Struct):
    name: str = f(STRING)
    partitions: list[DeleteRecordsPartitionResult] = f(Array(DeleteRecordsPartitionResult))


@dataclass(kw_only=True, slots=True)
class DeleteRecordsResponse(Response):
    API_KEY = ApiKey.DELETE_RECORDS
    VALID_VERSIONS = (0, 2)
    FLEXIBLE_VERSIONS = "2+"

    throttle_time_ms: int = f(INT32)
    topics: list[DeleteRecordsTopicResult] = f(Array(DeleteRecordsTopicResult))


@dataclass(kw_only=True, slots=True)
class DeleteRecordsPartition(Struct):
    partition_index: int = f(INT32)
    offset: int = f(INT64)


@dataclass(kw_only=True, slots=True)
class DeleteRecordsTopic(Struct):
    name: str = f(STRING)
    partitions: list[DeleteRecordsPartition] = f(Array(DeleteRecordsPartition))


@dataclass(kw_only=True, slots=True)
class DeleteRecordsRequest(Request):
    API_KEY = ApiKey.DELETE_RECORDS
    VALID_VERSIONS = (0, 2)
    FLEXIBLE_VERSIONS = "2+"
    RESPONSE = DeleteRecordsResponse

    topics: list[DeleteRecordsTopic] = f(Array(DeleteRecordsTopic))
    timeout_ms: int = f(INT32)
