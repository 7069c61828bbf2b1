"""DeleteTopics (key 20): delete topics by name or (v6+) by id.

Up to v5 the request is a plain list of names; v6 replaces it with ``topics``, where each
entry gives a name or a topic id (the other left null / zero). Deletion is asynchronous: a
success means the controller accepted it, and the topic may linger in metadata briefly.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID as Uuid

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.schema import (
    INT16,
    INT32,
    STRING,
    UUID,
    Array,
    Request,
    Response,
    Struct,
    f,
)


@dataclass(kw_only=True, slots=True)
class DeletableTopicResult(Struct):
    # Null (v6+) when the topic was named by an id the broker does not know.
    name: str | None = f(STRING, nullable="6+")
    topic_id: Uuid = f(UUID, "6+", ignorable=True)
    error_code: int = f(INT16)
    error_message: str | None = f(STRING, "5+", nullable="5+", default=None, ignorable=True)


@dataclass(kw_only=True, slots=True)
class DeleteTopicsResponse(Response):
    API_KEY = ApiKey.DELETE_TOPICS
    VALID_VERSIONS = (1, 6)
    FLEXIBLE_VERSIONS = "4+"

    throttle_time_ms: int = f(INT32, "1+", ignorable=True)
    responses: list[DeletableTopicResult] = f(Array(DeletableTopicResult))


@dataclass(kw_only=True, slots=True)
class DeleteTopicState(Struct):
    name: str | None = f(STRING, "6+", nullable="6+", default=None)
    topic_id: Uuid = f(UUID, "6+")


@dataclass(kw_only=True, slots=True)
class DeleteTopicsRequest(Request):
    API_KEY = ApiKey.DELETE_TOPICS
    VALID_VERSIONS = (1, 6)
    FLEXIBLE_VERSIONS = "4+"
    RESPONSE = DeleteTopicsResponse

    topics: list[DeleteTopicState] = f(Array(DeleteTopicState), "6+")
    topic_names: list[str] = f(Array(STRING), "0-5", ignorable=True)
    timeout_ms: int = f(INT32)
