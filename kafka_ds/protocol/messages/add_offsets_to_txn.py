"""AddOffsetsToTxn (key 25): make a consumer group's offset commit part of a transaction.

Sent to the transaction coordinator before TxnOffsetCommit (which then goes to the group
coordinator), so that the group's offsets topic partition takes part in the commit or abort.
Under transactions v2 (KIP-890) TxnOffsetCommit v5 does this itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.schema import INT16, INT32, INT64, STRING, Request, Response, f


@dataclass(kw_only=True, slots=True)
class AddOffsetsToTxnResponse(Response):
    API_KEY = ApiKey.ADD_OFFSETS_TO_TXN
    VALID_VERSIONS = (0, 4)
    FLEXIBLE_VERSIONS = "3+"

    throttle_time_ms: int = f(INT32)
    error_code: int = f(INT16)


@dataclass(kw_only=True, slots=True)
class AddOffsetsToTxnRequest(Request):
    API_KEY = ApiKey.ADD_OFFSETS_TO_TXN
    VALID_VERSIONS = (0, 4)
    FLEXIBLE_VERSIONS = "3+"
    RESPONSE = AddOffsetsToTxnResponse

    transactional_id: str = f(STRING)
    producer_id: int = f(INT64)
    producer_epoch: int = f(INT16)
    group_id: str = f(STRING)
