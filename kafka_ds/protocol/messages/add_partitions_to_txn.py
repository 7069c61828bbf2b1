"""AddPartitionsToTxn (key 24): register partitions with a transaction before producing to them.

Transactions v1 only: under transactions v2 (KIP-890, Produce v12+) the first transactional
Produce to a partition registers it. Each request names one transactional id; the response
has an error per partition, and when any partition fails the others come back as
OPERATION_NOT_ATTEMPTED. Versions 4 and 5 batch many transactions for broker-to-broker
verification and require CLUSTER_ACTION, so this library declares only v0-3, whose fields are
the spec's ``V3AndBelow*`` ones.
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
class AddPartitionsToTxnPartitionResult(Struct):
    partition_index: int = f(INT32)
    partition_error_code: int = f(INT16)


@dataclass(kw_only=True, slots=True)
class AddPartitionsToTxnTopicResult(Struct):
    name: str = f(STRING)
    results_by_partition: list[AddPartitionsToTxnPartitionResult] = f(
        Array(AddPartitionsToTxnPartitionResult))


@dataclass(kw_only=True, slots=True)
class AddPartitionsToTxnResponse(Response):
    API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN
    # v4+ is broker-to-broker only (needs CLUSTER_ACTION); see the module docstring.
    VALID_VERSIONS = (0, 3)
    FLEXIBLE_VERSIONS = "3+"

    throttle_time_ms: int = f(INT32)
    results_by_topic_v3_and_below: list[AddPartitionsToTxnTopicResult] = f(
        Array(AddPartitionsToTxnTopicResult), "0-3")


@dataclass(kw_only=True, slots=True)
class AddPartitionsToTxnTopic(Struct):
    name: str = f(STRING)
    partitions: list[int] = f(Array(INT32))


@dataclass(kw_only=True, slots=True)
class AddPartitionsToTxnRequest(Request):
    API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN
    # v4+ is broker-to-broker only (needs CLUSTER_ACTION); see the module docstring.
    VALID_VERSIONS = (0, 3)
    FLEXIBLE_VERSIONS = "3+"
    RESPONSE = AddPartitionsToTxnResponse

    v3_and_below_transactional_id: str = f(STRING, "0-3")
    v3_and_below_producer_id: int = f(INT64, "0-3")
    v3_and_below_producer_epoch: int = f(INT16, "0-3")
    v3_and_below_topics: list[AddPartitionsToTxnTopic] = f(Array(AddPartitionsToTxnTopic), "0-3")
