"""EndTxn (key 26): commit or abort the ongoing transaction of a transactional id.

Any client that knows the transactional id, producer id and epoch may send it: the coordinator
does not tie a transaction to a connection, which is what lets a driver finish transactions
its tasks prepared. Ending a transaction that holds no partitions is an error; retrying a
commit that has already completed succeeds. From v5 (transactions v2, KIP-890) the
coordinator bumps the epoch at the end of every transaction and returns the producer id and
epoch the producer must use next.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.schema import BOOL, INT16, INT32, INT64, STRING, Request, Response, f


@dataclass(kw_only=True, slots=True)
class EndTxnResponse(Response):
    API_KEY = ApiKey.END_TXN
    VALID_VERSIONS = (0, 5)
    FLEXIBLE_VERSIONS = "3+"

    throttle_time_ms: int = f(INT32)
    error_code: int = f(INT16)
    producer_id: int = f(INT64, "5+", default=-1, ignorable=True)
    producer_epoch: int = f(INT16, "5+", default=-1, ignorable=True)


@dataclass(kw_only=True, slots=True)
class EndTxnRequest(Request):
    API_KEY = ApiKey.END_TXN
    VALID_VERSIONS = (0, 5)
    FLEXIBLE_VERSIONS = "3+"
    RESPONSE = EndTxnResponse

    transactional_id: str = f(STRING)
    producer_id: int = f(INT64)
    producer_epoch: int = f(INT16)
    # True commits, False aborts.
    committed: bool = f(BOOL)
