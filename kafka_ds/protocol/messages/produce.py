"""Produce (key 0): append record batches to partition leaders.

Each partition carries one ``records`` blob holding whole RecordBatch v2 batches (built by
``kafka_ds.protocol.records``); this module only moves the bytes. With ``acks=0`` the broker
sends no response at all, so the connection must not wait for one. ``transactional_id`` is
set only inside a transaction. From v12, when the cluster's ``transaction.version`` is 2
(KIP-890), a transactional Produce also adds its partitions to the transaction, replacing
AddPartitionsToTxn; below v12 the client must call AddPartitionsToTxn first. v13 names topics
by id instead of by name. Since v10 an error caused by a stale leader comes with the new
leader (``current_leader``) and its address (``node_endpoints``), so the client can retry
without a metadata round trip (KIP-951).
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID as Uuid

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.primitives import Buffer
from kafka_ds.protocol.schema import (
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    UUID,
    Array,
    Request,
    Response,
    Struct,
    f,
)


@dataclass(kw_only=True, slots=True)
class BatchIndexAndErrorMessage(Struct):
    batch_index: int = f(INT32, "8+")
    batch_index_error_message: str | None = f(STRING, "8+", nullable="8+", default=None)


@dataclass(kw_only=True, slots=True)
class LeaderIdAndEpoch(Struct):
    leader_id: int = f(INT32, "10+", default=-1)
    leader_epoch: int = f(INT32, "10+", default=-1)


@dataclass(kw_only=True, slots=True)
class PartitionProduceResponse(Struct):
    index: int = f(INT32)
    error_code: int = f(INT16)
    base_offset: int = f(INT64)
    # -1 unless the topic uses LogAppendTime, in which case it is the broker's timestamp.
    log_append_time_ms: int = f(INT64, "2+", default=-1, ignorable=True)
    log_start_offset: int = f(INT64, "5+", default=-1, ignorable=True)
    record_errors: list[BatchIndexAndErrorMessage] = f(
        Array(BatchIndexAndErrorMessage), "8+", ignorable=True)
    error_message: str | None = f(STRING, "8+", nullable="8+", default=None, ignorable=True)
    current_leader: LeaderIdAndEpoch = f(LeaderIdAndEpoch, "10+", tag=0)


@dataclass(kw_only=True, slots=True)
class TopicProduceResponse(Struct):
    name: str = f(STRING, "0-12", ignorable=True)
    topic_id: Uuid = f(UUID, "13+", ignorable=True)
    partition_responses: list[PartitionProduceResponse] = f(Array(PartitionProduceResponse))


@dataclass(kw_only=True, slots=True)
class NodeEndpoint(Struct):
    node_id: int = f(INT32, "10+")
    host: str = f(STRING, "10+")
    port: int = f(INT32, "10+")
    rack: str | None = f(STRING, "10+", nullable="10+", default=None)


@dataclass(kw_only=True, slots=True)
class ProduceResponse(Response):
    API_KEY = ApiKey.PRODUCE
    VALID_VERSIONS = (3, 13)
    FLEXIBLE_VERSIONS = "9+"

    responses: list[TopicProduceResponse] = f(Array(TopicProduceResponse))
    throttle_time_ms: int = f(INT32, "1+", ignorable=True)
    node_endpoints: list[NodeEndpoint] = f(Array(NodeEndpoint), "10+", tag=0)


@dataclass(kw_only=True, slots=True)
class PartitionProduceData(Struct):
    index: int = f(INT32)
    records: Buffer | None = f(RECORDS, nullable="0+")


@dataclass(kw_only=True, slots=True)
class TopicProduceData(Struct):
    name: str = f(STRING, "0-12", ignorable=True)
    topic_id: Uuid = f(UUID, "13+", ignorable=True)
    partition_data: list[PartitionProduceData] = f(Array(PartitionProduceData))


@dataclass(kw_only=True, slots=True)
class ProduceRequest(Request):
    API_KEY = ApiKey.PRODUCE
    VALID_VERSIONS = (3, 13)
    FLEXIBLE_VERSIONS = "9+"
    RESPONSE = ProduceResponse

    transactional_id: str | None = f(STRING, "3+", nullable="3+", default=None)
    # 0: no response at all; 1: the leader has written it; -1: every in-sync replica has.
    acks: int = f(INT16)
    timeout_ms: int = f(INT32)
    topic_data: list[TopicProduceData] = f(Array(TopicProduceData))
