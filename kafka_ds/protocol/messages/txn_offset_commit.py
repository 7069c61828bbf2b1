"""TxnOffsetCommit (key 28): stage consumer offsets in a transaction, sent to the group coordinator.

The offsets become visible only if the transaction commits. Transactions v1 need an
AddOffsetsToTxn first; from v5 under transactions v2 (KIP-890) this request registers the
group itself. v3 adds the group membership fields (KIP-447) so the coordinator can fence a
zombie consumer; a producer outside a consumer group leaves them at their defaults.
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
class TxnOffsetCommitResponsePartition(Struct):
    partition_index: int = f(INT32)
    error_code: int = f(INT16)


@dataclass(kw_only=True, slots=True)
class TxnOffsetCommitResponseTopic(Struct):
    name: str = f(STRING)
    partitions: list[TxnOffsetCommitResponsePartition] = f(Array(TxnOffsetCommitResponsePartition))


@dataclass(kw_only=True, slots=True)
class TxnOffsetCommitResponse(Response):
    API_KEY = ApiKey.TXN_OFFSET_COMMIT
    VALID_VERSIONS = (0, 5)
    FLEXIBLE_VERSIONS = "3+"

    throttle_time_ms: int = f(INT32)
    topics: list[TxnOffsetCommitResponseTopic] = f(Array(TxnOffsetCommitResponseTopic))


@dataclass(kw_only=True, slots=True)
class TxnOffsetCommitRequestPartition(Struct):
    partition_index: int = f(INT32)
    committed_offset: int = f(INT64)
    committed_leader_epoch: int = f(INT32, "2+", default=-1, ignorable=True)
    committed_metadata: str | None = f(STRING, nullable="0+")


@dataclass(kw_only=True, slots=True)
class TxnOffsetCommitRequestTopic(Struct):
    name: str = f(STRING)
    partitions: list[TxnOffsetCommitRequestPartition] = f(Array(TxnOffsetCommitRequestPartition))


@dataclass(kw_only=True, slots=True)
class TxnOffsetCommitRequest(Request):
    API_KEY = ApiKey.TXN_OFFSET_COMMIT
    VALID_VERSIONS = (0, 5)
    FLEXIBLE_VERSIONS = "3+"
    RESPONSE = TxnOffsetCommitResponse

    transactional_id: str = f(STRING)
    group_id: str = f(STRING)
    producer_id: int = f(INT64)
    producer_epoch: int = f(INT16)
    generation_id: int = f(INT32, "3+", default=-1)
    member_id: str = f(STRING, "3+")
    group_instance_id: str | None = f(STRING, "3+", nullable="3+", default=None)
    topics: list[TxnOffsetCommitRequestTopic] = f(Array(TxnOffsetCommitRequestTopic))
