"""DescribeCluster (key 60): the cluster id, controller and live brokers, without topics.

Flexible from its first version. A cheaper alternative to Metadata when only brokers matter.
``endpoint_type`` 2 (v1+, KIP-919) asks a controller for the controllers instead of the
brokers. ``cluster_authorized_operations`` is a bit set of ACL operations, or the minimum
int32 when it was not requested.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.messages.metadata import AUTHORIZED_OPERATIONS_OMITTED
from kafka_ds.protocol.schema import (
    BOOL,
    INT8,
    INT16,
    INT32,
    STRING,
    Array,
    Request,
    Response,
    Struct,
    f,
)


@dataclass(kw_only=True, slots=True)
class DescribeClusterBroker(Struct):
    broker_id: int = f(INT32)
    host: str = f(STRING)
    port: int = f(INT32)
    rack: str | None = f(STRING, nullable="0+", default=None)
    is_fenced: bool = f(BOOL, "2+")


@dataclass(kw_only=True, slots=True)
class DescribeClusterResponse(Response):
    API_KEY = ApiKey.DESCRIBE_CLUSTER
    VALID_VERSIONS = (0, 2)
    FLEXIBLE_VERSIONS = "0+"

    throttle_time_ms: int = f(INT32)
    error_code: int = f(INT16)
    error_message: str | None = f(STRING, nullable="0+", default=None)
    endpoint_type: int = f(INT8, "1+", default=1)
    cluster_id: str = f(STRING)
    controller_id: int = f(INT32, default=-1)
    brokers: list[DescribeClusterBroker] = f(Array(DescribeClusterBroker))
    cluster_authorized_operations: int = f(INT32, default=AUTHORIZED_OPERATIONS_OMITTED)


@dataclass(kw_only=True, slots=True)
class DescribeClusterRequest(Request):
    API_KEY = ApiKey.DESCRIBE_CLUSTER
    VALID_VERSIONS = (0, 2)
    FLEXIBLE_VERSIONS = "0+"
    RESPONSE = DescribeClusterResponse

    include_cluster_authorized_operations: bool = f(BOOL)
    # 1: brokers; 2: controllers.
    endpoint_type: int = f(INT8, "1+", default=1)
    include_fenced_brokers: bool = f(BOOL, "2+")
