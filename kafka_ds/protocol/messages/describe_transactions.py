"""DescribeTransactions (key 65): a transaction coordinator's view of transactional ids.

Sent to the coordinator of each id (FindCoordinator with key type 1). ``transaction_state``
is the coordinator's state name as text ("Empty", "Ongoing", "PrepareCommit",
"CompleteCommit", ...), and ``topics`` the partitions the open transaction holds.
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
class TopicData(Struct):
    topic: str = f(STRING)
    partitions: list[int] = f(Array(INT32))


@dataclass(kw_only=True, slots=True)
class TransactionState(Struct):
    error_code: int = f(INT16)
    transactional_id: str = f(STRING)
    transaction_state: str = f(STRING)
    transaction_timeout_ms: int = f(INT32)
    transaction_start_time_ms: int = f(INT64)
    producer_id: int = f(INT64)
    producer_epoch: int = f(INT16)
    topics: list[TopicData] = f(Array(TopicData))


@dataclass(kw_only=True, slots=True)
class DescribeTransactionsResponse(Response):
    API_KEY = ApiKey.DESCRIBE_TRANSACTIONS
    VALID_VERSIONS = (0, 0)
    FLEXIBLE_VERSIONS = "0+"

    throttle_time_ms: int = f(INT32)
    transaction_states: list[TransactionState] = f(Array(TransactionState))


@dataclass(kw_only=True, slots=True)
class DescribeTransactionsRequest(Request):
    API_KEY = ApiKey.DESCRIBE_TRANSACTIONS
    VALID_VERSIONS = (0, 0)
    FLEXIBLE_VERSIONS = "0+"
    RESPONSE = DescribeTransactionsResponse

    transactional_ids: list[str] = f(Array(STRING))
