"""CreatePartitions (key 37): raise the partition count of existing topics.

``count`` is the new total, not the number to add; partitions can never be removed. A null
``assignments`` lets the controller place the new partitions; otherwise it lists the replicas
of each new partition, in order.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.schema import BOOL, INT16, INT32, STRING, Array, Request, Response, Struct, f


@dataclass(kw_only=True, slots=True)
class CreatePartitionsTopicResult(Struct):
    name: str = f(STRING)
    error_code: int = f(INT16)
    error_message: str | None = f(STRING, nullable="0+", default=None)


@dataclass(kw_only=True, slots=True)
class CreatePartitionsResponse(Response):
    API_KEY = ApiKey.CREATE_PARTITIONS
    VALID_VERSIONS = (0, 3)
    FLEXIBLE_VERSIONS = "2+"

    throttle_time_ms: int = f(INT32)
    results: list[CreatePartitionsTopicResult] = f(Array(CreatePartitionsTopicResult))


@dataclass(kw_only=True, slots=True)
class CreatePartitionsAssignment(Struct):
    broker_ids: list[int] = f(Array(INT32))


@dataclass(kw_only=True, slots=True)
class CreatePartitionsTopic(Struct):
    name: str = f(STRING)
    count: int = f(INT32)
    assignments: list[CreatePartitionsAssignment] | None = f(
        Array(CreatePartitionsAssignment), nullable="0+")


@dataclass(kw_only=True, slots=True)
class CreatePartitionsRequest(Request):
    API_KEY = ApiKey.CREATE_PARTITIONS
    VALID_VERSIONS = (0, 3)
    FLEXIBLE_VERSIONS = "2+"
    RESPONSE = CreatePartitionsResponse

    topics: list[CreatePartitionsTopic] = f(Array(CreatePartitionsTopic))
    timeout_ms: int = f(INT32)
    validate_only: bool = f(BOOL)
