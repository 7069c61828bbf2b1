"""ListTransactions (key 66): the transactional ids a broker coordinates, with filters.

Each broker answers only for the transaction-state partitions it leads, so a full listing
asks every broker. Empty filter lists mean "no filter"; state names the broker does not know
come back in ``unknown_state_filters``. ``duration_filter`` (v1+) keeps only transactions
running longer than that many ms, and ``transactional_id_pattern`` (v2+, KIP-1152) is a
regular expression on the id.
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
class TransactionState(Struct):
    transactional_id: str = f(STRING)
    producer_id: int = f(INT64)
    transaction_state: str = f(STRING)


@dataclass(kw_only=True, slots=True)
class ListTransactionsResponse(Response):
    API_KEY = ApiKey.LIST_TRANSACTIONS
    VALID_VERSIONS = (0, 2)
    FLEXIBLE_VERSIONS = "0+"

    throttle_time_ms: int = f(INT32)
    error_code: int = f(INT16)
    unknown_state_filters: list[str] = f(Array(STRING))
    transaction_states: list[TransactionState] = f(Array(TransactionState))


@dataclass(kw_only=True, slots=True)
class ListTransactionsRequest(Request):
    API_KEY = ApiKey.LIST_TRANSACTIONS
    VALID_VERSIONS = (0, 2)
    FLEXIBLE_VERSIONS = "0+"
    RESPONSE = ListTransactionsResponse

    state_filters: list[str] = f(Array(STRING))
    producer_id_filters: list[int] = f(Array(INT64))
    # Negative: no filter.
    duration_filter: int = f(INT64, "1+", default=-1)
    transactional_id_pattern: str | None = f(STRING, "2+", nullable="2+", default=None)
