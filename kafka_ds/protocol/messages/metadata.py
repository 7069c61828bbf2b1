"""Metadata (key 3): brokers, topics, partition leaders and leader epochs.

The client's view of the cluster. ``topics=None`` (v1+) asks for every topic; an empty list
asks for none (brokers only). Topic ids (v10+) are needed by Fetch v13+.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID as Uuid

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.schema import (
    BOOL,
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

# Sentinel the broker sends when authorized operations were not requested.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


@dataclass(kw_only=True, slots=True)
class MetadataRequestTopic(Struct):
    topic_id: Uuid = f(UUID, "10+", ignorable=True)
    name: str | None = f(STRING, nullable="10+")


@dataclass(kw_only=True, slots=True)
class MetadataResponseBroker(Struct):
    node_id: int = f(INT32)
    host: str = f(STRING)
    port: int = f(INT32)
    rack: str | None = f(STRING, "1+", nullable="1+", default=None, ignorable=True)


@dataclass(kw_only=True, slots=True)
class MetadataResponsePartition(Struct):
    error_code: int = f(INT16)
    partition_index: int = f(INT32)
    leader_id: int = f(INT32)
    leader_epoch: int = f(INT32, "7+", default=-1, ignorable=True)
    replica_nodes: list[int] = f(Array(INT32))
    isr_nodes: list[int] = f(Array(INT32))
    offline_replicas: list[int] = f(Array(INT32), "5+", ignorable=True)


@dataclass(kw_only=True, slots=True)
class MetadataResponseTopic(Struct):
    error_code: int = f(INT16)
    name: str | None = f(STRING, nullable="12+")
    topic_id: Uuid = f(UUID, "10+", ignorable=True)
    is_internal: bool = f(BOOL, "1+", ignorable=True)
    partitions: list[MetadataResponsePartition] = f(Array(MetadataResponsePartition))
    topic_authorized_operations: int = f(INT32, "8+", default=AUTHORIZED_OPERATIONS_OMITTED)


@dataclass(kw_only=True, slots=True)
class MetadataResponse(Response):
    API_KEY = ApiKey.METADATA
    VALID_VERSIONS = (0, 13)
    FLEXIBLE_VERSIONS = "9+"

    throttle_time_ms: int = f(INT32, "3+", ignorable=True)
    brokers: list[MetadataResponseBroker] = f(Array(MetadataResponseBroker))
    cluster_id: str | None = f(STRING, "2+", nullable="2+", default=None, ignorable=True)
    controller_id: int = f(INT32, "1+", default=-1, ignorable=True)
    topics: list[MetadataResponseTopic] = f(Array(MetadataResponseTopic))
    cluster_authorized_operations: int = f(INT32, "8-10", default=AUTHORIZED_OPERATIONS_OMITTED)
    error_code: int = f(INT16, "13+", ignorable=True)


@dataclass(kw_only=True, slots=True)
class MetadataRequest(Request):
    API_KEY = ApiKey.METADATA
    VALID_VERSIONS = (0, 13)
    FLEXIBLE_VERSIONS = "9+"
    RESPONSE = MetadataResponse

    # None asks for all topics (v1+); in v0 an empty list meant all topics.
    topics: list[MetadataRequestTopic] | None = f(Array(MetadataRequestTopic), nullable="1+")
    allow_auto_topic_creation: bool = f(BOOL, "4+", default=True)
    include_cluster_authorized_operations: bool = f(BOOL, "8-10")
    include_topic_authorized_operations: bool = f(BOOL, "8+")
