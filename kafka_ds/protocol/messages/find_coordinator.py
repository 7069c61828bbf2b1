"""FindCoordinator (key 10): which broker coordinates a consumer group or a transactional id.

``key_type`` 0 is a group, 1 a transactional id (2, a share group, is for v6+). Up to v3 the
request carries one ``key`` and the response one coordinator in top-level fields; from v4
(KIP-699) the request carries ``coordinator_keys`` and the response one ``coordinators`` entry
per key, each with its own error, so a batch can partly fail.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.schema import INT8, INT16, INT32, STRING, Array, Request, Response, Struct, f


@dataclass(kw_only=True, slots=True)
class Coordinator(Struct):
    key: str = f(STRING, "4+")
    node_id: int = f(INT32, "4+")
    host: str = f(STRING, "4+")
    port: int = f(INT32, "4+")
    error_code: int = f(INT16, "4+")
    error_message: str | None = f(STRING, "4+", nullable="4+", ignorable=True)


@dataclass(kw_only=True, slots=True)
class FindCoordinatorResponse(Response):
    API_KEY = ApiKey.FIND_COORDINATOR
    VALID_VERSIONS = (0, 6)
    FLEXIBLE_VERSIONS = "3+"

    throttle_time_ms: int = f(INT32, "1+", ignorable=True)
    error_code: int = f(INT16, "0-3")
    error_message: str | None = f(STRING, "1-3", nullable="1-3", ignorable=True)
    node_id: int = f(INT32, "0-3")
    host: str = f(STRING, "0-3")
    port: int = f(INT32, "0-3")
    coordinators: list[Coordinator] = f(Array(Coordinator), "4+")


@dataclass(kw_only=True, slots=True)
class FindCoordinatorRequest(Request):
    API_KEY = ApiKey.FIND_COORDINATOR
    VALID_VERSIONS = (0, 6)
    FLEXIBLE_VERSIONS = "3+"
    RESPONSE = FindCoordinatorResponse

    key: str = f(STRING, "0-3")
    # 0: consumer group; 1: transactional id; 2: share group (v6+).
    key_type: int = f(INT8, "1+")
    coordinator_keys: list[str] = f(Array(STRING), "4+")
