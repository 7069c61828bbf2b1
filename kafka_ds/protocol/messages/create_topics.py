"""CreateTopics (key 19): create topics, sent to any broker (it forwards to the controller).

``num_partitions`` and ``replication_factor`` -1 take the broker defaults (v4+, KIP-464);
with an explicit ``assignments`` list both must be -1. ``timeout_ms`` is how long the broker
waits for the topics to exist everywhere before answering; a REQUEST_TIMED_OUT answer may
still be followed by the topic appearing. With ``validate_only`` nothing is created. From v5
the response also reports the topic's resulting configuration (KIP-525), and from v7 its id.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID as Uuid

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.schema import (
    BOOL,
    INT8,
    INT16,
    INT32,
    STRING,
    UUID,
    Array,
    Request,
    Response,
    Struct,
    f,
)


@dataclass(kw_only=True, slots=True)
class CreatableTopicConfigs(Struct):
    name: str = f(STRING, "5+")
    value: str | None = f(STRING, "5+", nullable="5+")
    read_only: bool = f(BOOL, "5+")
    config_source: int = f(INT8, "5+", default=-1, ignorable=True)
    is_sensitive: bool = f(BOOL, "5+")


@dataclass(kw_only=True, slots=True)
class CreatableTopicResult(Struct):
    name: str = f(STRING)
    topic_id: Uuid = f(UUID, "7+", ignorable=True)
    error_code: int = f(INT16)
    error_message: str | None = f(STRING, "1+", nullable="0+", ignorable=True)
    # Why ``configs`` is missing, when the broker could not describe them.
    topic_config_error_code: int = f(INT16, "5+", tag=0, ignorable=True)
    num_partitions: int = f(INT32, "5+", default=-1, ignorable=True)
    replication_factor: int = f(INT16, "5+", default=-1, ignorable=True)
    configs: list[CreatableTopicConfigs] | None = f(
        Array(CreatableTopicConfigs), "5+", nullable="5+", ignorable=True)


@dataclass(kw_only=True, slots=True)
class CreateTopicsResponse(Response):
    API_KEY = ApiKey.CREATE_TOPICS
    VALID_VERSIONS = (2, 7)
    FLEXIBLE_VERSIONS = "5+"

    throttle_time_ms: int = f(INT32, "2+", ignorable=True)
    topics: list[CreatableTopicResult] = f(Array(CreatableTopicResult))


@dataclass(kw_only=True, slots=True)
class CreatableReplicaAssignment(Struct):
    partition_index: int = f(INT32)
    broker_ids: list[int] = f(Array(INT32))


@dataclass(kw_only=True, slots=True)
class CreatableTopicConfig(Struct):
    name: str = f(STRING)
    value: str | None = f(STRING, nullable="0+")


@dataclass(kw_only=True, slots=True)
class CreatableTopic(Struct):
    name: str = f(STRING)
    num_partitions: int = f(INT32)
    replication_factor: int = f(INT16)
    assignments: list[CreatableReplicaAssignment] = f(Array(CreatableReplicaAssignment))
    configs: list[CreatableTopicConfig] = f(Array(CreatableTopicConfig))


@dataclass(kw_only=True, slots=True)
class CreateTopicsRequest(Request):
    API_KEY = ApiKey.CREATE_TOPICS
    VALID_VERSIONS = (2, 7)
    FLEXIBLE_VERSIONS = "5+"
    RESPONSE = CreateTopicsResponse

    topics: list[CreatableTopic] = f(Array(CreatableTopic))
    timeout_ms: int = f(INT32, default=60000)
    validate_only: bool = f(BOOL, "1+")
