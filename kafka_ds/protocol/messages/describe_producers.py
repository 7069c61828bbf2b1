"""DescribeProducers (key 61): the producers with state on a partition, asked of its leader.

Lists each active producer id with its epoch, last sequence and, when it has an open
transaction on the partition, the offset where that transaction started: the tool for finding
a "hanging" transaction that holds back the last stable offset (KIP-664).
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
class ProducerState(Struct):
    producer_id: int = f(INT64)
    # An int32 here although producer epochs are int16 everywhere else.
    producer_epoch: int = f(INT32)
    last_sequence: int = f(INT32, default=-1)
    last_timestamp: int = f(INT64, default=-1)
    coordinator_epoch: int = f(INT32)
    # -1 when the producer has no open transaction on this partition.
    current_txn_start_offset: int = f(INT64, default=-1)


@dataclass(kw_only=True, slots=True)
class PartitionResponse(Struct):
    partition_index: int = f(INT32)
    error_code: int = f(INT16)
    error_message: str | None = f(STRING, nullable="0+", default=None)
    active_producers: list[ProducerState] = f(Array(ProducerState))


@dataclass(kw_only=True, slots=True)
class TopicResponse(Struct):
    name: str = f(STRING)
    partitions: list[PartitionResponse] = f(Array(PartitionResponse))


@dataclass(kw_only=True, slots=True)
class DescribeProducersResponse(Response):
    API_KEY = ApiKey.DESCRIBE_PRODUCERS
    VALID_VERSIONS = (0, 0)
    FLEXIBLE_VERSIONS = "0+"

    throttle_time_ms: int = f(INT32)
    topics: list[TopicResponse] = f(Array(TopicResponse))


@dataclass(kw_only=True, slots=True)
class TopicRequest(Struct):
    name: str = f(STRING)
    partition_indexes: list[int] = f(Array(INT32))


@dataclass(kw_only=True, slots=True)
class DescribeProducersRequest(Request):
    API_KEY = ApiKey.DESCRIBE_PRODUCERS
    VALID_VERSIONS = (0, 0)
    FLEXIBLE_VERSIONS = "0+"
    RESPONSE = DescribeProducersResponse

    topics: list[TopicRequest] = f(Array(TopicRequest))
