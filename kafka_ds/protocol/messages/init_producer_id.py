"""InitProducerId (key 22): obtain a producer id and epoch, for idempotence or transactions.

Without a transactional id any broker answers, with a fresh producer id. With one, the request
goes to the transaction coordinator, which bumps the epoch of that id: this fences every older
producer using it and aborts (or completes) the transaction it left open. From v3 a producer
that already holds an id and epoch sends them, so the coordinator can bump its epoch instead
of treating it as a stranger (recovery after INVALID_PRODUCER_EPOCH and friends). The epoch
is an int16 that the broker may roll over by handing out a new producer id.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.schema import INT16, INT32, INT64, STRING, Request, Response, f


@dataclass(kw_only=True, slots=True)
class InitProducerIdResponse(Response):
    API_KEY = ApiKey.INIT_PRODUCER_ID
    # v6 (KIP-939, two-phase commit) is marked unstable: brokers refuse it unless an internal
    # flag is set, so it cannot be used against a released broker.
    VALID_VERSIONS = (0, 5)
    FLEXIBLE_VERSIONS = "2+"

    throttle_time_ms: int = f(INT32, ignorable=True)
    error_code: int = f(INT16)
    producer_id: int = f(INT64, default=-1)
    producer_epoch: int = f(INT16)


@dataclass(kw_only=True, slots=True)
class InitProducerIdRequest(Request):
    API_KEY = ApiKey.INIT_PRODUCER_ID
    # v6 (KIP-939) is unstable; see the response.
    VALID_VERSIONS = (0, 5)
    FLEXIBLE_VERSIONS = "2+"
    RESPONSE = InitProducerIdResponse

    # None for an idempotent producer that is not transactional.
    transactional_id: str | None = f(STRING, nullable="0+")
    transaction_timeout_ms: int = f(INT32)
    producer_id: int = f(INT64, "3+", default=-1)
    producer_epoch: int = f(INT16, "3+", default=-1)
